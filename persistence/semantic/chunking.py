"""Planning one indexing batch: which chunks to index next (reference §14.3, §14.4).

Rows are taken per table (observations, reflections, transcript events) in ``rowid`` order after
the cursors; a row already indexed with the same content digest only moves the cursor; a row is
added whole or, when it does not fit the batch, its first chunks are indexed and it is completed by
the next batch. The batch is bounded by the chunks that need a vector (the embedding work) and, at
eight times that, by all chunks (the keyword index and manifest work).

Every chunk is keyword-indexed; the vector side gets an event's first chunk
(:data:`protocol.semantic.EVENT_VECTOR_CHUNKS`) and every memory chunk except one that only quotes
an event it cites (that event's chunk carries its meaning, and a hit on it leads to the memory).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from persistence.semantic.chunks import memory_chunks
from persistence.semantic.manifest import Manifest
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
    removed: frozenset[str] = frozenset()
    """Indexed memories and events that are gone from the source (forgotten): removed in place."""
    removed_labels: dict[int, bool] = field(default_factory=dict)
    """Their chunk labels, each with whether it has a vector."""
    keyword_rows: list[tuple[int, str]] | None = None
    """With a removal: the chunk texts the keyword index keeps (rebuilt outside the lock)."""

    @property
    def embedded(self) -> int:
        """Chunks of the batch that need a vector."""
        return sum(1 for chunk in self.chunks if chunk.embedded)


CHUNKS_PER_VECTOR: int = 8
"""Bound of a batch's chunks per chunk that needs a vector (keyword-only chunks are cheap, not free)."""


def _full(plan: BatchPlan, size: int) -> bool:
    return plan.embedded >= size or len(plan.chunks) >= size * CHUNKS_PER_VECTOR


def collect(
    reader: SemanticSourceReader, manifest: Manifest, plan: BatchPlan, size: int, rules: ChunkingRules
) -> None:
    """Fill ``plan`` with the next chunks after the cursors; stop before a row that does not fit."""
    for kind in KINDS:
        while not _full(plan, size):
            rows = reader.rows_after(kind, plan.cursors[kind], size)
            plan.memories_read += len(rows)
            if not rows:
                break
            quotes = reader.transcript_texts_of(
                [
                    (row.memory.session_id, seq)
                    for row in rows
                    if row.memory.kind == "observation"
                    for seq in row.memory.source_seqs
                ]
            )
            for row in rows:
                if not _take(manifest, plan, row, size, rules, quotes):
                    return
            if _full(plan, size):
                return
        if _full(plan, size):
            return


def _take(
    manifest: Manifest,
    plan: BatchPlan,
    row: SourceRow,
    size: int,
    rules: ChunkingRules,
    quotes: dict[tuple[str, int], str],
) -> bool:
    """Add one row's missing chunks; False when it does not fit whole (the batch is full).
    ``quotes``: the transcript texts the page's observations cite, by ``(session, seq)``."""
    memory = row.memory
    digest = content_digest(memory.content)
    if manifest.memory_digest(memory.parent_key) == digest:
        plan.cursors[memory.kind] = row.rowid
        plan.cursors_changed = True
        return True
    quoted: list[str] = []
    if memory.kind == "observation" and memory.source_seqs:
        # In seq order, as one read of this observation's events returned them.
        cited = sorted(set(memory.source_seqs))
        quoted = [quotes[key] for seq in cited if (key := (memory.session_id, seq)) in quotes]
    chunks = memory_chunks(memory, rules, quoted)
    plan.memories_chunked += 1
    done = manifest.chunk_ids_of(memory.parent_key)
    todo = [chunk for chunk in chunks if chunk.chunk_id not in done]
    taken = 0
    for chunk in todo:
        if _full(plan, size):
            break
        plan.chunks.append(chunk)
        taken += 1
    if taken < len(todo):
        return False
    plan.new_memories.append((memory.parent_key, digest))
    plan.cursors[memory.kind] = row.rowid
    plan.cursors_changed = True
    return True
