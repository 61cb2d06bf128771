"""Reading a search's candidates from the derived hybrid-search index (reference §14.5): each
store's hits and every candidate's score on both sides, under one snapshot.

This is the storage half of a search; the pipeline (embedding the query, fusion and ranking, the
no-match floor, the rerank, collapsing chunk hits to memories) is :mod:`actors.read.retrieval`.
Nothing here calls a model. A search takes the snapshot first (:meth:`CandidateReader.search_snapshot`),
embeds its query outside the lock, and reads its candidates under the lock again
(:meth:`CandidateReader.read_candidates`), which re-validates the snapshot (§14.5 step 6: a state or
source change meanwhile answers ``index_building``). Every hit is re-checked against the current
canonical text, so a stale chunk is never a candidate; corruption marks the index dirty.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import numpy as np

from persistence.search.request import DateBounds
from persistence.semantic.chunks import memory_chunks
from persistence.semantic.derived import DerivedIndex, logger
from persistence.semantic.files import MANIFEST_FILE, DerivedIndexError
from persistence.semantic.keyword import KeywordScores
from persistence.semantic.manifest import Manifest
from persistence.semantic.sources import SemanticState, SourceFingerprint
from protocol.semantic import (
    QUERY_DIMENSIONS_MESSAGE,
    EmbeddingError,
    SemanticSearchError,
    SourceMemory,
)
from protocol.source_text import SourceExcerpt

STORE_HIT_LIMIT: Final[int] = 100
"""Kept hits per store (vector, keyword)."""
STORE_OVERFETCH_LIMIT: Final[int] = 500
"""Hits read per store when hits can be filtered out (date bounds or a partial index)."""


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


def checked_query_vector(values: Sequence[float]) -> list[float]:
    """``values`` as a list of floats; ``embedding_unavailable`` unless non-empty, finite and non-zero."""
    vector = [float(value) for value in values]
    array = np.asarray(vector, dtype=np.float64)
    if not vector or not np.all(np.isfinite(array)) or not float(np.dot(array, array)) > 0:
        raise EmbeddingError(reason="invalid_vectors")
    return vector


SearchSnapshot = tuple[SemanticState | None, SourceFingerprint]
"""The state row and source fingerprint a search started from (re-validated when it reads)."""


@dataclass(frozen=True, slots=True)
class CandidateScores:
    """What one search read under one snapshot: each store's kept hits and, for every candidate
    chunk (either side's hit), its score on both sides, its text, memory and excerpt."""

    partial: bool
    """Results would be partial: the index is not complete or lags the source."""
    chunk_count: int
    """Chunks in the index (0: nothing indexed yet, no candidate at all)."""
    vector_hits: StoreHits
    """The vector side's kept hits, best first."""
    keyword_hits: StoreHits
    """The keyword side's kept hits, best first."""
    vector_scores: dict[str, float]
    """Chunk id -> cosine with the query (a chunk without a vector: its event's first chunk's)."""
    keyword_scores: dict[str, float]
    """Chunk id -> BM25 score of the query."""
    texts: dict[str, str]
    """Chunk id -> chunk text."""
    parent_of: dict[str, str]
    """Chunk id -> parent key of its memory or event."""
    memories: dict[str, SourceMemory]
    """Parent key -> current canonical memory (deleted ones left out)."""
    excerpts: dict[str, SourceExcerpt]
    """Chunk id -> excerpt, for the transcript chunks among the hits."""
    documents: int
    """Chunks the keyword side counts documents over (for a word's inverse document frequency)."""
    frequencies: dict[str, int]
    """Query token -> chunks holding it."""
    lagging: bool
    """The keyword index lags the manifest, or a hit came from a deleted or edited memory."""

    @classmethod
    def empty(cls, partial: bool) -> CandidateScores:
        """No chunk indexed yet."""
        none = StoreHits((), False)
        return cls(partial, 0, none, none, {}, {}, {}, {}, {}, {}, 0, {}, False)


def _is_transient(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message)


class CandidateReader(DerivedIndex):
    """The query side of :class:`persistence.semantic.index.SemanticIndex`: snapshots and candidate
    reads (no model call, no ranking)."""

    def search_snapshot(self) -> SearchSnapshot | None:
        """The snapshot a search starts from, read under the shared lock; ``None`` when there is
        nothing to search (no database, or no memory yet). Raises ``index_building`` for a missing,
        dirty, mismatched or never-embedded index."""
        if not os.path.exists(self._db_path):
            return None
        with self._locked(shared=True):
            snapshot = self._reader.snapshot()
            if self._searchable(*snapshot) is None:
                return None
            return snapshot

    def read_candidates(
        self,
        tokens: Sequence[str],
        query_vector: Sequence[float],
        bounds: DateBounds,
        expected: SearchSnapshot | None = None,
    ) -> CandidateScores | None:
        """Each store's hits for the query (``tokens``: its keyword tokens) and every candidate's
        scores, under the shared lock; ``None`` when there is nothing to search.

        With ``expected`` (the search's :meth:`search_snapshot`, taken before its query was embedded)
        a changed snapshot answers ``index_building``. Raises ``SemanticSearchError`` with a §14.7
        code; never reads a dirty, mismatched or corrupt index (corruption marks it dirty).
        """
        if not os.path.exists(self._db_path):
            return None
        with self._locked(shared=True):
            snapshot = self._reader.snapshot()
            if expected is not None and snapshot != expected:
                raise self._building()
            partial = self._searchable(*snapshot)
            if partial is None:
                return None
            state = snapshot[0]
            assert state is not None  # _searchable raised otherwise
            vector = checked_query_vector(query_vector)
            if len(vector) != state.dimensions:
                self._mark_dirty(state)
                logger.warning("om.semantic.query_dimensions_changed", extra={"dimensions": len(vector)})
                raise SemanticSearchError("embedding_dimensions_changed", QUERY_DIMENSIONS_MESSAGE)
            try:
                return self._read(tokens, vector, bounds, partial, state)
            except sqlite3.Error as exc:
                if _is_transient(exc):
                    raise  # healthy embeddings are kept: a busy file is no reason to rebuild
                self._corrupt(state, exc)
            except (DerivedIndexError, RuntimeError, ValueError, KeyError) as exc:
                self._corrupt(state, exc)

    def covering_memories(self, events: Sequence[tuple[str, int]]) -> dict[tuple[str, int], SourceMemory]:
        """For each ``(session, seq)``, the observation that covers the event (those without one left
        out): what a transcript hit stands for."""
        return self._reader.covering_memories(events)

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

    def _corrupt(self, state: SemanticState, exc: BaseException) -> NoReturn:
        self._mark_dirty(state)
        logger.warning("om.semantic.derived_corrupt", extra={"exception_class": type(exc).__name__})
        raise self._building() from exc

    def _read(
        self,
        tokens: Sequence[str],
        vector: Sequence[float],
        bounds: DateBounds,
        partial: bool,
        state: SemanticState,
    ) -> CandidateScores:
        with closing(Manifest.open(self._path(MANIFEST_FILE))) as manifest:
            if (
                manifest.meta("signature") != self._signature
                or manifest.meta_int("dimensions") != state.dimensions
            ):
                raise DerivedIndexError("semantic manifest disagrees with the state row")
            chunk_count = manifest.chunk_count()
            if chunk_count == 0:
                return CandidateScores.empty(partial)
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
            frequencies: tuple[int, dict[str, int]] = (chunk_count, {})
            if tokens and keyword_count:
                keyword = self._keyword.for_search(manifest)
                keyword_scored, keyword_all = keyword.ranked(tokens, min(fetch, len(keyword.labels)))
                frequencies = keyword.document_frequencies(tokens)
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
        return CandidateScores(
            partial=partial,
            chunk_count=chunk_count,
            vector_hits=vector_hits,
            keyword_hits=keyword_hits,
            vector_scores={rows[label].chunk_id: s for label, s in vector_scores.items() if label in rows},
            keyword_scores={rows[label].chunk_id: s for label, s in keyword_scores.items() if label in rows},
            texts=texts,
            parent_of=parent_of,
            memories=memories,
            excerpts=excerpts,
            documents=frequencies[0],
            frequencies=frequencies[1],
            lagging=keyword_lagging or bool(stale),
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
                current[key] = {chunk.chunk_id for chunk in memory_chunks(memory, self._rules)}
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
