"""Which chunks one indexing batch takes (reference §14.3, §14.4): the indexer's planning rule.

Rows are taken per table (observations, reflections, transcript events) in ``rowid`` order after
the cursors; a row already indexed with the same content digest only moves the cursor; a row is
added whole or, when it does not fit the batch, its first chunks are indexed and it is completed by
the next batch. The batch is bounded by the chunks that need a vector (the embedding work) and, at
eight times that, by all chunks (the keyword index and manifest work).

Every chunk is keyword-indexed; the vector side gets an event's first chunk
(:data:`protocol.semantic.EVENT_VECTOR_CHUNKS`) and every memory chunk except one that only quotes
an event it cites (that event's chunk carries its meaning, and a hit on it leads to the memory).

It reads through a :class:`persistence.semantic.batches.BatchSource` (the index's reads under its
lock) and does no other I/O.
"""

from __future__ import annotations

from persistence.semantic.batches import BatchPlan, BatchSource
from persistence.semantic.chunks import memory_chunks
from persistence.semantic.sources import KINDS, SourceRow, content_digest

CHUNKS_PER_VECTOR: int = 8
"""Bound of a batch's chunks per chunk that needs a vector (keyword-only chunks are cheap, not free)."""


def _full(plan: BatchPlan, size: int) -> bool:
    return plan.embedded >= size or len(plan.chunks) >= size * CHUNKS_PER_VECTOR


def plan_batch(source: BatchSource, size: int) -> BatchPlan:
    """Fill ``source.plan`` with the next chunks after its cursors, at most ``size`` that need a
    vector; stop before a row that does not fit. Returns the plan."""
    plan = source.plan
    for kind in KINDS:
        while not _full(plan, size):
            rows = source.rows_after(kind, plan.cursors[kind], size)
            plan.memories_read += len(rows)
            if not rows:
                break
            quotes = source.transcript_texts_of(
                [
                    (row.memory.session_id, seq)
                    for row in rows
                    if row.memory.kind == "observation"
                    for seq in row.memory.source_seqs
                ]
            )
            for row in rows:
                if not _take(source, row, size, quotes):
                    return plan
            if _full(plan, size):
                return plan
        if _full(plan, size):
            return plan
    return plan


def _take(source: BatchSource, row: SourceRow, size: int, quotes: dict[tuple[str, int], str]) -> bool:
    """Add one row's missing chunks; False when it does not fit whole (the batch is full).
    ``quotes``: the transcript texts the page's observations cite, by ``(session, seq)``."""
    plan = source.plan
    memory = row.memory
    digest = content_digest(memory.content)
    if source.indexed_digest(memory.parent_key) == digest:
        plan.cursors[memory.kind] = row.rowid
        plan.cursors_changed = True
        return True
    quoted: list[str] = []
    if memory.kind == "observation" and memory.source_seqs:
        # In seq order, as one read of this observation's events returned them.
        cited = sorted(set(memory.source_seqs))
        quoted = [quotes[key] for seq in cited if (key := (memory.session_id, seq)) in quotes]
    chunks = memory_chunks(memory, source.rules, quoted)
    plan.memories_chunked += 1
    done = source.indexed_chunk_ids(memory.parent_key)
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
