"""``omray bench forget``: how soon hybrid search reflects a forget, and whether it ever stops answering.

A temporary memory database gets ``size`` observations, each citing one transcript event
(``bench.hybrid_bench.write_corpus``: the corpus of ``omray bench hybrid``), and the hybrid index is
built as the indexer builds it. Then ``forgets`` memories are forgotten through
:meth:`persistence.writers.store.Store.forget` (the observation and its event, as ``omray memory forget``
does), and :func:`actors.indexer.sync.synchronize` is called as the index job calls
it until it reports ``complete``, while another process searches without pause (queries of kept
and forgotten memories, vectors ready). Reported:

* ``removal_s``: forget committed to index complete again; ``removal_embedded_chunks`` (0: nothing
  is embedded again) and ``removal_rebuilt``;
* ``searches_during_removal`` and how many answered ``index_building`` / ``index_busy``, with the
  slowest answer in that window;
* ``forgotten_found``: searches for a forgotten memory's own words that still return it, after the
  index is complete (must be 0), and ``kept_found`` of the control queries.

**Baseline, same run and store**: one memory edited in place, which the index can only repair by
a rebuild, as every forget did before memories were removed in place (``persistence.semantic.build``):
``rebuild_s``, its re-embedded chunks and the searches that answered ``index_building`` meanwhile.

The vectors come from ``--embedder``: ``hash`` (default; a bag-of-words hashing embedder of the
offline model's 384 dimensions, so a 50,000-memory index builds in a few minutes here) or
``offline`` (the default MiniLM model; its backfill of 100,000 chunks takes 10+ minutes here). A
removal embeds nothing, so its cost does not depend on the embedder; a rebuild's does, and
``rebuild_offline_estimate_s`` scales the rebuild's chunks by the offline model's throughput
measured on a sample in the same run. Figures are printed, never asserted.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import random
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict

from actors.indexer.sync import JOB_BATCHES, embed_in_batches, synchronize
from actors.models.offline_embedder import default_offline_embedder
from actors.read.retrieval import query_text_for_embedding, retrieve
from bench.hybrid_bench import CorpusMemory, memory_texts, write_corpus
from bench.measure import percentile
from persistence.semantic import SemanticIndex
from persistence.settings.parse import semantic_from_mapping
from persistence.writers.store import Store
from protocol.forget import ForgetRequest
from protocol.semantic import Embedder, SemanticSearchError
from protocol.settings import BUILTIN_EMBEDDING_MODEL, SemanticSettings

DEFAULT_SIZE: Final[int] = 50_000
"""Memories in the default run (the size the issue names)."""
DEFAULT_FORGETS: Final[int] = 10
"""Memories forgotten at once in the default run."""
CONTROL_QUERIES: Final[int] = 40
"""Queries of kept memories searched beside the forgotten ones."""
OFFLINE_SAMPLE: Final[int] = 512
"""Chunks embedded with the offline model to estimate its throughput."""
_WORD = re.compile(r"[^\W_]+")
EmbedderName = Literal["hash", "offline"]
T = TypeVar("T")


@dataclass
class HashingEmbedder:
    """Bag-of-words vectors of the offline model's width: fast, deterministic, and close for texts
    that share words (so a memory's own words find it)."""

    dimensions: int = 384
    calls: list[int] = field(default_factory=list)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        vectors = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        vectors[:, 0] = 0.05  # never a zero vector
        for row, value in enumerate(texts):
            for word in _WORD.findall(value.lower()):
                digest = hashlib.blake2b(word.encode(), digest_size=4).digest()
                vectors[row, 1 + int.from_bytes(digest, "little") % (self.dimensions - 1)] += 1.0
        return vectors.tolist()


class ForgetBenchResult(BaseModel):
    """Figures of one ``omray bench forget`` run."""

    model_config = ConfigDict(extra="forbid")

    size: int
    forgets: int
    embedder: str
    indexed: int
    """Memories and events indexed before the forget."""
    backfill_s: float
    removal_s: float
    removal_rebuilt: bool
    removal_embedded_chunks: int
    searches_during_removal: int
    building_during_removal: int
    busy_during_removal: int
    partial_during_removal: int
    slowest_search_during_removal_ms: float
    search_p50_during_removal_ms: float
    forgotten_found: int
    forgotten_queries: int
    kept_found: int
    kept_queries: int
    rebuild_s: float
    rebuild_embedded_chunks: int
    searches_during_rebuild: int
    building_during_rebuild: int
    partial_during_rebuild: int
    """Searches answered from a part of the memories while the rebuild ran."""
    offline_chunks_per_s: float
    rebuild_offline_estimate_s: float
    total_s: float


def _search_loop(
    db_path: str,
    settings: SemanticSettings,
    queries: list[tuple[str, list[float]]],
    ready: Any,
    stop: Any,
    out: Any,
) -> None:
    """Search without pause until ``stop`` is set, in a process of its own (as the read service
    searches beside the IndexerActor); sends ``(codes, latencies_ms)`` to ``out``."""
    with Store(Path(db_path)) as store:
        index = SemanticIndex(Path(db_path), settings, store)
        codes: list[str] = []
        latencies_ms: list[float] = []
        position = 0
        while not stop.is_set():
            query, vector = queries[position % len(queries)]
            position += 1
            started = time.perf_counter()
            try:
                answer = retrieve(index, query, query_vector=vector, limit=10)
                codes.append("partial" if answer.partial else "ok")
            except SemanticSearchError as exc:
                codes.append(exc.code)
            latencies_ms.append((time.perf_counter() - started) * 1000)
            ready.set()
        out.send((codes, latencies_ms))


@dataclass
class _Searches:
    """Searches run without pause from another process while some work runs."""

    db_path: Path
    settings: SemanticSettings
    queries: list[tuple[str, list[float]]]
    latencies_ms: list[float] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)

    def during(self, work: Callable[[], T]) -> tuple[float, T]:
        """Run ``work`` while searching; its seconds and result."""
        context = multiprocessing.get_context("spawn")
        ready, stop = context.Event(), context.Event()
        receive, send = context.Pipe(duplex=False)
        process = context.Process(
            target=_search_loop,
            args=(str(self.db_path), self.settings, self.queries, ready, stop, send),
            daemon=True,
        )
        process.start()
        ready.wait(timeout=120)  # the searcher has answered once: its imports and caches are warm
        started = time.perf_counter()
        try:
            result = work()
        finally:
            elapsed = time.perf_counter() - started
            stop.set()
            self.codes, self.latencies_ms = receive.recv()
            process.join(timeout=60)
        return elapsed, result


def _sync_until_complete(index: SemanticIndex, embedder: Embedder, batch: int) -> tuple[bool, int]:
    """Whether any call rebuilt, and the chunks embedded, until the index reports complete."""
    rebuilt, embedded = False, 0
    while True:
        result = synchronize(index, embedder, batch, batches=JOB_BATCHES)
        rebuilt = rebuilt or result.rebuilt
        embedded += result.embedded_chunks
        if result.complete:
            return rebuilt, embedded


def _found(index: SemanticIndex, query: str, vector: list[float], memory_id: str) -> bool:
    return memory_id in [memory.memory_id for memory in retrieve(index, query, query_vector=vector).results]


def run_forget_bench(
    size: int = DEFAULT_SIZE,
    *,
    forgets: int = DEFAULT_FORGETS,
    embedder_name: EmbedderName = "hash",
    seed: int = 0,
) -> ForgetBenchResult:
    """Build, forget, measure the removal; then the rebuild baseline on the same store."""
    if size < 2 or not 1 <= forgets < size:
        raise ValueError(f"need size >= 2 and 1 <= forgets < size, got {size!r} and {forgets!r}")
    run_started = time.perf_counter()
    semantic = semantic_from_mapping({"embedding_api": {"model_id": BUILTIN_EMBEDDING_MODEL}})
    assert semantic is not None
    api = semantic.embedding_api
    offline = default_offline_embedder()
    offline.load()
    embedder: Embedder = offline if embedder_name == "offline" else HashingEmbedder()
    rng = random.Random(seed)
    texts, _origin = memory_texts(size, seed)
    with tempfile.TemporaryDirectory(prefix="omray-forget-bench-") as directory:
        db_path = Path(directory) / "om.sqlite"
        with Store(db_path) as store:
            memories, _sessions = write_corpus(store, texts, 0.0, seed)
            index = SemanticIndex(db_path, SemanticSettings(embedding_api=api), store)
            started = time.perf_counter()
            _sync_until_complete(index, embedder, api.batch_size)
            backfill_s = time.perf_counter() - started
            indexed = index.progress().indexed_count
            picked = rng.sample(memories, forgets + CONTROL_QUERIES)
            gone, kept = picked[:forgets], picked[forgets:]

            def vector(memory: CorpusMemory) -> list[float]:
                text = query_text_for_embedding(api.query_prefix, memory.content)
                return embedder.embed([text])[0]

            queries = [(memory.content, vector(memory)) for memory in picked]
            searches = _Searches(db_path, SemanticSettings(embedding_api=api), queries)
            for memory in gone:
                request = ForgetRequest(
                    session_id=memory.session_id,
                    memory_ids=(memory.memory_id,),
                    event_ranges=((memory.seq, memory.seq),),
                )
                store.forget(
                    request,
                    f"bench-forget-{memory.memory_id[:12]}",
                    "2026-01-01T00:00:00+00:00",
                )
            removal_s, (removal_rebuilt, removal_embedded) = searches.during(
                lambda: _sync_until_complete(index, embedder, api.batch_size)
            )
            removal_codes, removal_ms = list(searches.codes), list(searches.latencies_ms)
            forgotten_found = sum(
                _found(index, q, v, m.memory_id) for m, (q, v) in zip(gone, queries[:forgets], strict=True)
            )
            kept_found = sum(
                _found(index, q, v, m.memory_id) for m, (q, v) in zip(kept, queries[forgets:], strict=True)
            )
            # The baseline: an in-place edit can only be repaired by a rebuild (as every forget was).
            edited = kept[0]
            with closing(sqlite3.connect(db_path, isolation_level=None)) as conn:  # behind the Store's back
                conn.execute(
                    "UPDATE om_observation SET content = content || ' (edited)' WHERE observation_id = ?",
                    (edited.memory_id,),
                )

            def rebuild() -> tuple[bool, int]:
                synchronize(index, embedder, api.batch_size, full_check=True)
                return _sync_until_complete(index, embedder, api.batch_size)

            rebuild_s, (_, rebuild_embedded) = searches.during(rebuild)
            rebuild_codes = list(searches.codes)
    sample = [memory.content for memory in memories[:OFFLINE_SAMPLE]]
    sample_started = time.perf_counter()
    embed_in_batches(offline, sample, api.batch_size)
    offline_per_s = len(sample) / (time.perf_counter() - sample_started)
    return ForgetBenchResult(
        size=size,
        forgets=forgets,
        embedder=BUILTIN_EMBEDDING_MODEL if embedder_name == "offline" else "hash-384",
        indexed=indexed,
        backfill_s=round(backfill_s, 2),
        removal_s=round(removal_s, 3),
        removal_rebuilt=bool(removal_rebuilt),
        removal_embedded_chunks=int(removal_embedded),
        searches_during_removal=len(removal_codes),
        building_during_removal=removal_codes.count("index_building"),
        busy_during_removal=removal_codes.count("index_busy"),
        partial_during_removal=removal_codes.count("partial"),
        slowest_search_during_removal_ms=round(max(removal_ms, default=0.0), 2),
        search_p50_during_removal_ms=round(percentile(removal_ms, 0.5), 2) if removal_ms else 0.0,
        forgotten_found=int(forgotten_found),
        forgotten_queries=forgets,
        kept_found=int(kept_found),
        kept_queries=len(kept),
        rebuild_s=round(rebuild_s, 2),
        rebuild_embedded_chunks=int(rebuild_embedded),
        searches_during_rebuild=len(rebuild_codes),
        building_during_rebuild=rebuild_codes.count("index_building"),
        partial_during_rebuild=rebuild_codes.count("partial"),
        offline_chunks_per_s=round(offline_per_s, 1),
        rebuild_offline_estimate_s=round(rebuild_embedded / offline_per_s, 1) if offline_per_s else 0.0,
        total_s=round(time.perf_counter() - run_started, 2),
    )
