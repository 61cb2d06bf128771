"""Hybrid retrieval (reference §14.5), the pipeline: embed the query, read the candidates, fuse and
rank them, apply the no-match floor, rerank, collapse chunk hits to memories.

The index (:class:`persistence.semantic.SemanticIndex`) holds the files and reads the candidates
under one snapshot; this module calls the models, outside the index lock. The query is embedded
between the search's snapshot and its read, and the read re-validates the snapshot (§14.5 step 6:
a state or source change meanwhile answers ``index_building``). Every candidate (both sides' hits)
is scored on both sides; the default ranking (``fusion="zscore"``, :mod:`actors.read.ranking`)
fuses z-scored cosine and BM25 and adds neighbour, speaker and time match, with a no-match floor;
the previous score fusion (``"convex"``) and the reference's RRF stay available
(:mod:`actors.read.fusion`). The tool answers built from a retrieval are :mod:`actors.read.hybrid`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from actors.read.fusion import apply_rerank, collapse_hits, fuse_candidates
from actors.read.ranking import RankingWeights
from persistence.search.request import DateBounds, TimeWindow
from persistence.semantic import SemanticIndex, query_tokens
from persistence.semantic.candidates import checked_query_vector
from protocol.semantic import Embedder, EmbeddingError, FusionMode, Reranker, Retrieval

logger = logging.getLogger("omray.semantic")
"""Where hybrid search has always logged: counts and flags only."""


def query_text_for_embedding(query_prefix: str, query: str) -> str:
    """``prefix + " " + query`` when a prefix is configured, else the query."""
    return f"{query_prefix} {query}" if query_prefix else query


def embed_query(embedder: Embedder, query_prefix: str, query: str) -> list[float]:
    """The query's vector (with the configured prefix); ``embedding_unavailable`` for anything but one
    non-empty, finite, non-zero vector."""
    vectors = embedder.embed([query_text_for_embedding(query_prefix, query)])
    if len(vectors) != 1:
        raise EmbeddingError(reason="invalid_vectors")
    return checked_query_vector(vectors[0])


def retrieve(
    index: SemanticIndex,
    query: str,
    embedder: Embedder | None = None,
    *,
    query_vector: Sequence[float] | None = None,
    bounds: DateBounds | None = None,
    reranker: Reranker | None = None,
    limit: int | None = None,
    time_window: TimeWindow | None = None,
    floor: bool = True,
    fusion: FusionMode = "zscore",
    weights: RankingWeights | None = None,
) -> Retrieval:
    """Hybrid retrieval over ``index`` (reference §14.5): vectors + BM25, fusion, optional rerank,
    collapse.

    A hit on a transcript chunk stands for the observation covering its event (the index's
    ``covering_memories``) with the chunk as its excerpt, or, when no observation covers the
    event, for the event itself.

    Give ``embedder`` (the settings' query prefix is applied here) or a ready ``query_vector``. With
    ``limit``, results are cut to it and ``truncated`` also says whether more were found.
    ``time_window``: the time the query names (memories dated in it rank higher). ``floor``: with
    the default ranking, a query no candidate is close to answers ``no_match`` and nothing else
    (:func:`actors.read.ranking.below_floor`). ``fusion`` and ``weights``: how candidates are
    ranked (:func:`actors.read.fusion.fuse_candidates`).
    Raises ``SemanticSearchError`` with a §14.7 code; never returns results of a dirty, mismatched
    or corrupt index.
    """
    expected = None
    vector: Sequence[float]
    if query_vector is None:
        # The embedding call runs outside the lock; the snapshot is checked again after it
        # (§14.5 step 6): a state row or source fingerprint that changed meanwhile answers
        # index_building. So the fingerprint's counts are read twice on this path, by design.
        expected = index.search_snapshot()
        if expected is None:
            return Retrieval((), False, False)
        if embedder is None:
            raise ValueError("search needs an embedder or a query_vector")
        vector = embed_query(embedder, index.settings.embedding_api.query_prefix, query)
    else:
        vector = query_vector
    # Every query word: BM25's IDF already weighs common words down, and the words that set a
    # person's own statements apart ("I", "my") matter (LongMemEval dev set, all words: turn R@1
    # 0.69 against 0.64 without function words, R@10 0.93 against 0.94).
    tokens = query_tokens(query)
    scores = index.read_candidates(tokens, vector, bounds or DateBounds(), expected)
    if scores is None:
        return Retrieval((), False, False)
    partial = scores.partial
    fused = fuse_candidates(scores, query, tokens, fusion=fusion, weights=weights, time_window=time_window)
    if floor and fused.below_floor:
        logger.info("om.semantic.search", extra={"results": 0, "no_match": True, "partial": partial})
        return Retrieval((), fused.truncated, partial or scores.lagging, (), no_match=True)
    hits = fused.chunk_ids
    if reranker is not None and hits:
        order = reranker.rerank(query, [scores.texts[chunk_id] for chunk_id in hits])
        hits = apply_rerank(hits, order)
    found = collapse_hits(
        hits, scores.parent_of, scores.memories, scores.excerpts, index.covering_memories, limit
    )
    truncated = fused.truncated
    if limit is not None:
        truncated = truncated or len(found) > limit
        found = found[:limit]
    memories = [memory for memory, _ in found]
    logger.info(
        "om.semantic.search",
        extra={"results": len(memories), "truncated": truncated, "partial": partial},
    )
    return Retrieval(
        tuple(memories), truncated, partial or scores.lagging, tuple(excerpt for _, excerpt in found)
    )
