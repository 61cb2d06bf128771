"""The shapes of hybrid retrieval (reference §14.3, §14.7): chunks and their ids, the memories they
come from, what a retrieval found, the error codes, and the embedder and reranker
protocols with their one error contract (:class:`EmbeddingError`, :class:`RerankError`).

Shapes only. The chunking rules at work (``persistence.semantic.chunks``), the derived index files,
the lock and the lifecycle live in ``persistence.semantic``; the search pipeline in
:mod:`actors.read.retrieval` (its ranking rules in :mod:`actors.read.fusion`), the indexing core in
:mod:`actors.indexer.sync`; the tool answers in :mod:`actors.read.hybrid`;
the HTTP/offline clients live elsewhere and only have to satisfy :class:`Embedder` and
:class:`Reranker`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Literal, Protocol

from protocol.canonical import condense
from protocol.errors import OmrayError
from protocol.settings import EmbeddingApiSettings
from protocol.source_text import SourceExcerpt

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

INDEX_BUILDING_MESSAGE: Final[str] = (
    "The semantic index is being built or rebuilt; retry memory_search once indexing has caught up."
)
INDEX_BUSY_MESSAGE: Final[str] = "Semantic index is busy; retry after indexing completes."
NO_MATCH_MESSAGE: Final[str] = (
    "No stored memory or transcript event is close to this query: nothing about it was stored. Try "
    "other words, or mode exact for a literal piece of text."
)
"""Message of a hybrid answer with ``no_match``."""
EMBEDDING_UNAVAILABLE_MESSAGE: Final[str] = "Embedding request failed or returned invalid vectors."
RERANKER_UNAVAILABLE_MESSAGE: Final[str] = "The configured reranker failed or returned an invalid response."
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


# --------------------------------------------------------------------------- the model protocols


class SearchModelError(SemanticSearchError):
    """A model of hybrid search (embedder, reranker) failed, or what it returned is unusable: ``code``
    is the search error code (§14.7) with its fixed message, ``reason`` a short category for logs
    (``invalid_vectors``, ``http_503``, ...). Never a provider body, a text, a query or a vector."""

    default_code: ClassVar[SemanticErrorCode]
    default_message: ClassVar[str]

    def __init__(self, message: str | None = None, *, reason: str = "bad_response") -> None:
        super().__init__(self.default_code, self.default_message if message is None else message)
        self.reason = reason


class EmbeddingError(SearchModelError):
    """Texts could not be embedded (``embedding_unavailable``)."""

    default_code: ClassVar[SemanticErrorCode] = "embedding_unavailable"
    default_message: ClassVar[str] = EMBEDDING_UNAVAILABLE_MESSAGE


class RerankError(SearchModelError):
    """The reranker failed (``reranker_unavailable``)."""

    default_code: ClassVar[SemanticErrorCode] = "reranker_unavailable"
    default_message: ClassVar[str] = RERANKER_UNAVAILABLE_MESSAGE


class Embedder(Protocol):
    """Turns texts into vectors, one per text, in order, all of one dimension (every component finite,
    no zero vector).

    The one error contract: any failure, of the model or of what it returned, raises
    :class:`EmbeddingError`; nothing else escapes a well-behaved embedder, and callers that find a
    wrong count or dimension raise it too. An embedder whose ``batches_by_tokens`` attribute is
    true batches texts itself and takes any number at once (``actors.indexer.sync.embed_in_batches``).
    Implementations: ``actors.models.embeddings.OpenAIEmbedder`` (an endpoint),
    ``actors.models.offline_embedder.MiniLMEmbedder`` (the offline default).
    """

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; :class:`EmbeddingError` on any failure."""
        ...


class Reranker(Protocol):
    """Reorders (and may filter) candidate documents for a query.

    The one error contract: any failure raises :class:`RerankError`, and an answer that is not a set
    of distinct offsets of ``documents`` is one too. Implementation:
    ``actors.models.embeddings.HttpReranker``.
    """

    def rerank(self, query: str, documents: Sequence[str]) -> list[int]:
        """Original offsets of the kept documents (those under the reranker's ``min_score`` left out),
        best first; :class:`RerankError` on any failure."""
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


FusionMode = Literal["zscore", "convex", "rrf", "keyword"]
"""How the vector and keyword rankings are fused: score-aware convex combination, rank-only RRF, or
the keyword ranking alone (kept for comparison in ``omray bench recall``)."""


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
    no_match: bool = False
    """Nothing stored is close enough to the query to be an answer (the relevance floor): no results."""

    def excerpt_of(self, position: int) -> SourceExcerpt | None:
        """The source excerpt of result ``position`` (``None`` when its own text matched)."""
        return self.excerpts[position] if position < len(self.excerpts) else None
