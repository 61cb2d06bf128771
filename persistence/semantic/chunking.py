"""Planning one indexing batch: which memories' chunks to embed next (reference §14.3, §14.4).

Memories are taken per table in ``rowid`` order after the cursors; a memory already indexed with
the same content digest only moves the cursor; a memory is added whole or, when it does not fit
the batch, its first chunks are embedded and it is completed by the next batch. A memory's chunks
are those of its own text followed by its source chunks (the cited events' text, when an events
root is known: :mod:`persistence.semantic.source_events`).
"""

from __future__ import annotations

from dataclasses import dataclass

from persistence.semantic.manifest import Manifest
from persistence.semantic.source_events import SourceEvents
from persistence.semantic.sources import (
    KINDS,
    SemanticSourceReader,
    SemanticState,
    SourceFingerprint,
    SourceRow,
    content_digest,
)
from protocol.semantic import ChunkingRules, MemoryChunk


@dataclass
class BatchPlan:
    """What one synchronization batch will embed and record, planned under the lock."""

    state: SemanticState
    fingerprint: SourceFingerprint
    manifest_token: tuple[str | None, str | None]
    chunks: list[MemoryChunk]
    completed: list[tuple[str, str]]
    new_memories: list[tuple[str, str]]
    cursors: dict[str, int]
    cursors_changed: bool
    rebuilt: bool
    rebuild_reason: str | None
    keyword_invalid: bool
    memories_read: int = 0
    memories_chunked: int = 0


def collect(
    reader: SemanticSourceReader,
    manifest: Manifest,
    plan: BatchPlan,
    size: int,
    rules: ChunkingRules,
    sources: SourceEvents | None = None,
) -> None:
    """Fill ``plan`` with the next chunks after the cursors; stop before a memory that does not fit."""
    for kind in KINDS:
        while len(plan.chunks) < size:
            rows = reader.rows_after(kind, plan.cursors[kind], size)
            plan.memories_read += len(rows)
            if not rows:
                break
            for row in rows:
                if not _take(manifest, plan, row, size, rules, sources):
                    return
            if len(plan.chunks) >= size:
                return
        if len(plan.chunks) >= size:
            return


def _take(
    manifest: Manifest,
    plan: BatchPlan,
    row: SourceRow,
    size: int,
    rules: ChunkingRules,
    sources: SourceEvents | None,
) -> bool:
    """Add one memory's missing chunks; False when it does not fit whole (the batch is full)."""
    memory = row.memory
    digest = content_digest(memory.content)
    if manifest.memory_digest(memory.parent_key) == digest:
        plan.cursors[memory.kind] = row.rowid
        plan.cursors_changed = True
        return True
    chunks = memory.chunks(rules)
    if sources is not None and memory.source_seqs:
        chunks += memory.source_chunks(rules, sources.texts(memory.session_id, memory.source_seqs))
    plan.memories_chunked += 1
    done = manifest.chunk_ids_of(memory.parent_key)
    todo = [chunk for chunk in chunks if chunk.chunk_id not in done]
    room = size - len(plan.chunks)
    if len(todo) > room:
        plan.chunks.extend(todo[:room])
        return False
    plan.chunks.extend(todo)
    plan.new_memories.append((memory.parent_key, digest))
    plan.cursors[memory.kind] = row.rowid
    plan.cursors_changed = True
    return True
