"""``omray bench hybrid``: backfill speed, search latency and recall@10 of hybrid retrieval.

A temporary memory database gets ``size`` observations written through
:class:`persistence.writers.store.Store` (observer parts of 250, sessions of 500). Their texts are distinct
user/assistant sentences of the real transcripts in ``../shared/data/transcripts`` (the material of
``bench.search_corpus``), paired into two-sentence observations once the distinct sentences run
out; without that folder, generated sentences from a small coding vocabulary. Then:

Each observation's cited event is written to the transcript with its part, as the Observer writes
it: an event holds its observation's text (the observation then only quotes it, so it gets no
vector of its own), and for ``--source-share`` of them (default 0.2) one more corpus sentence, a
detail the observation left out, which only the event's chunks hold.

* **Backfill**: :func:`actors.indexer.sync.synchronize` with the DEFAULT
  offline embedder (all-MiniLM-L6-v2, int8 ONNX, loaded before timing), the settings' batch size
  (32 chunks for the offline model) and :data:`actors.indexer.sync.JOB_BATCHES` batches per call,
  as the indexer runs it, is called until it reports ``complete``. ``embedding_sentences_per_s``
  embeds the same chunk texts in the same batches with the embedder alone: the ceiling the backfill can
  approach, so ``backfill_vs_embedding`` isolates the index's own overhead (measured on the first
  2,000 chunks at larger sizes; the single-store baselines reuse the backfill's vectors). CPU
  seconds are given too because wall time on a shared machine is noisy. The original's figure
  (§17.2) is quoted next to it.
* **Latency**: every labelled query is embedded first; ``search_p50_ms`` / ``search_p99_ms`` time
  ``actors.read.retrieval.retrieve(index, query, query_vector=..., limit=10)`` only. ``exact_p50_ms`` times
  :func:`actors.read.service.exact_search` on the same query texts.
* **Recall@10** on a labelled set built from the corpus. For each of ``targets`` memories (content
  unique in the corpus, at least 5 content words) three questions whose answer is that memory:
  ``paraphrase`` (its content words without stop words, words swapped for synonyms from a small
  table, a random 60% of them kept and shuffled), ``keyword`` (its 3 rarest content words by
  corpus document frequency) and ``literal`` (3 consecutive words of its text, what a user would
  type for an exact search). A query scores when the target is among the first 10 results.
  ``exact`` is scored on the literal queries, ``bm25``/``vector``/``hybrid`` on paraphrase and
  keyword queries; ``recall_at_10_by_query`` has every mode on every query type.

The index keeps its keyword and vector stores private, so the single-store rankings are computed
directly over the same chunks (``persistence.semantic.chunks.chunk_memory`` with the index's chunking rules):
``bm25`` is a ``bm25s.BM25`` index of the index's own tokenizer output, queried with the index's
query tokens (unknown tokens dropped, zero scores cut); ``vector`` is an ``hnswlib`` cosine index
with the index's construction parameters (``persistence.semantic.vectors``, ef max(k, 64)) over the
baseline vectors. Each reads 100 chunk hits, as a store does inside hybrid search, and collapses
them to memories in rank order. Figures are printed, never asserted.

Length: about 750 lines, on purpose (word lists: ``bench.hybrid_words``); its parts share fixtures.
"""

from __future__ import annotations

import functools
import math
import random
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeVar

import bm25s
import hnswlib
import numpy as np
from pydantic import BaseModel, ConfigDict

from actors.indexer.sync import JOB_BATCHES, embed_in_batches, synchronize
from actors.models.offline_embedder import default_offline_embedder
from actors.read.retrieval import query_text_for_embedding, retrieve
from actors.read.search_arguments import validate_search_arguments
from actors.read.service import exact_search
from bench.hybrid_words import STOP_WORDS, SYNONYMS
from bench.measure import percentile
from bench.search_corpus import corpus_material, corpus_observation, corpus_part, corpus_timestamp
from persistence.search.request import SearchRequest
from persistence.semantic import SemanticIndex, query_tokens, tokenize
from persistence.semantic.candidates import STORE_HIT_LIMIT
from persistence.semantic.chunks import memory_chunks
from persistence.semantic.vectors import HNSW_EF_CONSTRUCTION, HNSW_M, HNSW_SEED
from persistence.settings.parse import semantic_from_mapping
from persistence.writers.store import Store
from protocol.identities import transcript_event_id
from protocol.records import ObservationRecord, TranscriptEntry
from protocol.semantic import ChunkingRules, Embedder, MemoryChunk, SourceMemory
from protocol.settings import BUILTIN_EMBEDDING_MODEL, SemanticSettings

DEFAULT_SIZE: Final[int] = 2000
"""Memories in the default corpus."""
DEFAULT_SOURCE_SHARE: Final[float] = 0.2
"""Share of observations whose cited event holds a detail they left out (a source chunk each)."""
EMBEDDING_SAMPLE: Final[int] = 2000
"""Chunks the bare embedder embeds for the backfill's ceiling (all of them below this size)."""
DEFAULT_TARGETS: Final[int] = 100
"""Target memories of the labelled set (each gives three queries)."""
TOP_K: Final[int] = 10
"""Recall cut-off."""
OBSERVATIONS_PER_SESSION: Final[int] = 500
"""Observations per corpus session."""
OBSERVATIONS_PER_PART: Final[int] = 250
"""Observations per observer part (one transaction)."""

ORIGINAL_BACKFILL: Final[dict[str, object]] = {
    "memories": 9352,
    "chunks": 9364,
    "backfill_s": 1945.162,
    "memories_per_s": round(9352 / 1945.162, 2),
    "embedder": "coderankembed-q8_0.gguf (768 dims) over HTTP, batches of 4 chunks",
    "source": "reference §17.2 (docs/om-semantic-retrieval-benchmark.md, 2026-09-22): full backfill",
}
"""The original's published backfill figure, for comparison."""

QueryKind = Literal["paraphrase", "keyword", "literal"]
"""The three question styles of the labelled set."""
Mode = Literal["exact", "bm25", "vector", "hybrid"]
"""Retrieval modes scored."""
QUERY_KINDS: Final[tuple[QueryKind, ...]] = ("paraphrase", "keyword", "literal")
MODES: Final[tuple[Mode, ...]] = ("exact", "bm25", "vector", "hybrid")
SCORED_KINDS: Final[dict[Mode, tuple[QueryKind, ...]]] = {
    "exact": ("literal",),
    "bm25": ("paraphrase", "keyword"),
    "vector": ("paraphrase", "keyword"),
    "hybrid": ("paraphrase", "keyword"),
}
"""Which query types make up each mode's headline ``recall_at_10``."""

T = TypeVar("T")

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:['_-][A-Za-z0-9]+)*")
_ROLE_PREFIX = re.compile(r"^(?:User|Assistant):\s*")

LABELLING_METHOD: Final[str] = (
    "Targets: memories with unique content and >= 5 content words, sampled with the seed. Per target: "
    "'paraphrase' = its content words (stop words dropped), swapped for synonyms from a small table, "
    "a random 60% (3 to 8 words) kept and shuffled; 'keyword' = its 3 rarest content words by corpus "
    "document frequency; 'literal' = 3 consecutive words of its text. A query scores when the target "
    "is in the top 10. exact is scored on literal queries, bm25/vector/hybrid on paraphrase+keyword."
)

_GENERATED_SUBJECTS = ("User", "Assistant")
_GENERATED_VERBS = (
    "fixed",
    "renamed",
    "tested",
    "refactored",
    "documented",
    "profiled",
    "reverted",
    "migrated",
    "deployed",
    "reviewed",
)
_GENERATED_OBJECTS = (
    "the pagination helper",
    "the theme loader",
    "the session importer",
    "the slash command parser",
    "the retry policy",
    "the search index",
    "the compaction hook",
    "the lockfile",
    "the settings validator",
    "the markdown renderer",
    "the websocket client",
    "the queue actor",
)
_GENERATED_DETAILS = (
    "after a timeout in CI",
    "because the build was red",
    "to support dark mode",
    "before the release",
    "so tokens are counted exactly",
    "when the user asked twice",
    "to avoid a race on startup",
    "with a regression test",
    "following the code review",
    "for the staging deploy",
)
_GENERATED_FILES = (
    "src/theme.ts",
    "actors/queue/state.py",
    "docs/search.md",
    "persistence/writers/store.py",
    "cli/main.go",
    "web/app.tsx",
    "tests/test_retry.py",
)


class HybridBenchResult(BaseModel):
    """Figures of one ``omray bench hybrid`` run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int
    """Memories requested (observations written)."""
    memories: int
    """Source memories (observations) the index counted when complete, besides their events."""
    events: int
    """Transcript events the index counted (one per observation)."""
    sessions: int
    """Sessions of the corpus."""
    corpus_source: Literal["transcripts", "generated"]
    """Where the memory texts came from."""
    embedder: str
    """Embedding model used for backfill, baseline and queries."""
    batch_size: int
    """Chunks per ``synchronize`` call."""
    build_s: float
    """Seconds to write the corpus through ``Store``."""
    backfill_s: float
    """Seconds of ``synchronize`` calls until ``complete`` (model already loaded)."""
    sync_calls: int
    """``synchronize`` calls the backfill made."""
    memories_per_s: float
    """Memories indexed per second of backfill."""
    chunks: int
    """Chunks embedded (the index holds more: keyword-only chunks)."""
    source_chunks: int
    """Transcript chunks (the events' text) the index holds."""
    source_share: float
    """Share of observations whose cited event holds more than the observation."""
    embedding_sample: int
    """Chunks embedded by the bare embedder for ``embedding_sentences_per_s`` (a sample at large sizes)."""
    chunks_per_s: float
    """Chunks indexed per second of backfill."""
    backfill_cpu_s: float
    """CPU seconds of the process (all threads) during the backfill."""
    embedding_sentences_per_s: float
    """The embedder alone on the same chunk texts in the same batches: the backfill's ceiling."""
    embedding_cpu_s: float
    """CPU seconds of the process (all threads) during that baseline."""
    embedding_per_core_s: float
    """Chunks (events) embedded per CPU second of that baseline: events per second per core."""
    backfill_vs_embedding: float
    """``chunks_per_s / embedding_sentences_per_s`` (1.0 = backfill as fast as embedding)."""
    original: dict[str, object]
    """The original's published backfill figure and its source."""
    queries_timed: int
    """Queries timed per latency figure."""
    query_embedding_p50_ms: float
    """Median time to embed one query (excluded from ``search_*``)."""
    search_p50_ms: float
    """Median hybrid search time with a ready query vector, ``limit=10``."""
    search_p99_ms: float
    """99th percentile of the same."""
    exact_p50_ms: float
    """Median exact search time on the same query texts, ``limit=10``."""
    exact_p99_ms: float
    """99th percentile of the same."""
    exact_literal_p50_ms: float
    """Median exact search time on the literal queries (the ones exact search is meant for)."""
    recall_at_10: dict[str, float]
    """Per mode, the share of its scored queries whose target is in the top 10."""
    recall_at_10_by_query: dict[str, dict[str, float]]
    """Per query type, per mode: recall@10."""
    labelled_set: dict[str, object]
    """How the labelled set was built, and its size."""
    total_s: float
    """Wall time of the whole run."""


# ------------------------------------------------------------------------------------------ corpus


@dataclass(frozen=True, slots=True)
class CorpusMemory:
    """One written observation."""

    memory_id: str
    """Observation id."""
    content: str
    """Its text."""
    session_id: str = ""
    """Its session."""
    seq: int = 0
    """The event it cites."""
    source_text: str = ""
    """That event's text when it holds more than the observation, else ``""``."""

    @property
    def event_text(self) -> str:
        """The transcript text of the event it cites."""
        return f"User: {self.source_text or _ROLE_PREFIX.sub('', self.content)}"


def generated_sentences(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct observation-like sentences from a small coding vocabulary."""
    seen: set[str] = set()
    sentences: list[str] = []
    attempts = 0
    while len(sentences) < count:
        attempts += 1
        sentence = (
            f"{rng.choice(_GENERATED_SUBJECTS)}: {rng.choice(_GENERATED_VERBS)} "
            f"{rng.choice(_GENERATED_OBJECTS)} in {rng.choice(_GENERATED_FILES)} "
            f"{rng.choice(_GENERATED_DETAILS)}"
        )
        if attempts > 20 * count:  # the vocabulary is exhausted: number the rest
            sentence = f"{sentence} (case {len(sentences)})"
        if sentence not in seen:
            seen.add(sentence)
            sentences.append(sentence)
    return sentences


def memory_texts(size: int, seed: int) -> tuple[list[str], Literal["transcripts", "generated"]]:
    """``size`` distinct memory texts and their source (real transcripts when available)."""
    rng = random.Random(seed)
    sentences, _paths, source = corpus_material()
    if source == "transcripts":
        pool = list(dict.fromkeys(sentences))
        origin: Literal["transcripts", "generated"] = "transcripts"
    else:
        pool = generated_sentences(max(size, 50), rng)
        origin = "generated"
    rng.shuffle(pool)
    texts = pool[:size]
    seen = set(texts)
    while len(texts) < size:
        # Out of distinct sentences: two-sentence observations (a real observation often is one).
        first, second = rng.sample(pool, 2)
        paired = f"{first} {_ROLE_PREFIX.sub('', second)}"
        if paired not in seen:
            seen.add(paired)
            texts.append(paired)
    return texts, origin


def write_corpus(
    store: Store,
    texts: Sequence[str],
    source_share: float = 0.0,
    seed: int = 0,
) -> tuple[list[CorpusMemory], int]:
    """Write ``texts`` as observations through ``store``: the memories and the session count.

    Each observation's cited event goes to the transcript with its part: it holds the observation's
    text, and for a ``source_share`` of them one more sentence of the corpus (a detail the
    observation left out, so only the event's chunks hold it).
    """
    rng = random.Random(seed + 17)
    memories: list[CorpusMemory] = []
    sessions = 0
    minute = 0
    for first in range(0, len(texts), OBSERVATIONS_PER_SESSION):
        session_id = f"bench-hybrid-{sessions:04d}"
        session_texts = texts[first : first + OBSERVATIONS_PER_SESSION]
        for start in range(0, len(session_texts), OBSERVATIONS_PER_PART):
            batch: list[ObservationRecord] = []
            for offset, content in enumerate(session_texts[start : start + OBSERVATIONS_PER_PART]):
                minute += 3
                batch.append(
                    corpus_observation(session_id, start + offset + 1, content, corpus_timestamp(minute))
                )
            transcript: list[TranscriptEntry] = []
            for o in batch:
                extra = ""
                if rng.random() < source_share:
                    extra = f"{_ROLE_PREFIX.sub('', o.content)} {texts[rng.randrange(len(texts))]}"
                memory = CorpusMemory(o.observation_id, o.content, session_id, o.source_start_seq, extra)
                memories.append(memory)
                transcript.append(
                    TranscriptEntry(
                        session_id=session_id,
                        seq=memory.seq,
                        event_type="agent_command_applied",
                        timestamp=o.timestamp,
                        content=memory.event_text,
                    )
                )
            store.commit_observer_part(
                corpus_part(session_id, start + 1, batch[-1].source_end_seq, batch[-1].created_at),
                batch,
                transcript,
            )
        sessions += 1
    return memories, sessions


# ----------------------------------------------------------------------------------- labelled set


@dataclass(frozen=True, slots=True)
class LabelledQuery:
    """One question whose answer is one memory."""

    kind: QueryKind
    """How the question was made."""
    query: str
    """Query text."""
    target_id: str
    """Id of the memory that answers it."""


def content_words(text: str) -> list[str]:
    """Lowercased words of ``text`` (role prefix removed) that are not stop words, in order."""
    words = [word.lower() for word in _WORD.findall(_ROLE_PREFIX.sub("", text))]
    return [word for word in words if len(word) >= 3 and word not in STOP_WORDS]


def paraphrase_query(text: str, rng: random.Random) -> str:
    """Content words, synonym-swapped, a random 60% (3 to 8 words) kept, shuffled."""
    words = list(dict.fromkeys(SYNONYMS.get(word, word) for word in content_words(text)))
    keep = min(len(words), 8, max(3, math.ceil(0.6 * len(words))))
    chosen = rng.sample(words, keep)
    rng.shuffle(chosen)
    return " ".join(chosen)


def keyword_query(text: str, document_frequency: Counter[str]) -> str:
    """The 3 rarest content words of ``text`` (corpus document frequency), in text order."""
    words = list(dict.fromkeys(content_words(text)))
    rarest = set(sorted(words, key=lambda word: (document_frequency[word], word))[:3])
    return " ".join(word for word in words if word in rarest)


def literal_query(text: str, rng: random.Random) -> str:
    """3 consecutive whitespace-separated words of ``text`` (role prefix removed)."""
    words = _ROLE_PREFIX.sub("", text).split()
    if len(words) <= 3:
        return " ".join(words)
    start = rng.randrange(len(words) - 2)
    return " ".join(words[start : start + 3])


def labelled_set(memories: Sequence[CorpusMemory], targets: int, seed: int) -> list[LabelledQuery]:
    """Three questions (paraphrase, keyword, literal) for each of up to ``targets`` memories."""
    rng = random.Random(seed + 1)
    counts = Counter(memory.content for memory in memories)
    frequency: Counter[str] = Counter()
    for memory in memories:
        frequency.update(set(content_words(memory.content)))
    eligible = [
        memory
        for memory in memories
        if counts[memory.content] == 1 and len(set(content_words(memory.content))) >= 5
    ]
    chosen = rng.sample(eligible, min(targets, len(eligible)))
    queries: list[LabelledQuery] = []
    for memory in chosen:
        queries.append(LabelledQuery("paraphrase", paraphrase_query(memory.content, rng), memory.memory_id))
        queries.append(LabelledQuery("keyword", keyword_query(memory.content, frequency), memory.memory_id))
        queries.append(LabelledQuery("literal", literal_query(memory.content, rng), memory.memory_id))
    return queries


# -------------------------------------------------------------------------------- single stores


class SingleStores:
    """BM25-only and vector-only memory rankings over the index's chunks (see the module docstring)."""

    def __init__(
        self, chunks: Sequence[MemoryChunk], owner: Mapping[str, str], vectors: Mapping[str, np.ndarray]
    ) -> None:
        """``owner``: chunk id -> the memory its hits stand for; ``vectors``: by vector text (the
        backfill's), for the chunks that have one."""
        self._parents = [owner[chunk.chunk_id] for chunk in chunks]
        self._bm25 = bm25s.BM25()
        self._bm25.index([tokenize(chunk.text) for chunk in chunks], show_progress=False)
        self._vocabulary = frozenset(key for key in self._bm25.vocab_dict if key)
        embedded = [position for position, chunk in enumerate(chunks) if chunk.embedded]
        data = np.asarray([vectors[chunks[position].vector_text] for position in embedded], dtype=np.float32)
        self._vector_parents = [self._parents[position] for position in embedded]
        self._hnsw = hnswlib.Index(space="cosine", dim=int(data.shape[1]))
        self._hnsw.init_index(
            max_elements=max(1, len(embedded)),
            M=HNSW_M,
            ef_construction=HNSW_EF_CONSTRUCTION,
            random_seed=HNSW_SEED,
        )
        self._hnsw.add_items(data, np.arange(len(embedded), dtype=np.uint64))

    def _collapse(self, positions: Iterable[int], parents: Sequence[str] | None = None) -> list[str]:
        parents = self._parents if parents is None else parents
        return list(dict.fromkeys(parents[position] for position in positions))[:TOP_K]

    def bm25(self, query: str) -> list[str]:
        """Memory ids of the best BM25 chunks (query tokens unknown to the corpus dropped)."""
        known = [token for token in query_tokens(query) if token in self._vocabulary]
        if not known:
            return []
        scores = np.asarray(self._bm25.get_scores(known), dtype=np.float64)
        order = np.argsort(-scores, kind="stable")[:STORE_HIT_LIMIT]
        return self._collapse(int(i) for i in order if scores[int(i)] > 0)

    def vector(self, query_vector: Sequence[float]) -> list[str]:
        """Memory ids of the nearest chunks by cosine."""
        k = min(STORE_HIT_LIMIT, len(self._vector_parents))
        self._hnsw.set_ef(max(k, 64))
        labels, _distances = self._hnsw.knn_query(np.asarray([query_vector], dtype=np.float32), k=k)
        return self._collapse((int(label) for label in labels[0]), self._vector_parents)


# ------------------------------------------------------------------------------------ measuring


def _timed_ms(call: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    value = call()
    return (time.perf_counter() - started) * 1000, value


def _exact_ids(db_path: Path, query: str) -> list[str]:
    request = validate_search_arguments({"query": query, "limit": TOP_K})
    if not isinstance(request, SearchRequest):
        return []
    answer = exact_search(db_path, request)
    results = answer.get("results")
    return [str(item["id"]) for item in results] if isinstance(results, list) else []


def recall_table(
    hits: Mapping[Mode, Sequence[Sequence[str]]], queries: Sequence[LabelledQuery]
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Headline recall@10 per mode and recall@10 per query type and mode."""

    def share(mode: Mode, kinds: Sequence[QueryKind]) -> float:
        scored = [i for i, query in enumerate(queries) if query.kind in kinds]
        found = sum(1 for i in scored if queries[i].target_id in hits[mode][i][:TOP_K])
        return round(found / len(scored), 3) if scored else 0.0

    headline: dict[str, float] = {mode: share(mode, SCORED_KINDS[mode]) for mode in MODES}
    by_query: dict[str, dict[str, float]] = {
        kind: {mode: share(mode, (kind,)) for mode in MODES} for kind in QUERY_KINDS
    }
    return headline, by_query


@dataclass(frozen=True, slots=True)
class Backfill:
    """What the backfill did."""

    seconds: float
    """Wall time of all ``synchronize`` calls."""
    cpu_seconds: float
    """CPU time of the process meanwhile."""
    calls: int
    """``synchronize`` calls until ``complete``."""
    chunks: int
    """Chunks embedded."""
    memories: int
    """Memories indexed at the end."""


class RecordingEmbedder:
    """Passes texts to the embedder and keeps each vector (float32), so the single-store baselines
    reuse the backfill's vectors instead of embedding every chunk a second time."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.batches_by_tokens = inner, getattr(inner, "batches_by_tokens", False)
        self.vectors: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self.inner.embed(texts)
        for text, vector in zip(texts, vectors, strict=True):
            self.vectors[text] = np.asarray(vector, dtype=np.float32)
        return vectors


def corpus_chunks(
    memories: Sequence[CorpusMemory], rules: ChunkingRules
) -> tuple[list[MemoryChunk], dict[str, str], int]:
    """Every chunk the index holds (each observation's, then its event's), the memory id each chunk's
    hits stand for (an event's: its observation's), and how many chunks are transcript chunks."""
    chunks: list[MemoryChunk] = []
    owner: dict[str, str] = {}
    events = 0
    for memory in memories:
        observation = SourceMemory(
            "observation", memory.memory_id, memory.session_id, "", memory.content, None, (memory.seq,)
        )
        event_id = transcript_event_id(memory.session_id, memory.seq)
        event = SourceMemory("event", event_id, memory.session_id, "", memory.event_text, None, (memory.seq,))
        own = memory_chunks(observation, rules, [memory.event_text])
        transcript = memory_chunks(event, rules)
        chunks.extend(own + transcript)
        owner.update((chunk.chunk_id, memory.memory_id) for chunk in own + transcript)
        events += len(transcript)
    return chunks, owner, events


def backfill(index: SemanticIndex, embedder: Embedder, batch_size: int) -> Backfill:
    """Call ``synchronize`` as the indexer does (:data:`JOB_BATCHES` batches a call) until ``complete``."""
    started, cpu_started = time.perf_counter(), time.process_time()
    calls = embedded = 0
    while True:
        result = synchronize(index, embedder, batch_size, batches=JOB_BATCHES)
        calls += 1
        embedded += result.embedded_chunks
        if result.complete:
            return Backfill(
                time.perf_counter() - started,
                time.process_time() - cpu_started,
                calls,
                embedded,
                result.indexed_memories,
            )


@dataclass
class Measurements:
    """Per-query hits of every mode and the latency samples."""

    hits: dict[Mode, list[list[str]]]
    """Memory ids returned, per mode, in query order."""
    embed_ms: list[float]
    """Query embedding times."""
    search_ms: list[float]
    """Hybrid search times (query vector ready)."""
    exact_ms: list[float]
    """Exact search times on the same queries."""
    exact_literal_ms: list[float]
    """Exact search times on the literal queries."""


def measure_queries(
    db_path: Path,
    index: SemanticIndex,
    embedder: Embedder,
    query_prefix: str,
    stores: SingleStores,
    queries: Sequence[LabelledQuery],
) -> Measurements:
    """Embed every query first, then run every mode on it; time hybrid and exact on the semantic ones."""
    vectors: list[list[float]] = []
    embed_ms: list[float] = []
    for query in queries:
        text = query_text_for_embedding(query_prefix, query.query)
        elapsed, embedded = _timed_ms(functools.partial(embedder.embed, [text]))
        embed_ms.append(elapsed)
        vectors.append(embedded[0])
    result = Measurements({mode: [] for mode in MODES}, embed_ms, [], [], [])
    for query, vector in zip(queries, vectors, strict=True):
        hybrid_ms, retrieval = _timed_ms(
            functools.partial(retrieve, index, query.query, query_vector=vector, limit=TOP_K)
        )
        exact_ms, exact = _timed_ms(functools.partial(_exact_ids, db_path, query.query))
        if query.kind != "literal":  # latency over the semantic questions only
            result.search_ms.append(hybrid_ms)
            result.exact_ms.append(exact_ms)
        else:
            result.exact_literal_ms.append(exact_ms)
        result.hits["hybrid"].append([memory.memory_id for memory in retrieval.results])
        result.hits["exact"].append(exact)
        result.hits["bm25"].append(stores.bm25(query.query))
        result.hits["vector"].append(stores.vector(vector))
    return result


def run_hybrid_bench(
    size: int = DEFAULT_SIZE,
    *,
    targets: int = DEFAULT_TARGETS,
    batch_size: int | None = None,
    seed: int = 0,
    source_share: float = DEFAULT_SOURCE_SHARE,
) -> HybridBenchResult:
    """Build the corpus in a temporary directory, backfill, time searches, score recall."""
    if size < 1 or targets < 1:
        raise ValueError(f"size and targets must be positive, got {size!r} and {targets!r}")
    run_started = time.perf_counter()
    # The same settings a user gets from `semantic: {embedding_api: {model_id: builtin/...}}`.
    semantic = semantic_from_mapping({"embedding_api": {"model_id": BUILTIN_EMBEDDING_MODEL}})
    assert semantic is not None
    api = semantic.embedding_api
    sync_batch = batch_size if batch_size is not None else api.batch_size
    if sync_batch < 1:
        raise ValueError(f"batch_size must be positive, got {sync_batch!r}")
    offline = default_offline_embedder()
    offline.load()
    offline.embed(["warm up the inference session"])
    embedder = RecordingEmbedder(offline)
    texts, origin = memory_texts(size, seed)
    with tempfile.TemporaryDirectory(prefix="omray-hybrid-bench-") as directory:
        db_path = Path(directory) / "om.sqlite"
        with Store(db_path) as store:
            build_ms, (memories, sessions) = _timed_ms(lambda: write_corpus(store, texts, source_share, seed))
            index = SemanticIndex(db_path, SemanticSettings(embedding_api=api), store)
            filled = backfill(index, embedder, sync_batch)
            rules = ChunkingRules.from_settings(api)
            chunks, owner, source_chunks = corpus_chunks(memories, rules)
            sample = [chunk for chunk in chunks if chunk.embedded][:EMBEDDING_SAMPLE]
            commit = sync_batch * JOB_BATCHES
            baseline_cpu = time.process_time()
            baseline_ms, _ = _timed_ms(
                lambda: [
                    embed_in_batches(
                        offline, [c.vector_text for c in sample[start : start + commit]], sync_batch
                    )
                    for start in range(0, len(sample), commit)
                ]
            )
            baseline_cpu = time.process_time() - baseline_cpu
            queries = labelled_set(memories, targets, seed)
            measured = measure_queries(
                db_path,
                index,
                embedder,
                api.query_prefix,
                SingleStores(chunks, owner, embedder.vectors),
                queries,
            )
    headline, by_query = recall_table(measured.hits, queries)
    chunks_per_s = filled.chunks / filled.seconds if filled.seconds > 0 else 0.0
    sentences_per_s = len(sample) * 1000 / baseline_ms if baseline_ms > 0 else 0.0
    per_type = len(queries) // len(QUERY_KINDS)
    return HybridBenchResult(
        size=size,
        memories=filled.memories - len(memories),
        events=len(memories),
        sessions=sessions,
        corpus_source=origin,
        embedder=BUILTIN_EMBEDDING_MODEL,
        batch_size=sync_batch,
        build_s=round(build_ms / 1000, 2),
        backfill_s=round(filled.seconds, 2),
        sync_calls=filled.calls,
        memories_per_s=round(len(memories) / filled.seconds, 1) if filled.seconds > 0 else 0.0,
        chunks=filled.chunks,
        source_chunks=source_chunks,
        source_share=source_share,
        embedding_sample=len(sample),
        chunks_per_s=round(chunks_per_s, 1),
        backfill_cpu_s=round(filled.cpu_seconds, 2),
        embedding_sentences_per_s=round(sentences_per_s, 1),
        embedding_cpu_s=round(baseline_cpu, 2),
        embedding_per_core_s=round(len(sample) / baseline_cpu, 1) if baseline_cpu > 0 else 0.0,
        backfill_vs_embedding=round(chunks_per_s / sentences_per_s, 3) if sentences_per_s else 0.0,
        original=dict(ORIGINAL_BACKFILL),
        queries_timed=len(measured.search_ms),
        query_embedding_p50_ms=round(percentile(measured.embed_ms, 0.5), 3),
        search_p50_ms=round(percentile(measured.search_ms, 0.5), 3),
        search_p99_ms=round(percentile(measured.search_ms, 0.99), 3),
        exact_p50_ms=round(percentile(measured.exact_ms, 0.5), 3),
        exact_p99_ms=round(percentile(measured.exact_ms, 0.99), 3),
        exact_literal_p50_ms=round(percentile(measured.exact_literal_ms, 0.5), 3),
        recall_at_10=headline,
        recall_at_10_by_query=by_query,
        labelled_set={
            "description": LABELLING_METHOD,
            "targets": per_type,
            "queries": len(queries),
            "queries_per_type": per_type,
        },
        total_s=round(time.perf_counter() - run_started, 2),
    )
