"""The derived hybrid-search index of one memory database and its lifecycle (reference §14.4, §14.5).

Everything under ``<database>.semantic/`` (directory 0700, files 0600) is *derived*: it is rebuilt
from the canonical ``om_observation`` / ``om_reflection`` rows whenever it is missing, stale,
inconsistent or corrupt, and is never the source of any memory. It holds the chunk manifest
(:mod:`.manifest`), the vector file (:mod:`.vectors`), the keyword index (:mod:`.keyword`) and
``index.lock``, the per-project ``flock`` lock: shared by searches, exclusive for writes; each side
waits briefly for the other, then answers ``index_busy``. A file where the directory belongs, or a
directory where the lock file belongs, is derived damage and is replaced.

The durable status lives in the canonical ``om_semantic_state`` row, written through a
:class:`~persistence.semantic.sources.SemanticStateWriter` (the database's ``Store``): ``dirty`` is
saved before any write to derived storage and cleared only after all of them succeeded, so any
interrupted write leads to a rebuild instead of a silently inconsistent index.

Unlike the original, which re-read and re-chunked every memory for each batch, indexing keeps a
resumable cursor (:mod:`.chunking`): a batch reads and chunks O(batch) memories however many are
already indexed. Canonical rows are append-only in omray (content-hash ids, insert-or-verify
writes); ``synchronize(full_check=True)`` compares everything for a database edited by other
tools, and search re-checks every hit against the current canonical text, so a stale chunk is
never returned.

Network calls (embedding the query or a batch) never run under the lock: the snapshot is
re-validated after re-acquiring it. Logs carry counts, codes and reasons only.

The transcript: every covered event's text (``omray_transcript``) is indexed next to the
memories, so what the Observer was shown stays findable whatever it wrote down. A hit on an
event's chunk carries its excerpt and seq and leads to the observation covering the event (or
stands alone when none does). Each event's first chunk gets a vector, the rest keyword entries
only, so the index grows with events, not bytes. Fusion is score-aware by default (cosine +
max-normalized BM25 over both sides' candidates, each scored on both sides,
``persistence.semantic.fusion.convex_fuse``); the reference's RRF stays available (``fusion="rrf"``).

Length: about 770 lines, on purpose. The lock discipline of ``synchronize`` and ``search``
(dirty marker, snapshot re-validation, corruption handling) and the retrieval it guards are kept
in one class to make them reviewable as a whole.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, NoReturn

import numpy as np

from persistence.semantic.chunking import BatchPlan, collect
from persistence.semantic.files import (
    DIRECTORY_MODE,
    FILE_MODE,
    KEYWORD_DIR,
    LOCK_FILE,
    MANIFEST_FILE,
    VECTOR_FILE,
    DerivedIndexError,
)
from persistence.semantic.fusion import (
    apply_rerank,
    collapse_hits,
    convex_fuse,
    filter_store_hits,
    rrf_fuse,
    store_fetch_size,
)
from persistence.semantic.keyword import KeywordScores, KeywordStore, query_tokens
from persistence.semantic.manifest import Manifest
from persistence.semantic.sources import (
    KINDS,
    SemanticSourceReader,
    SemanticState,
    SemanticStateWriter,
    SourceFingerprint,
)
from persistence.semantic.vectors import VectorStore
from protocol.semantic import (
    EMBEDDING_UNAVAILABLE_MESSAGE,
    INDEX_BUILDING_MESSAGE,
    INDEX_BUSY_MESSAGE,
    INDEX_DIMENSIONS_MESSAGE,
    QUERY_DIMENSIONS_MESSAGE,
    ChunkingRules,
    DateBounds,
    Embedder,
    FusionMode,
    MemoryChunk,
    Reranker,
    Retrieval,
    SemanticSearchError,
    SourceMemory,
    query_text_for_embedding,
)
from protocol.settings import SemanticSettings
from protocol.source_text import SourceExcerpt

logger = logging.getLogger("omray.semantic")

FUSED_CANDIDATE_LIMIT: Final[int] = 200
LOCK_WAIT_S: Final[float] = 5.0
"""How long a search waits for a write (or a write for searches) before ``index_busy``."""
LOCK_POLL_S: Final[float] = 0.005
JOB_BATCHES: Final[int] = 32
"""Embedding batches one indexer job commits at once. Every commit rewrites and checksums the
whole vector file, so one batch per commit made a backfill quadratic (at 50,000 memories most of
its time went to rewriting the file); 32 batches of the offline model's 32 chunks keep that
write a few percent of the embedding time at that size, and a job under a minute."""


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Progress in memory units (reference §14.4), not a readiness signal."""

    indexed_count: int
    """Current memories fully indexed (0 unless the state is clean with a matching signature)."""
    source_count: int
    """Current memories."""

    def as_dict(self) -> dict[str, int]:
        """``{"indexed_count", "source_count"}``."""
        return {"indexed_count": self.indexed_count, "source_count": self.source_count}


@dataclass(frozen=True, slots=True)
class SyncResult:
    """Outcome of one bounded :meth:`SemanticIndex.synchronize` batch."""

    complete: bool
    """Nothing is pending and the source did not change during the batch."""
    indexed_memories: int
    """Memories fully indexed after the batch."""
    source_memories: int
    """Current memories."""
    rebuilt: bool
    """The derived index was discarded and started again in this call."""
    embedded_chunks: int
    """Chunks embedded and stored in this call."""
    memories_read: int = 0
    """Canonical memories read to plan the batch (cost measure; excludes a full comparison)."""
    memories_chunked: int = 0
    """Memories chunked to plan the batch (cost measure)."""
    rebuild_reason: str | None = None
    """Why the index was rebuilt, when it was."""


@dataclass
class _Candidates:
    chunk_ids: list[str]
    texts: dict[str, str]
    parent_of: dict[str, str]
    memories: dict[str, SourceMemory]
    truncated: bool
    lagging: bool = False
    """The keyword index lags the manifest, or a hit came from a deleted or edited memory."""
    excerpts: dict[str, SourceExcerpt] | None = None
    """Chunk id -> excerpt, for the source chunks among the hits."""


def embed_in_batches(embedder: Embedder, texts: Sequence[str], size: int) -> list[list[float]]:
    """Vectors of ``texts`` (in their order), embedded ``size`` at a time, shortest texts first.

    Batching texts of similar length spares the padding an embedder adds to the longest text of
    a batch (half the work on mixed conversation turns with the offline model)."""
    order = sorted(range(len(texts)), key=lambda position: (len(texts[position]), position))
    vectors: list[list[float]] = [[] for _ in texts]
    for start in range(0, len(order), size):
        positions = order[start : start + size]
        embedded = embedder.embed([texts[position] for position in positions])
        if len(embedded) != len(positions):
            raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
        for position, vector in zip(positions, embedded, strict=True):
            vectors[position] = vector
    return vectors


def _is_transient(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message)


class SemanticIndex:
    """The derived hybrid index of one memory database: bounded synchronization and hybrid search.

    Guarantees: every derived write happens under the per-project lock and between a saved
    ``dirty`` marker and its clearing; any listed rebuild condition (no state row, dirty, signature
    change, derived files missing/corrupt/inconsistent, an indexed chunk no longer current)
    discards the derived files and starts again; search never returns a chunk whose memory is gone
    or whose text changed, marks the index dirty on corruption, and never holds the lock across an
    embedding or rerank call. Safe to use from several processes (``flock``); one instance per
    thread.
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        settings: SemanticSettings,
        state_writer: SemanticStateWriter,
        *,
        lock_wait_s: float = LOCK_WAIT_S,
        fusion: FusionMode = "convex",
    ) -> None:
        self._lock_wait_s = lock_wait_s
        self._fusion: FusionMode = fusion
        self._db_path = os.fspath(db_path)
        self._directory = Path(f"{os.path.abspath(self._db_path)}.semantic")
        self._settings = settings
        self._signature = settings.signature()
        self._rules = ChunkingRules.from_settings(settings.embedding_api)
        self._writer = state_writer
        self._reader = SemanticSourceReader(self._db_path)
        self._vectors = VectorStore(self._directory)
        self._keyword = KeywordStore(self._directory)

    @property
    def directory(self) -> Path:
        """``<database>.semantic``."""
        return self._directory

    # --- lock and files --------------------------------------------------------------------------

    def _ensure_directory(self) -> None:
        """Create ``<db>.semantic`` (0700); a non-directory in its place is derived damage: replaced."""
        directory = self._directory
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            logger.warning("om.semantic.directory_repaired", extra={"reason": "not_a_directory"})
            directory.unlink()
        if not directory.is_dir():
            directory.mkdir(mode=DIRECTORY_MODE, parents=False, exist_ok=True)
        os.chmod(directory, DIRECTORY_MODE)
        lock = directory / LOCK_FILE
        if lock.is_symlink() or (lock.exists() and not lock.is_file()):
            logger.warning("om.semantic.lock_repaired", extra={"reason": "not_a_file"})
            if lock.is_dir() and not lock.is_symlink():
                shutil.rmtree(lock)
            else:
                lock.unlink()

    @contextmanager
    def _locked(self, shared: bool = False) -> Iterator[None]:
        """The per-project lock: shared for searches (readers never refuse each other), exclusive for
        writes. Both wait up to ``lock_wait_s`` for the other kind, then raise ``index_busy``."""
        self._ensure_directory()
        fd = os.open(self._directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            deadline = time.monotonic() + self._lock_wait_s
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise SemanticSearchError("index_busy", INDEX_BUSY_MESSAGE) from None
                    time.sleep(LOCK_POLL_S)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _path(self, name: str) -> Path:
        return self._directory / name

    def _remove_derived(self) -> None:
        for name in (
            MANIFEST_FILE,
            f"{MANIFEST_FILE}-journal",
            f"{MANIFEST_FILE}.sha256",
            VECTOR_FILE,
            f"{VECTOR_FILE}.tmp",
        ):
            self._path(name).unlink(missing_ok=True)
        for name in (KEYWORD_DIR, f"{KEYWORD_DIR}.tmp"):
            shutil.rmtree(self._path(name), ignore_errors=True)
        self._vectors.forget()
        self._keyword.forget()

    def _save_state(self, source_hash: str, dimensions: int, dirty: bool, complete: bool) -> None:
        self._writer.save_semantic_state(
            signature=self._signature,
            source_hash=source_hash,
            dimensions=dimensions,
            dirty=dirty,
            complete=complete,
        )

    def _mark_dirty(self, state: SemanticState) -> None:
        self._save_state(state.source_hash, state.dimensions, dirty=True, complete=False)

    # --- progress --------------------------------------------------------------------------------

    def progress(self) -> IndexProgress:
        """Indexed and source memory counts (indexed is 0 unless the state is clean and current)."""
        state, fingerprint = self._reader.snapshot()
        indexed = 0
        if state is not None and not state.dirty and state.signature == self._signature:
            try:
                with closing(Manifest.open(self._path(MANIFEST_FILE), verify=False)) as manifest:
                    indexed = manifest.memory_count()
            except (DerivedIndexError, sqlite3.Error):
                indexed = 0
        return IndexProgress(min(indexed, fingerprint.total), fingerprint.total)

    def _building(self) -> SemanticSearchError:
        return SemanticSearchError("index_building", INDEX_BUILDING_MESSAGE, self.progress().as_dict())

    # --- synchronization -------------------------------------------------------------------------

    def synchronize(
        self,
        embedder: Embedder,
        batch_size: int | None = None,
        *,
        batches: int = 1,
        full_check: bool = False,
    ) -> SyncResult:
        """Index up to ``batches`` batches of at most ``batch_size`` chunks, committed once;
        ``complete`` when nothing is left.

        Each batch is one embedding call; the vector file is saved and checksummed once per call of
        this method, so ``batches`` amortizes that O(index) write (the indexer passes
        :data:`JOB_BATCHES`). Rebuilds first when any rebuild condition holds. The embedding calls
        run outside the lock; if the index changed meanwhile the work is dropped (``complete=False``,
        nothing written), and a failing call leaves the index as it was. Raises
        ``SemanticSearchError`` (``index_busy``, ``embedding_dimensions_changed``, or the embedder's
        own ``embedding_unavailable``).
        """
        size = batch_size if batch_size is not None else self._settings.embedding_api.batch_size
        if size < 1 or batches < 1:
            raise ValueError("batch_size and batches must be >= 1")
        if not os.path.exists(self._db_path):
            return SyncResult(True, 0, 0, False, 0)  # no database yet: nothing to index
        with self._locked():
            plan = self._plan(size * batches, full_check)
        vectors = embed_in_batches(
            embedder, [chunk.vector_text for chunk in plan.chunks if chunk.embedded], size
        )
        with self._locked():
            return self._commit(plan, vectors)

    def _plan(self, size: int, full_check: bool) -> BatchPlan:
        state, fingerprint = self._reader.snapshot()
        reason, cursors = self._check(state, fingerprint, full_check)
        rebuilt = reason is not None
        if reason is not None:
            self._rebuild(reason, fingerprint, first_build=state is None)
            state = SemanticState(self._signature, fingerprint.digest(), 0, False, False)
            cursors = {kind: 0 for kind in KINDS}
        assert state is not None
        with closing(Manifest.open(self._path(MANIFEST_FILE))) as manifest:
            keyword_invalid = manifest.chunk_count() > 0 and not self._keyword.is_valid(manifest)
            stored_cursors = manifest.cursors()
            plan = BatchPlan(
                state=state,
                fingerprint=fingerprint,
                manifest_token=manifest.token(),
                chunks=[],
                completed=[],
                new_memories=[],
                cursors=dict(cursors),
                cursors_changed=cursors != stored_cursors or manifest.fingerprint() != fingerprint,
                rebuilt=rebuilt,
                rebuild_reason=reason,
                keyword_invalid=keyword_invalid,
            )
            collect(self._reader, manifest, plan, size, self._rules)
        return plan

    def _check(
        self, state: SemanticState | None, fingerprint: SourceFingerprint, full_check: bool
    ) -> tuple[str | None, dict[str, int]]:
        """The rebuild reason (``None`` when the index can be extended) and the cursors to resume from."""
        if state is None:
            return "no_state", {}
        if state.dirty:
            return "dirty", {}
        if state.signature != self._signature:
            return "signature_changed", {}
        try:
            with closing(Manifest.open(self._path(MANIFEST_FILE))) as manifest:
                if manifest.meta("signature") != self._signature:
                    return "derived_inconsistent", {}
                dimensions = manifest.meta_int("dimensions")
                if dimensions != state.dimensions:
                    return "derived_inconsistent", {}
                if manifest.vector_count() > 0:
                    self._vectors.load(manifest, dimensions)
                cursors = manifest.cursors()
                previous = manifest.fingerprint()
                if full_check or not self._appended_only(previous, fingerprint):
                    return self._full_diff(manifest, cursors)
                return None, cursors
        except DerivedIndexError as exc:
            logger.warning("om.semantic.derived_invalid", extra={"exception_class": type(exc).__name__})
            return "derived_invalid", {}
        except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
            logger.warning("om.semantic.derived_invalid", extra={"exception_class": type(exc).__name__})
            return "derived_invalid", {}

    def _appended_only(self, previous: SourceFingerprint, current: SourceFingerprint) -> bool:
        if previous == current:
            return True
        for kind in KINDS:
            before, now = previous.table(kind), current.table(kind)
            if now.count < before.count or now.max_rowid < before.max_rowid:
                return False
            if before.count and self._reader.count_through(kind, before.max_rowid) != before.count:
                return False
            if before.count and self._reader.id_at(kind, before.max_rowid) != before.last_id:
                return False  # the last row was deleted and its rowid reused by a new memory
        return True

    def _full_diff(self, manifest: Manifest, cursors: dict[str, int]) -> tuple[str | None, dict[str, int]]:
        """Compare the manifest with every canonical memory: stale chunks -> rebuild; misses behind
        the cursor -> move the cursor back (already indexed memories are then skipped cheaply)."""
        current = self._reader.content_digests()
        for key, digest in manifest.memory_digests().items():
            found = current.get(key)
            if found is None or found[2] != digest:
                return "stale_chunk", {}
        in_progress = manifest.in_progress_parents()
        memories = self._reader.memories_by_keys(in_progress)
        for key in in_progress:
            memory = memories.get(key)
            if memory is None:
                return "stale_chunk", {}
            own = manifest.chunk_ids_of(key)
            if not own <= {chunk.chunk_id for chunk in memory.chunks(self._rules)}:
                return "stale_chunk", {}
        resumed = dict(cursors)
        indexed = manifest.memory_digests()
        for key, (kind, rowid, _digest) in current.items():
            if key not in indexed and rowid <= resumed[kind]:
                resumed[kind] = rowid - 1
        return None, resumed

    def _rebuild(self, reason: str, fingerprint: SourceFingerprint, first_build: bool) -> None:
        # The marker precedes any derived write, so a crash mid-rebuild is rebuilt again.
        self._save_state(fingerprint.digest(), 0, dirty=True, complete=False)
        self._remove_derived()
        Manifest.create(self._path(MANIFEST_FILE), self._signature, fingerprint).close()
        self._save_state(fingerprint.digest(), 0, dirty=False, complete=False)
        log = logger.info if first_build else logger.warning
        log("om.semantic.rebuild", extra={"reason": reason, "source_count": fingerprint.total})

    def _commit(self, plan: BatchPlan, vectors: Sequence[Sequence[float]]) -> SyncResult:
        state = self._reader.semantic_state()
        manifest = Manifest.open(self._path(MANIFEST_FILE))
        with closing(manifest):
            if state != plan.state or manifest.token() != plan.manifest_token:
                # Someone else wrote meanwhile: drop this batch rather than mix two snapshots.
                return self._result(plan, manifest, complete=False, embedded=0)
            dimensions = self._check_vectors(plan, vectors)
            if not plan.chunks and not plan.cursors_changed and not plan.keyword_invalid:
                return self._finish(plan, manifest, dimensions, embedded=0)
            self._save_state(plan.fingerprint.digest(), dimensions, dirty=True, complete=False)
            # From here on the state row says dirty: _finish must always clear it.
            labels: list[tuple[int, MemoryChunk]] = []
            vector_sha = manifest.meta("vector_sha") or ""
            if plan.chunks:
                first = manifest.next_label()
                labels = [(first + offset, chunk) for offset, chunk in enumerate(plan.chunks)]
                with_vectors = [(label, chunk) for label, chunk in labels if chunk.embedded]
                if with_vectors:
                    vector_sha = self._vectors.append(manifest, dimensions, with_vectors, vectors)
            generation = manifest.meta_int("generation") + 1
            with manifest.transaction():
                manifest.add(labels, plan.new_memories)
                manifest.set_meta(
                    generation=generation,
                    dimensions=dimensions,
                    vector_sha=vector_sha,
                    cursor_observation=plan.cursors["observation"],
                    cursor_reflection=plan.cursors["reflection"],
                    cursor_event=plan.cursors["event"],
                    fingerprint=plan.fingerprint.to_json(),
                )
            pending = self._reader.has_rows_after(plan.cursors)
            chunk_count = manifest.chunk_count()
            keyword_count = manifest.meta_int("keyword_count")
            # bm25s cannot add documents: rebuild when done, or when the lag doubles (amortized O(1)).
            if plan.keyword_invalid or (
                keyword_count != chunk_count and (not pending or chunk_count >= 2 * keyword_count)
            ):
                self._keyword.rebuild(manifest)
            embedded = sum(1 for _, chunk in labels if chunk.embedded)
            return self._finish(plan, manifest, dimensions, embedded=embedded, marked_dirty=True)

    def _check_vectors(self, plan: BatchPlan, vectors: Sequence[Sequence[float]]) -> int:
        dimensions = plan.state.dimensions
        if not plan.embedded:
            if vectors:
                raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
            return dimensions
        widths = {len(vector) for vector in vectors}
        if len(vectors) != plan.embedded or len(widths) != 1 or 0 in widths:
            raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
        batch_dimensions = widths.pop()
        if dimensions not in (0, batch_dimensions):
            self._save_state(plan.fingerprint.digest(), dimensions, dirty=True, complete=False)
            logger.warning("om.semantic.dimensions_changed", extra={"dimensions": batch_dimensions})
            raise SemanticSearchError("embedding_dimensions_changed", INDEX_DIMENSIONS_MESSAGE)
        return batch_dimensions

    def _finish(
        self,
        plan: BatchPlan,
        manifest: Manifest,
        dimensions: int,
        embedded: int,
        marked_dirty: bool = False,
    ) -> SyncResult:
        pending = self._reader.has_rows_after(plan.cursors)
        unchanged = self._reader.fingerprint() == plan.fingerprint
        complete = not pending and unchanged
        final = SemanticState(self._signature, plan.fingerprint.digest(), dimensions, False, complete)
        if marked_dirty or final != plan.state or embedded or plan.cursors_changed:
            self._save_state(final.source_hash, final.dimensions, dirty=False, complete=complete)
        if plan.rebuilt or embedded:
            logger.info(
                "om.semantic.batch",
                extra={
                    "embedded_chunks": embedded,
                    "complete": complete,
                    "source_count": plan.fingerprint.total,
                },
            )
        return self._result(plan, manifest, complete=complete, embedded=embedded)

    def _result(self, plan: BatchPlan, manifest: Manifest, complete: bool, embedded: int) -> SyncResult:
        return SyncResult(
            complete=complete,
            indexed_memories=manifest.memory_count(),
            source_memories=plan.fingerprint.total,
            rebuilt=plan.rebuilt,
            embedded_chunks=embedded,
            memories_read=plan.memories_read,
            memories_chunked=plan.memories_chunked,
            rebuild_reason=plan.rebuild_reason,
        )

    # --- search ----------------------------------------------------------------------------------

    def search(
        self,
        query: str,
        embedder: Embedder | None = None,
        *,
        query_vector: Sequence[float] | None = None,
        bounds: DateBounds | None = None,
        reranker: Reranker | None = None,
        limit: int | None = None,
    ) -> Retrieval:
        """Hybrid retrieval (reference §14.5): vectors + BM25, fusion, optional rerank, collapse.

        A hit on a transcript chunk stands for the observation covering its event
        (:meth:`SemanticSourceReader.covering_memories`) with the chunk as its excerpt, or, when no
        observation covers the event, for the event itself.

        Give ``embedder`` (the query prefix is applied here) or a ready ``query_vector``. With
        ``limit``, results are cut to it and ``truncated`` also says whether more were found.
        Raises ``SemanticSearchError`` with a §14.7 code; never returns results of a dirty,
        mismatched or corrupt index.
        """
        if not os.path.exists(self._db_path):
            return Retrieval((), False, False)  # nothing observed yet: nothing to search, nothing to create
        date_bounds = bounds or DateBounds()
        expected: tuple[SemanticState | None, SourceFingerprint] | None = None
        vector: list[float] | None = None
        if query_vector is None:
            # The embedding call runs outside the lock; the snapshot is checked again after it.
            with self._locked(shared=True):
                expected = self._reader.snapshot()
                if self._searchable(*expected) is None:
                    return Retrieval((), False, False)
            vector = self._query_vector(query, embedder, None)
        with self._locked(shared=True):
            snapshot = self._reader.snapshot()
            if expected is not None and snapshot != expected:
                raise self._building()
            partial = self._searchable(*snapshot)
            if partial is None:
                return Retrieval((), False, False)
            state = snapshot[0]
            assert state is not None  # _searchable raised otherwise
            if vector is None:
                vector = self._query_vector(query, None, query_vector)
            if len(vector) != state.dimensions:
                self._mark_dirty(state)
                logger.warning("om.semantic.query_dimensions_changed", extra={"dimensions": len(vector)})
                raise SemanticSearchError("embedding_dimensions_changed", QUERY_DIMENSIONS_MESSAGE)
            candidates = self._retrieve_guarded(query, vector, date_bounds, partial, state)
        hits = candidates.chunk_ids
        if reranker is not None and hits:
            order = reranker.rerank(query, [candidates.texts[chunk_id] for chunk_id in hits])
            hits = apply_rerank(hits, order)
        found = collapse_hits(
            hits,
            candidates.parent_of,
            candidates.memories,
            candidates.excerpts or {},
            self._reader.covering_memories,
            limit,
        )
        truncated = candidates.truncated
        if limit is not None:
            truncated = truncated or len(found) > limit
            found = found[:limit]
        memories = [memory for memory, _ in found]
        logger.info(
            "om.semantic.search",
            extra={"results": len(memories), "truncated": truncated, "partial": partial},
        )
        return Retrieval(
            tuple(memories), truncated, partial or candidates.lagging, tuple(excerpt for _, excerpt in found)
        )

    def _searchable(self, state: SemanticState | None, fingerprint: SourceFingerprint) -> bool | None:
        """Whether results would be partial; ``None`` when there is nothing to search. Raises
        ``index_building`` for a missing, dirty, mismatched or never-embedded index."""
        if state is None or state.dirty or state.signature != self._signature:
            raise self._building()
        if fingerprint.total == 0:
            return None
        if state.dimensions == 0:
            raise self._building()
        return not state.complete or state.source_hash != fingerprint.digest()

    def _query_vector(
        self, query: str, embedder: Embedder | None, query_vector: Sequence[float] | None
    ) -> list[float]:
        if query_vector is None:
            if embedder is None:
                raise ValueError("search needs an embedder or a query_vector")
            prefixed = query_text_for_embedding(self._settings.embedding_api.query_prefix, query)
            vectors = embedder.embed([prefixed])
            if len(vectors) != 1:
                raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
            query_vector = vectors[0]
        vector = [float(value) for value in query_vector]
        array = np.asarray(vector, dtype=np.float64)
        if not vector or not np.all(np.isfinite(array)) or not float(np.dot(array, array)) > 0:
            raise SemanticSearchError("embedding_unavailable", EMBEDDING_UNAVAILABLE_MESSAGE)
        return vector

    def _retrieve_guarded(
        self, query: str, vector: Sequence[float], bounds: DateBounds, partial: bool, state: SemanticState
    ) -> _Candidates:
        try:
            return self._retrieve(query, vector, bounds, partial, state)
        except sqlite3.Error as exc:
            if _is_transient(exc):
                raise  # healthy embeddings are kept: a busy file is no reason to rebuild
            self._corrupt(state, exc)
        except (DerivedIndexError, RuntimeError, ValueError, KeyError) as exc:
            self._corrupt(state, exc)

    def _corrupt(self, state: SemanticState, exc: BaseException) -> NoReturn:
        self._mark_dirty(state)
        logger.warning("om.semantic.derived_corrupt", extra={"exception_class": type(exc).__name__})
        raise self._building() from exc

    def _retrieve(
        self, query: str, vector: Sequence[float], bounds: DateBounds, partial: bool, state: SemanticState
    ) -> _Candidates:
        with closing(Manifest.open(self._path(MANIFEST_FILE))) as manifest:
            if (
                manifest.meta("signature") != self._signature
                or manifest.meta_int("dimensions") != state.dimensions
            ):
                raise DerivedIndexError("semantic manifest disagrees with the state row")
            chunk_count = manifest.chunk_count()
            if chunk_count == 0:
                return _Candidates([], {}, {}, {}, truncated=False)
            vector_count = manifest.vector_count()
            filtered = bounds.active or partial
            fetch = store_fetch_size(chunk_count, filtered)
            query_vector = np.asarray(vector, dtype=np.float32)
            vector_scores: dict[int, float] = {}
            vector_labels: list[int] = []
            index = None
            if vector_count:
                index = self._vectors.load(manifest, state.dimensions)
                k = min(store_fetch_size(vector_count, filtered), vector_count)
                index.set_ef(max(k, 64))
                found, distances = index.knn_query(query_vector[None, :], k=k)
                vector_labels = [int(label) for label in found[0]]
                # hnswlib's cosine distance is 1 - cosine similarity
                vector_scores = {
                    int(label): 1.0 - float(d) for label, d in zip(found[0], distances[0], strict=True)
                }
            keyword_count = manifest.meta_int("keyword_count")
            keyword_lagging = keyword_count != chunk_count
            keyword_scored: list[tuple[int, float]] = []
            keyword_all = KeywordScores(None, {})
            # Every query word: BM25's IDF already weighs common words down, and the words that set
            # a person's own statements apart ("I", "my") matter (LongMemEval dev set, all words:
            # turn R@1 0.69 against 0.64 without function words, R@10 0.93 against 0.94).
            tokens = query_tokens(query)
            if tokens and keyword_count:
                keyword = self._keyword.for_search(manifest)
                keyword_scored, keyword_all = keyword.ranked(tokens, min(fetch, len(keyword.labels)))
            keyword_labels = [label for label, _ in keyword_scored]
            keyword_scores = dict(keyword_scored)
            # Score every candidate on both sides (score-aware fusion): a keyword hit gets the cosine
            # of its vector (an event chunk without one: its event's first chunk), a vector hit its BM25.
            missing_cosine = [label for label in keyword_labels if label not in vector_scores]
            if index is not None and missing_cosine:
                vector_scores.update(
                    _cosines(index, manifest.vector_labels_for(missing_cosine), query_vector)
                )
            keyword_scores.update(keyword_all.of([lb for lb in vector_labels if lb not in keyword_scores]))
            rows = manifest.chunks_by_labels(set(vector_labels) | set(keyword_labels))
        if len(rows) != len(set(vector_labels) | set(keyword_labels)):
            raise DerivedIndexError("semantic index returned labels the manifest does not know")
        parent_of = {chunk.chunk_id: chunk.parent_key for chunk in rows.values()}
        texts = {chunk.chunk_id: chunk.text for chunk in rows.values()}
        excerpts = {
            chunk.chunk_id: excerpt for chunk in rows.values() if (excerpt := chunk.excerpt) is not None
        }
        memories = self._reader.memories_by_keys(set(parent_of.values()))
        # A hit of a deleted or edited memory proves the index lags the source (an in-place edit
        # or a reused rowid leaves the cheap fingerprint unchanged): the answer is then partial.
        stale: set[str] = set()
        accept = self._acceptor(parent_of, memories, bounds, stale)
        vector_hits = filter_store_hits(
            [rows[label].chunk_id for label in vector_labels], accept, fetch, vector_count
        )
        keyword_hits = filter_store_hits(
            [rows[label].chunk_id for label in keyword_labels], accept, fetch, keyword_count
        )
        if self._fusion == "convex":
            fused = convex_fuse(
                vector_hits.chunk_ids,
                {rows[label].chunk_id: score for label, score in vector_scores.items() if label in rows},
                keyword_hits.chunk_ids,
                {rows[label].chunk_id: score for label, score in keyword_scores.items() if label in rows},
                limit=FUSED_CANDIDATE_LIMIT,
            )
        elif self._fusion == "keyword":
            fused = list(keyword_hits.chunk_ids[:FUSED_CANDIDATE_LIMIT])
        else:
            fused = rrf_fuse([vector_hits.chunk_ids, keyword_hits.chunk_ids], limit=FUSED_CANDIDATE_LIMIT)
        truncated = len(fused) >= FUSED_CANDIDATE_LIMIT or vector_hits.truncated or keyword_hits.truncated
        return _Candidates(
            fused, texts, parent_of, memories, truncated, keyword_lagging or bool(stale), excerpts
        )

    def _acceptor(
        self,
        parent_of: dict[str, str],
        memories: dict[str, SourceMemory],
        bounds: DateBounds,
        stale: set[str],
    ) -> Callable[[str], bool]:
        """Keeps hits of current chunks inside the bounds; adds deleted or edited parents to ``stale``."""
        current: dict[str, set[str]] = {}

        def accept(chunk_id: str) -> bool:
            key = parent_of[chunk_id]
            memory = memories.get(key)
            if memory is None:
                stale.add(key)
                return False
            if not bounds.accepts(memory.kind, memory.timestamp):
                return False
            if key not in current:
                current[key] = {chunk.chunk_id for chunk in memory.chunks(self._rules)}
            if chunk_id not in current[key]:
                stale.add(key)
                return False
            return True

        return accept


def _cosines(index: Any, representatives: dict[int, int], query: Any) -> dict[int, float]:
    """Cosine of the query with each chunk's representative vector (``chunk label -> vector label``)."""
    if not representatives:
        return {}
    wanted = sorted(set(representatives.values()))
    vectors = np.asarray(index.get_items(wanted), dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1) * float(np.linalg.norm(query))
    cosines = (vectors @ query) / np.where(norms > 0, norms, 1.0)
    by_vector = {label: float(value) for label, value in zip(wanted, cosines, strict=True)}
    return {chunk: by_vector[vector] for chunk, vector in representatives.items()}


def semantic_directory(db_path: str | os.PathLike[str]) -> Path:
    """``<database>.semantic``: the only directory to delete to repair the derived index."""
    return Path(f"{os.fspath(db_path)}.semantic")
