"""How memory text is cut into chunks (reference §14.3): the chunk ids, positions and vector choice.

Chunks are derived data: the same text and :class:`protocol.semantic.ChunkingRules` always give the
same chunks with the same content-derived ids, so the index can tell a current chunk from a stale
one by recomputing them (:func:`memory_chunks`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from protocol.identities import semantic_chunk_id
from protocol.semantic import (
    EVENT_VECTOR_CHUNKS,
    INVALID_UTF8_MESSAGE,
    ChunkingError,
    ChunkingRules,
    MemoryChunk,
    SourceMemory,
    parent_key,
)
from protocol.source_text import quoted_in


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


def split_text(text: str, rules: ChunkingRules) -> list[str]:
    """Overlapping chunks of ``text``: at most ``chunk_bytes`` bytes, never splitting a character.

    A chunk with more than ``max_lines`` lines keeps its first ``max_lines`` lines plus a
    trailing newline. The next chunk starts ``overlap_bytes`` before the previous end (at least
    one byte further, moved forward to a character start). Empty text has no chunks.
    """
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ChunkingError(INVALID_UTF8_MESSAGE) from None
    length = len(data)
    chunks: list[str] = []
    offset = 0
    while offset < length:
        end = min(offset + rules.chunk_bytes, length)
        while offset < end < length and _is_continuation(data[end]):
            end -= 1
        chunk = data[offset:end].decode("utf-8")
        lines = chunk.split("\n")
        if len(lines) > rules.max_lines:
            chunk = "\n".join(lines[: rules.max_lines]) + "\n"
        chunks.append(chunk)
        end = offset + len(chunk.encode("utf-8"))
        if end >= length:
            break
        following = max(offset + 1, end - rules.overlap_bytes)
        while following < end and _is_continuation(data[following]):
            following += 1
        offset = following
    return chunks


def chunk_memory(kind: str, memory_id: str, content: str, rules: ChunkingRules) -> list[MemoryChunk]:
    """The chunks of one memory with their ids, in position order."""
    key = parent_key(kind, memory_id)
    return [
        MemoryChunk(semantic_chunk_id(kind, memory_id, position, text), key, position, text)
        for position, text in enumerate(split_text(content, rules))
    ]


def chunk_event(event_id: str, seq: int, content: str, rules: ChunkingRules) -> list[MemoryChunk]:
    """The chunks of one transcript event; only the first :data:`EVENT_VECTOR_CHUNKS` get a vector."""
    key = parent_key("event", event_id)
    return [
        MemoryChunk(
            semantic_chunk_id("event", event_id, position, text),
            key,
            position,
            text,
            seq,
            seq,
            embedded=position < EVENT_VECTOR_CHUNKS,
        )
        for position, text in enumerate(split_text(content, rules))
    ]


def memory_chunks(
    memory: SourceMemory, rules: ChunkingRules, quoted_sources: Sequence[str] = ()
) -> list[MemoryChunk]:
    """The current chunks of a memory's text. A memory chunk that only quotes one of ``quoted_sources``
    (the texts of the events it cites) gets no vector of its own: the event's chunk carries that
    meaning, and a hit on it leads back to the memory."""
    if memory.kind == "event":
        return chunk_event(memory.memory_id, memory.seq or 0, memory.content, rules)
    chunks = chunk_memory(memory.kind, memory.memory_id, memory.content, rules)
    if not quoted_sources:
        return chunks
    return [
        replace(chunk, embedded=False)
        if any(quoted_in(chunk.text, source) for source in quoted_sources)
        else chunk
        for chunk in chunks
    ]
