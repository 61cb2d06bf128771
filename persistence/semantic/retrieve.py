"""Querying the derived hybrid-search index (reference §14.5): vectors + BM25, fusion, optional
rerank, collapse to memories.

Search re-checks every hit against the current canonical text, so a stale chunk is never
returned. The query embedding and the rerank never run under the lock: the snapshot is
re-validated after re-acquiring it (§14.5 step 6: a state or source change meanwhile answers
``index_building``). Every candidate (both sides' hits) is scored on both sides; the default
ranking (``fusion="zscore"``, :mod:`persistence.semantic.ranking`) fuses z-scored cosine and BM25
and adds neighbour, speaker and time match, with a no-match floor; the previous score fusion
(``"convex"``, ``persistence.semantic.fusion.convex_fuse``) and the reference's RRF stay available.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from persistence.search_request import DateBounds, TimeWindow
from persistence.semantic.chunks import memory_chunks
from persistence.semantic.derived import DerivedIndex, logger
from persistence.semantic.files import MANIFEST_FILE, DerivedIndexError
from persistence.semantic.fusion import (
    FUSED_CANDIDATE_LIMIT,
    apply_rerank,
    collapse_hits,
    convex_fuse,
    filter_store_hits,
    rrf_fuse,
    store_fetch_size,
)
from persistence.semantic.keyword import KeywordScores, query_tokens
from persistence.semantic.manifest import Manifest
from persistence.semantic.ranking import (
    Candidate,
    below_floor,
    query_speaker,
    query_word_weights,
    rank_candidates,
    text_speaker,
)
from persistence.semantic.sources import SemanticState, SourceFingerprint
from protocol.semantic import (
    EMBEDDING_UNAVAILABLE_MESSAGE,
    QUERY_DIMENSIONS_MESSAGE,
    Embedder,
    Reranker,
    Retrieval,
    SemanticSearchError,
    SourceMemory,
)
from protocol.source_text import SourceExcerpt


def query_text_for_embedding(query_prefix: str, query: str) -> str:
    """``prefix + " " + query`` when a prefix is configured, else the query."""
    return f"{query_prefix} {query}" if query_prefix else query


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
    below_floor: bool = False
    """No candidate is close enough to the query to be an answer (default ranking only)."""


def _is_transient(exc: sqlite3.Error) -> bool:
    message = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in message or "busy" in message)


class IndexSearcher(DerivedIndex):
    """The query side of :class:`persistence.semantic.index.SemanticIndex`: ``search``."""

    def search(
        self,
        query: str,
        embedder: Embedder | None = None,
        *,
        query_vector: Sequence[float] | None = None,
        bounds: DateBounds | None = None,
        reranker: Reranker | None = None,
        limit: int | None = None,
        time_window: TimeWindow | None = None,
        floor: bool = True,
    ) -> Retrieval:
        """Hybrid retrieval (reference §14.5): vectors + BM25, fusion, optional rerank, collapse.

        A hit on a transcript chunk stands for the observation covering its event
        (:meth:`SemanticSourceReader.covering_memories`) with the chunk as its excerpt, or, when no
        observation covers the event, for the event itself.

        Give ``embedder`` (the query prefix is applied here) or a ready ``query_vector``. With
        ``limit``, results are cut to it and ``truncated`` also says whether more were found.
        ``time_window``: the time the query names (memories dated in it rank higher). ``floor``: with
        the default ranking, a query no candidate is close to answers ``no_match`` and nothing else
        (``persistence.semantic.ranking.below_floor``).
        Raises ``SemanticSearchError`` with a §14.7 code; never returns results of a dirty,
        mismatched or corrupt index.
        """
        if not os.path.exists(self._db_path):
            return Retrieval((), False, False)  # nothing observed yet: nothing to search, nothing to create
        date_bounds = bounds or DateBounds()
        expected: tuple[SemanticState | None, SourceFingerprint] | None = None
        vector: list[float] | None = None
        if query_vector is None:
            # The embedding call runs outside the lock; the snapshot is checked again after it
            # (§14.5 step 6): a state row or source fingerprint that changed meanwhile answers
            # index_building. So the fingerprint's counts are read twice on this path, by design.
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
            candidates = self._retrieve_guarded(query, vector, date_bounds, partial, state, time_window)
        if floor and candidates.below_floor:
            logger.info("om.semantic.search", extra={"results": 0, "no_match": True, "partial": partial})
            return Retrieval((), candidates.truncated, partial or candidates.lagging, (), no_match=True)
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
        self,
        query: str,
        vector: Sequence[float],
        bounds: DateBounds,
        partial: bool,
        state: SemanticState,
        time_window: TimeWindow | None,
    ) -> _Candidates:
        try:
            return self._retrieve(query, vector, bounds, partial, state, time_window)
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
        self,
        query: str,
        vector: Sequence[float],
        bounds: DateBounds,
        partial: bool,
        state: SemanticState,
        time_window: TimeWindow | None = None,
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
        floored = False
        if self._fusion == "zscore":
            chunk_scores = {rows[label].chunk_id: label for label in rows}
            candidates = [
                self._candidate(
                    chunk_id,
                    chunk_scores[chunk_id],
                    vector_scores,
                    keyword_scores,
                    parent_of,
                    memories,
                    time_window,
                )
                for chunk_id in dict.fromkeys((*vector_hits.chunk_ids, *keyword_hits.chunk_ids))
            ]
            weights = self._weights
            ranked = rank_candidates(
                candidates,
                query_speaker(query),
                vector_weight=weights.vector_weight,
                neighbour_share=weights.neighbour_share,
                speaker_bonus=weights.speaker_bonus,
                time_bonus=weights.time_bonus,
            )
            by_id = {candidate.chunk_id: candidate for candidate in candidates}
            floored = below_floor(
                [by_id[chunk_id] for chunk_id in ranked], texts, query_word_weights(tokens, *frequencies)
            )
            fused = ranked[:FUSED_CANDIDATE_LIMIT]
        elif self._fusion == "convex":
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
            fused, texts, parent_of, memories, truncated, keyword_lagging or bool(stale), excerpts, floored
        )

    @staticmethod
    def _candidate(
        chunk_id: str,
        label: int,
        vector_scores: dict[int, float],
        keyword_scores: dict[int, float],
        parent_of: dict[str, str],
        memories: dict[str, SourceMemory],
        time_window: TimeWindow | None,
    ) -> Candidate:
        """What ranking reads of one candidate chunk: its scores and its memory's place, speaker and date."""
        memory = memories[parent_of[chunk_id]]
        event = memory.kind == "event"
        # An event's place is its seq; a memory of exactly one event of its session stands at that
        # event's place (the offline observer writes one per message).
        single = memory.kind != "reflection" and len(memory.source_seqs) == 1
        return Candidate(
            chunk_id,
            vector_scores.get(label, 0.0),
            keyword_scores.get(label, 0.0),
            (memory.session_id, memory.source_seqs[0]) if single else None,
            text_speaker(memory.content) if event else None,
            time_window is not None and time_window.contains(memory.timestamp),
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
