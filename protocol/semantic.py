"""Pure logic of hybrid retrieval (reference §14.3, §14.5, §14.7, §13.4).

The chunker and chunk ids, reciprocal-rank fusion, per-store candidate filtering with its
truthful ``truncated`` flag, per-kind date filtering, collapsing chunk hits to memories, and the
tool answers of hybrid ``memory_search``. No I/O: the derived index files, the lock and the
lifecycle live in ``persistence.semantic``; the HTTP/offline clients live elsewhere and only
have to satisfy :class:`Embedder` and :class:`Reranker`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal, Protocol

from protocol.canonical import condense
from protocol.errors import OmrayError
from protocol.identities import semantic_chunk_id
from protocol.ids import display_id
from protocol.settings import EmbeddingApiSettings
from protocol.source_text import SourceExcerpt, quoted_in

_logger = logging.getLogger("omray.semantic")

MemoryKind = Literal["observation", "reflection", "event"]
"""What is indexed: the two kinds of memory (reference §14.2), and every covered event's text (the
transcript, ``omray_transcript``), which is what keeps everything the Observer was shown findable."""

EVENT_VECTOR_CHUNKS: Final[int] = 1
"""Chunks of one event's text that get a vector (the rest are keyword-indexed only): a long tool
output or answer costs one embedding, not one per kilobyte, so indexing stays O(events)."""
EVENT_VECTOR_CHARS: Final[int] = 400
"""Characters of an event chunk that its vector is computed from (about 96 tokens); the keyword
index and exact search see the whole text. On the LongMemEval dev set, vectors of the first 96 and
of the first 128 tokens of each message rank alike (turn R@10 0.93 both, R@1 0.67 and 0.69), and
embedding time grows with the tokens embedded."""

SemanticErrorCode = Literal[
    "index_building",
    "index_busy",
    "embedding_unavailable",
    "reranker_unavailable",
    "embedding_dimensions_changed",
    "semantic_search_failed",
]
"""Failure codes of hybrid search (reference §14.7)."""

RRF_K: Final[int] = 60
"""Reciprocal-rank fusion constant."""
STORE_HIT_LIMIT: Final[int] = 100
"""Kept hits per store (vector, keyword)."""
STORE_OVERFETCH_LIMIT: Final[int] = 500
"""Hits read per store when hits can be filtered out (date bounds or a partial index)."""
FUSED_CANDIDATE_LIMIT: Final[int] = 200
"""Fused chunk candidates kept after fusion."""

INDEX_BUILDING_MESSAGE: Final[str] = (
    "The semantic index is being built or rebuilt; retry memory_search once indexing has caught up."
)
INDEX_BUSY_MESSAGE: Final[str] = "Semantic index is busy; retry after indexing completes."
EMBEDDING_UNAVAILABLE_MESSAGE: Final[str] = "Embedding request failed or returned invalid vectors."
RERANKER_UNAVAILABLE_MESSAGE: Final[str] = "The configured reranker failed or gave an invalid answer."
QUERY_DIMENSIONS_MESSAGE: Final[str] = "Query embedding dimensions changed; the semantic index must rebuild."
INDEX_DIMENSIONS_MESSAGE: Final[str] = "Embedding dimensions changed; semantic index requires rebuilding."
SEARCH_FAILED_MESSAGE: Final[str] = (
    "Hybrid memory search failed unexpectedly; no results are available for this query."
)
NO_CANONICAL_MEMORY_MESSAGE: Final[str] = "Semantic result has no canonical memory."
INVALID_UTF8_MESSAGE: Final[str] = "Memory text must be valid UTF-8."


class SemanticSearchError(OmrayError):
    """A visible hybrid-search or indexing failure with its §14.7 code (never replaced by exact search).

    ``progress`` carries memory-unit counters (``indexed_count``, ``source_count``) for
    ``index_building``; the message never holds memory text, queries or vectors.
    """

    def __init__(self, code: SemanticErrorCode, message: str, progress: Mapping[str, int] | None = None):
        super().__init__(message)
        self.code: SemanticErrorCode = code
        self.message = message
        self.progress: dict[str, int] = dict(progress or {})

    def as_result(self) -> dict[str, object]:
        """The tool answer: ``{ok: false, error, message}`` merged with the progress counters."""
        return {"ok": False, "error": self.code, "message": self.message, **self.progress}


class ChunkingError(OmrayError, ValueError):
    """Memory text cannot be chunked (not encodable as UTF-8)."""


class Embedder(Protocol):
    """Turns texts into vectors, one per text, all of one dimension.

    Raises ``SemanticSearchError('embedding_unavailable', ...)`` on any failure.
    """

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors of ``texts``, in order."""
        ...


class Reranker(Protocol):
    """Reorders candidate documents for a query.

    Returns original offsets in the new order, documents under ``min_score`` left out. Raises
    ``SemanticSearchError('reranker_unavailable', ...)`` on any failure.
    """

    def rerank(self, query: str, documents: Sequence[str]) -> list[int]:
        """Offsets of ``documents``, best first."""
        ...


# ------------------------------------------------------------------------------------- chunker


@dataclass(frozen=True, slots=True)
class ChunkingRules:
    """How memory text is cut into chunks (reference §14.3)."""

    chunk_bytes: int
    """Maximum UTF-8 bytes per chunk."""
    overlap_bytes: int
    """Bytes shared by consecutive chunks."""
    max_lines: int
    """Maximum lines per chunk."""

    @classmethod
    def from_settings(cls, settings: EmbeddingApiSettings) -> ChunkingRules:
        """The rules of an embedding endpoint's settings."""
        return cls(settings.chunk_bytes, settings.overlap_bytes, settings.max_lines)


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


def parent_key(kind: str, memory_id: str) -> str:
    """``"<kind>:<id>"``: the key of a memory in the index."""
    return f"{kind}:{memory_id}"


@dataclass(frozen=True, slots=True)
class MemoryChunk:
    """One chunk of one memory."""

    chunk_id: str
    """32-hex content-derived id (``protocol.identities.semantic_chunk_id``)."""
    parent_key: str
    """``"<kind>:<id>"`` of the memory."""
    position: int
    """0-based position of the chunk in its memory."""
    text: str
    """Chunk text."""
    seq_start: int | None = None
    """For a transcript chunk: the seq of its event (``None``: memory text)."""
    seq_end: int | None = None
    """For a transcript chunk: the seq of its event."""
    embedded: bool = True
    """Whether the chunk has a vector (every chunk is keyword-indexed)."""

    @property
    def excerpt(self) -> SourceExcerpt | None:
        """The source excerpt of a transcript chunk; ``None`` for a chunk of memory text."""
        if self.seq_start is None or self.seq_end is None:
            return None
        return SourceExcerpt(self.seq_start, self.seq_end, condense(self.text))

    @property
    def vector_text(self) -> str:
        """The text its vector is computed from: a transcript chunk's first :data:`EVENT_VECTOR_CHARS`."""
        return self.text[:EVENT_VECTOR_CHARS] if self.seq_start is not None else self.text


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


@dataclass(frozen=True, slots=True)
class SourceMemory:
    """One canonical memory as indexed and returned by hybrid search (reference §14.2)."""

    kind: MemoryKind
    """``observation``, ``reflection`` or ``event`` (a transcript event)."""
    memory_id: str
    """Full 64-hex id (an event's is ``protocol.identities.transcript_event_id``)."""
    session_id: str
    """Session (run) the memory belongs to."""
    timestamp: str
    """Observation or event ``timestamp`` (``YYYY-MM-DD HH:MM``) or reflection ``created_at`` (ISO-8601)."""
    content: str
    """Memory text (an event's searchable text)."""
    importance: str | None = None
    """Observation relevance; ``None`` for reflections and events."""
    source_seqs: tuple[int, ...] = ()
    """Seqs of the events of its own session that the memory cites (an event: its own seq)."""
    covered_by: str | None = None
    """For an event shown on its own although an observation covers it (that observation is an
    earlier result already): the observation's id."""

    @property
    def parent_key(self) -> str:
        """``"<kind>:<id>"``."""
        return parent_key(self.kind, self.memory_id)

    @property
    def seq(self) -> int | None:
        """An event's seq (``None`` for memories)."""
        return self.source_seqs[0] if self.kind == "event" and self.source_seqs else None

    def chunks(self, rules: ChunkingRules, quoted_sources: Sequence[str] = ()) -> list[MemoryChunk]:
        """The current chunks of its text. A memory chunk that only quotes one of ``quoted_sources``
        (the texts of the events it cites) gets no vector of its own: the event's chunk carries that
        meaning, and a hit on it leads back to the memory."""
        if self.kind == "event":
            return chunk_event(self.memory_id, self.seq or 0, self.content, rules)
        chunks = chunk_memory(self.kind, self.memory_id, self.content, rules)
        if not quoted_sources:
            return chunks
        return [
            replace(chunk, embedded=False)
            if any(quoted_in(chunk.text, source) for source in quoted_sources)
            else chunk
            for chunk in chunks
        ]


# ------------------------------------------------------------------------------- date filtering


class _DateBoundsSource(Protocol):
    @property
    def observation_after(self) -> str | None: ...
    @property
    def observation_before(self) -> str | None: ...
    @property
    def reflection_after(self) -> str | None: ...
    @property
    def reflection_before(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class DateBounds:
    """Inclusive per-kind date bounds, already normalized (``actors.read.search`` does that)."""

    observation_after: str | None = None
    """Lower bound on an observation ``timestamp`` (``YYYY-MM-DD HH:MM``)."""
    observation_before: str | None = None
    """Upper bound on an observation ``timestamp``."""
    reflection_after: str | None = None
    """Lower bound on a reflection ``created_at`` (ISO-8601 UTC)."""
    reflection_before: str | None = None
    """Upper bound on a reflection ``created_at``."""

    @classmethod
    def from_request(cls, request: _DateBoundsSource) -> DateBounds:
        """The bounds of a validated ``actors.read.search.SearchRequest``."""
        return cls(
            request.observation_after,
            request.observation_before,
            request.reflection_after,
            request.reflection_before,
        )

    @property
    def active(self) -> bool:
        """Whether any bound is set."""
        return any(
            bound is not None
            for bound in (
                self.observation_after,
                self.observation_before,
                self.reflection_after,
                self.reflection_before,
            )
        )

    def accepts(self, kind: str, timestamp: str) -> bool:
        """Whether a memory of ``kind`` dated ``timestamp`` is inside the bounds (string compares; an
        event is dated like an observation)."""
        if kind in ("observation", "event"):
            after, before = self.observation_after, self.observation_before
        else:
            after, before = self.reflection_after, self.reflection_before
        return (after is None or after <= timestamp) and (before is None or timestamp <= before)


# ------------------------------------------------------------------------------ store candidates


def store_fetch_size(chunk_count: int, filtered: bool, limit: int = STORE_HIT_LIMIT) -> int:
    """Hits to read from one store: ``min(max(1, chunks), 500 if filtered else limit)``."""
    return min(max(1, chunk_count), STORE_OVERFETCH_LIMIT if filtered else limit)


@dataclass(frozen=True, slots=True)
class StoreHits:
    """Hits kept from one store, in rank order, and whether the store had more to give."""

    chunk_ids: tuple[str, ...]
    """Kept chunk ids, best first."""
    truncated: bool
    """True when the read stopped at a bound while the store held more chunks."""


def filter_store_hits(
    ranked: Iterable[str],
    accept: Callable[[str], bool],
    fetch: int,
    chunk_count: int,
    limit: int = STORE_HIT_LIMIT,
) -> StoreHits:
    """Keep up to ``limit`` accepted hits among the first ``fetch`` ranked ones (reference §14.5 #11).

    ``truncated`` is true when ``fetch`` hits were read while the store holds more chunks, or when
    the ``limit`` was reached before the store was exhausted.
    """
    kept: list[str] = []
    seen = 0
    truncated = False
    for chunk_id in ranked:
        if seen >= fetch:
            break
        seen += 1
        truncated = seen >= fetch and chunk_count > seen
        if not accept(chunk_id):
            continue
        kept.append(chunk_id)
        if len(kept) >= limit:
            truncated = truncated or chunk_count > seen
            break
    return StoreHits(tuple(kept), truncated)


def rrf_fuse(
    ranked_lists: Sequence[Sequence[str]], k: int = RRF_K, limit: int = FUSED_CANDIDATE_LIMIT
) -> list[str]:
    """Reciprocal-rank fusion: score ``sum(1 / (k + rank))`` (rank from 1), best first, at most ``limit``.

    Ties keep the better single rank, then the earlier list.
    """
    scores: dict[str, float] = {}
    best: dict[str, tuple[int, int]] = {}
    for list_index, ranked in enumerate(ranked_lists):
        for rank, item in enumerate(ranked, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(best.get(item, (rank, list_index)), (rank, list_index))
    ordered = sorted(scores, key=lambda item: (-scores[item], best[item]))
    return ordered[:limit]


FusionMode = Literal["convex", "rrf", "keyword"]
"""How the vector and keyword rankings are fused: score-aware convex combination, rank-only RRF, or
the keyword ranking alone (kept for comparison in ``omray bench recall``)."""
CONVEX_VECTOR_WEIGHT: Final[float] = 0.5
"""Weight of the normalized vector score in the convex fusion (the keyword score gets the rest)."""


def convex_fuse(
    vector_hits: Sequence[str],
    vector_scores: Mapping[str, float],
    keyword_hits: Sequence[str],
    keyword_scores: Mapping[str, float],
    weight: float = CONVEX_VECTOR_WEIGHT,
    limit: int = FUSED_CANDIDATE_LIMIT,
) -> list[str]:
    """Score-aware fusion: ``weight * cosine + (1 - weight) * bm25 / best bm25``.

    Unlike RRF it keeps how far apart the scores are: a chunk that BM25 scores far above the rest
    (a rare name, a number) is not levelled with the runner-up, and two nearly equal vector hits
    stay nearly equal. ``vector_scores`` are cosine similarities (clipped to 0..1), keyword scores
    are divided by the best keyword hit's (the theoretical minimum of both is 0, so no per-query
    min-max stretches small differences). The score maps may hold candidates the other list did
    not rank: a keyword hit is scored by its true cosine, a vector hit by its true BM25; a
    candidate with no score on a side gets 0 there. Ties keep the better vector rank, then the
    keyword rank.
    """
    best = max((keyword_scores.get(item, 0.0) for item in keyword_hits), default=0.0)
    rank = {item: position for position, item in enumerate(vector_hits)}
    keyword_rank = {item: position for position, item in enumerate(keyword_hits)}

    def score(item: str) -> float:
        cosine = min(1.0, max(0.0, vector_scores.get(item, 0.0)))
        keyword = keyword_scores.get(item, 0.0) / best if best > 0 else 0.0
        return weight * cosine + (1 - weight) * min(1.0, keyword)

    combined = {item: score(item) for item in (*vector_hits, *keyword_hits)}
    missing = len(vector_hits) + len(keyword_hits)
    ordered = sorted(
        combined,
        key=lambda item: (-combined[item], rank.get(item, missing), keyword_rank.get(item, missing)),
    )
    return ordered[:limit]


def apply_rerank(hits: Sequence[str], order: Sequence[int]) -> list[str]:
    """``hits`` reordered (and filtered) to the reranker's offsets; bad offsets are a failure."""
    if any(not 0 <= offset < len(hits) for offset in order) or len(set(order)) != len(order):
        raise SemanticSearchError("reranker_unavailable", RERANKER_UNAVAILABLE_MESSAGE)
    return [hits[offset] for offset in order]


CoveringLookup = Callable[[Sequence[tuple[str, int]]], Mapping[tuple[str, int], SourceMemory]]
"""``(session, seq)`` of transcript events -> the observation covering each (those without one left out)."""


def collapse_hits(
    chunk_ids: Sequence[str],
    parent_of: Mapping[str, str],
    memories: Mapping[str, SourceMemory],
    excerpts: Mapping[str, SourceExcerpt],
    covering: CoveringLookup,
    limit: int | None = None,
) -> list[tuple[SourceMemory, SourceExcerpt | None]]:
    """Chunk hits to results in hit order (first occurrence wins), each with its excerpt.

    A memory chunk stands for its memory; a transcript chunk for the observation that covers its
    event (looked up in windows, as the walk needs them), else for the event itself, with the chunk
    as the excerpt. A later event of an observation already listed comes as itself, with
    ``covered_by`` naming the observation. With ``limit``, the walk stops once ``limit + 1``
    results are found (the caller tells ``truncated`` from the extra one).
    """
    results: list[tuple[SourceMemory, SourceExcerpt | None]] = []
    seen: set[str] = set()
    resolved: dict[tuple[str, int], SourceMemory | None] = {}
    window = max(16, 2 * (limit + 1)) if limit is not None else max(16, len(chunk_ids))
    for start in range(0, len(chunk_ids), window):
        batch = chunk_ids[start : start + window]
        parents: list[SourceMemory] = []
        for chunk_id in batch:
            key = parent_of.get(chunk_id)
            memory = memories.get(key) if key is not None else None
            if memory is None:
                raise SemanticSearchError("semantic_search_failed", NO_CANONICAL_MEMORY_MESSAGE)
            parents.append(memory)
        wanted = [
            event
            for memory in parents
            if memory.kind == "event" and (event := (memory.session_id, memory.seq or 0)) not in resolved
        ]
        if wanted:
            found = covering(list(dict.fromkeys(wanted)))
            resolved.update((event, found.get(event)) for event in wanted)
        for chunk_id, memory in zip(batch, parents, strict=True):
            target = memory
            if memory.kind == "event":
                target = resolved.get((memory.session_id, memory.seq or 0)) or memory
            if target.parent_key in seen:
                if target is memory or memory.parent_key in seen:
                    continue
                # Another event its observation covers, the observation listed already: a condensing
                # observer writes one observation for many events, and each matching event is
                # evidence of its own. It comes as itself, naming the observation.
                target = replace(memory, covered_by=target.memory_id)
            seen.add(target.parent_key)
            results.append((target, excerpts.get(chunk_id)))
            if limit is not None and len(results) > limit:
                return results
    return results


def collapse_to_memories(
    chunk_ids: Iterable[str], parent_of: Mapping[str, str], memories: Mapping[str, SourceMemory]
) -> list[SourceMemory]:
    """Chunk hits to their memories, in hit order, first occurrence wins."""
    results: list[SourceMemory] = []
    seen: set[str] = set()
    for chunk_id in chunk_ids:
        key = parent_of.get(chunk_id)
        memory = memories.get(key) if key is not None else None
        if memory is None:
            raise SemanticSearchError("semantic_search_failed", NO_CANONICAL_MEMORY_MESSAGE)
        if memory.parent_key in seen:
            continue
        seen.add(memory.parent_key)
        results.append(memory)
    return results


def query_text_for_embedding(query_prefix: str, query: str) -> str:
    """``prefix + " " + query`` when a prefix is configured, else the query."""
    return f"{query_prefix} {query}" if query_prefix else query


# ------------------------------------------------------------------------------------ answers


@dataclass(frozen=True, slots=True)
class Retrieval:
    """What hybrid retrieval found, before the tool applies its ``limit``."""

    results: tuple[SourceMemory, ...]
    """Memories, most relevant first."""
    truncated: bool
    """A candidate bound was hit, so more relevant memories may exist."""
    partial: bool
    """The index is still catching up (incomplete or stale): results come from indexed chunks only."""
    excerpts: tuple[SourceExcerpt | None, ...] = ()
    """Per result (same order), the matching source excerpt, when a cited event's text matched."""

    def excerpt_of(self, position: int) -> SourceExcerpt | None:
        """The source excerpt of result ``position`` (``None`` when its own text matched)."""
        return self.excerpts[position] if position < len(self.excerpts) else None


EVENT_CONTENT_CHARS: Final[int] = 1200
"""Characters of a transcript event shown as the ``content`` of an ``event`` result."""


def memory_result_item(memory: SourceMemory, excerpt: SourceExcerpt | None = None) -> dict[str, object]:
    """One hybrid search result (reference §13.4); importance only for observations; ``source``
    (``{seq_start, seq_end, excerpt}``) when the match was in the transcript: an event the memory
    covers, or, for an ``event`` result (no memory covers it), the event itself."""
    content = condense(memory.content)
    if memory.kind == "event":
        content = excerpt.text if excerpt is not None else content[:EVENT_CONTENT_CHARS]
        if excerpt is None and memory.seq is not None:
            excerpt = SourceExcerpt(memory.seq, memory.seq, content)
    item: dict[str, object] = {
        "kind": memory.kind,
        "session_id": memory.session_id,
        "id": memory.memory_id,
        "display_id": display_id(memory.memory_id),
        "timestamp": memory.timestamp,
        "content": content,
    }
    if memory.kind == "observation":
        item["importance"] = memory.importance
    if excerpt is not None:
        item["source"] = excerpt.as_dict()
    if memory.covered_by is not None:
        item["covered_by"] = memory.covered_by
    return item


def hybrid_answer(query: str, limit: int, retrieval: Retrieval) -> dict[str, object]:
    """``{ok, query, limit, truncated, partial, count, results}`` for a retrieval."""
    results = [
        memory_result_item(memory, retrieval.excerpt_of(position))
        for position, memory in enumerate(retrieval.results[:limit])
    ]
    return {
        "ok": True,
        "query": query,
        "limit": limit,
        "truncated": retrieval.truncated or len(retrieval.results) > limit,
        "partial": retrieval.partial,
        "count": len(results),
        "results": results,
    }


def run_hybrid_search(search: Callable[[], Retrieval], query: str, limit: int) -> dict[str, object]:
    """Run a retrieval and turn it into the tool answer; failures become visible error answers.

    Never falls back to exact search. Unexpected exceptions become ``semantic_search_failed``
    (their text is not shown: it could hold memory content).
    """
    try:
        retrieval = search()
    except SemanticSearchError as exc:
        return exc.as_result()
    except Exception as exc:  # every other failure must still be a visible answer, never a fallback
        # The class only: the exception's text could hold memory content.
        _logger.warning("om.semantic.search_failed", extra={"exception_class": type(exc).__name__})
        return {"ok": False, "error": "semantic_search_failed", "message": SEARCH_FAILED_MESSAGE}
    return hybrid_answer(query, limit, retrieval)
