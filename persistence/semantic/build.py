"""Building the derived hybrid-search index: bounded, resumable batches (reference §14.4).

``dirty`` is saved before any write to derived storage and cleared only after all of them
succeeded, so any interrupted write leads to a rebuild instead of a silently inconsistent index.
Unlike the original, which re-read and re-chunked every memory for each batch, indexing keeps a
resumable cursor per table: a batch reads and chunks O(batch) memories however many are already
indexed. Canonical rows are append-only in omray (content-hash ids, insert-or-verify writes); a
full check compares everything for a database edited by other tools.

This is the storage half of indexing: the rebuild checks and the reads of a batch under the lock
(:meth:`IndexBuilder.planning`), and its commit (:meth:`IndexBuilder.commit_batch`). The indexing
core (which rows a batch takes, embedding them in batches) is :mod:`actors.indexer.sync`; nothing
here calls a model. The embedding never runs under the lock: the commit re-validates the plan's
snapshot.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass

from persistence.semantic.batches import BatchPlan, BatchSource
from persistence.semantic.chunks import memory_chunks
from persistence.semantic.derived import DerivedIndex, logger
from persistence.semantic.files import MANIFEST_FILE, DerivedIndexError
from persistence.semantic.keyword import PreparedKeyword
from persistence.semantic.manifest import Manifest
from persistence.semantic.sources import KINDS, SemanticState, SourceFingerprint
from protocol.semantic import (
    INDEX_DIMENSIONS_MESSAGE,
    EmbeddingError,
    MemoryChunk,
    SemanticSearchError,
)


@dataclass(frozen=True, slots=True)
class SyncResult:
    """Outcome of one bounded synchronization (``actors.indexer.sync.synchronize``)."""

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


class IndexBuilder(DerivedIndex):
    """The build side of :class:`persistence.semantic.index.SemanticIndex`: a batch's planning
    reads and its commit (no model call)."""

    @contextmanager
    def planning(self, full_check: bool = False) -> Iterator[BatchSource]:
        """Under the exclusive lock: rebuild first when any rebuild condition holds, then the empty
        plan of the next batch (cursors, removals) with the reads that fill it. ``full_check``
        compares every canonical memory with the manifest (a database other tools edited).

        Raises ``SemanticSearchError`` (``index_busy``)."""
        with self._locked():
            state, fingerprint = self._reader.snapshot()
            reason, cursors, removed = self._check(state, fingerprint, full_check)
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
                if removed:
                    plan.removed = frozenset(removed)
                    plan.removed_labels = manifest.labels_of(removed)
                    plan.keyword_rows = [
                        row for row in manifest.all_chunk_texts() if row[0] not in plan.removed_labels
                    ]
                yield BatchSource(plan, self._reader, manifest, self._rules)

    def commit_batch(self, plan: BatchPlan, vectors: Sequence[Sequence[float]]) -> SyncResult:
        """Record a planned batch with its ``vectors`` (one per chunk that needs one, in order), in
        one commit; ``complete`` when nothing is left. The vector file is saved and checksummed once
        per commit. If the index changed since the plan was made, the batch is dropped
        (``complete=False``, nothing written).

        Raises ``SemanticSearchError`` (``index_busy``, ``embedding_dimensions_changed``, or
        ``embedding_unavailable`` for vectors that do not fit the plan)."""
        # A removal rebuilds the keyword index without the removed chunks; that is the slow part,
        # so it runs outside the lock too and is installed by the commit (searches never wait on it).
        prepared = self._keyword.prepare(plan.keyword_rows) if plan.keyword_rows is not None else None
        try:
            with self._locked():
                return self._commit(plan, vectors, prepared)
        finally:
            if prepared is not None:
                prepared.discard()  # a no-op once installed

    def _check(
        self, state: SemanticState | None, fingerprint: SourceFingerprint, full_check: bool
    ) -> tuple[str | None, dict[str, int], set[str]]:
        """The rebuild reason (``None`` when the index can be extended), the cursors to resume from and
        the indexed memories that are gone from the source (removed in place, not rebuilt)."""
        if state is None:
            return "no_state", {}, set()
        if state.dirty:
            return "dirty", {}, set()
        if state.signature != self._signature:
            return "signature_changed", {}, set()
        try:
            with closing(Manifest.open(self._path(MANIFEST_FILE))) as manifest:
                if manifest.meta("signature") != self._signature:
                    return "derived_inconsistent", {}, set()
                dimensions = manifest.meta_int("dimensions")
                if dimensions != state.dimensions:
                    return "derived_inconsistent", {}, set()
                if manifest.vector_count() > 0:
                    self._vectors.load(manifest, dimensions)
                cursors = manifest.cursors()
                previous = manifest.fingerprint()
                if full_check or not self._appended_only(previous, fingerprint):
                    return self._full_diff(manifest, cursors, fingerprint)
                return None, cursors, set()
        except DerivedIndexError as exc:
            logger.warning("om.semantic.derived_invalid", extra={"exception_class": type(exc).__name__})
            return "derived_invalid", {}, set()
        except (sqlite3.DatabaseError, ValueError, TypeError) as exc:
            logger.warning("om.semantic.derived_invalid", extra={"exception_class": type(exc).__name__})
            return "derived_invalid", {}, set()

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

    def _full_diff(
        self, manifest: Manifest, cursors: dict[str, int], fingerprint: SourceFingerprint
    ) -> tuple[str | None, dict[str, int], set[str]]:
        """Compare the manifest with every canonical memory: edited chunks -> rebuild; memories gone
        (forgotten) -> removed in place; misses behind the cursor -> move the cursor back (already
        indexed memories are then skipped cheaply)."""
        current = self._reader.content_digests()
        removed: set[str] = set()
        for key, digest in manifest.memory_digests().items():
            found = current.get(key)
            if found is None:
                removed.add(key)
            elif found[2] != digest:
                return "stale_chunk", {}, set()
        in_progress = manifest.in_progress_parents()
        memories = self._reader.memories_by_keys(in_progress)
        for key in in_progress:
            memory = memories.get(key)
            if memory is None:
                removed.add(key)
                continue
            own = manifest.chunk_ids_of(key)
            if not own <= {chunk.chunk_id for chunk in memory_chunks(memory, self._rules)}:
                return "stale_chunk", {}, set()
        resumed = dict(cursors)
        indexed = manifest.memory_digests()
        for key, (kind, rowid, _digest) in current.items():
            if key not in indexed and rowid <= resumed[kind]:
                resumed[kind] = rowid - 1
        for kind in KINDS:
            # A removed last row frees its rowid for the next memory: the cursor must not pass it.
            resumed[kind] = min(resumed[kind], fingerprint.table(kind).max_rowid)
        return None, resumed, removed

    def _rebuild(self, reason: str, fingerprint: SourceFingerprint, first_build: bool) -> None:
        # The marker precedes any derived write, so a crash mid-rebuild is rebuilt again.
        self._save_state(fingerprint.digest(), 0, dirty=True, complete=False)
        self._remove_derived()
        Manifest.create(self._path(MANIFEST_FILE), self._signature, fingerprint).close()
        self._save_state(fingerprint.digest(), 0, dirty=False, complete=False)
        log = logger.info if first_build else logger.warning
        log("om.semantic.rebuild", extra={"reason": reason, "source_count": fingerprint.total})

    def _commit(
        self, plan: BatchPlan, vectors: Sequence[Sequence[float]], prepared: PreparedKeyword | None = None
    ) -> SyncResult:
        state = self._reader.semantic_state()
        manifest = Manifest.open(self._path(MANIFEST_FILE))
        with closing(manifest):
            if state != plan.state or manifest.token() != plan.manifest_token:
                # Someone else wrote meanwhile: drop this batch rather than mix two snapshots.
                return self._result(plan, manifest, complete=False, embedded=0)
            dimensions = self._check_vectors(plan, vectors)
            if not plan.chunks and not plan.cursors_changed and not plan.keyword_invalid and not plan.removed:
                return self._finish(plan, manifest, dimensions, embedded=0)
            self._save_state(plan.fingerprint.digest(), dimensions, dirty=True, complete=False)
            # From here on the state row says dirty: _finish must always clear it.
            labels: list[tuple[int, MemoryChunk]] = []
            vector_sha = manifest.meta("vector_sha") or ""
            deleted_vectors = manifest.deleted_vector_count()
            if plan.chunks:
                first = manifest.next_label()
                labels = [(first + offset, chunk) for offset, chunk in enumerate(plan.chunks)]
            with_vectors = [(label, chunk) for label, chunk in labels if chunk.embedded]
            removed_vectors = [label for label, embedded in plan.removed_labels.items() if embedded]
            if with_vectors or removed_vectors:
                vector_sha, deleted_vectors = self._vectors.update(
                    manifest, dimensions, removed_vectors, with_vectors, vectors
                )
            generation = manifest.meta_int("generation") + 1
            with manifest.transaction():
                manifest.remove(plan.removed)
                manifest.add(labels, plan.new_memories)
                if prepared is not None:
                    self._keyword.install(manifest, prepared)
                manifest.set_meta(
                    deleted_vectors=deleted_vectors,
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
                raise EmbeddingError(reason="invalid_vectors")
            return dimensions
        widths = {len(vector) for vector in vectors}
        if len(vectors) != plan.embedded or len(widths) != 1 or 0 in widths:
            raise EmbeddingError(reason="invalid_vectors")
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
