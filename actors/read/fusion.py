"""How hybrid search fuses and orders its candidates (reference §14.5): the fusion modes over the
candidates one search read (the default z-score ranking of :mod:`actors.read.ranking`, score-aware
convex fusion, the reference's reciprocal-rank fusion, the keyword side alone), the reranker's
order, and collapsing chunk hits to memories.

Pure functions over ids and scores: no I/O. :mod:`actors.read.retrieval` reads the candidates
(:meth:`persistence.semantic.SemanticIndex.read_candidates`) and calls them; the answers built
from what they return are in :mod:`actors.read.hybrid`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from actors.read.ranking import (
    Candidate,
    RankingWeights,
    below_floor,
    named_words,
    query_speaker,
    query_word_weights,
    rank_candidates,
    text_speaker,
    unknown_names,
)
from persistence.search.request import TimeWindow
from persistence.semantic.candidates import CandidateScores
from protocol.semantic import (
    NO_CANONICAL_MEMORY_MESSAGE,
    FusionMode,
    RerankError,
    SemanticSearchError,
    SourceMemory,
)
from protocol.source_text import SourceExcerpt

RRF_K: Final[int] = 60
"""Reciprocal-rank fusion constant."""
FUSED_CANDIDATE_LIMIT: Final[int] = 200
"""Fused chunk candidates kept after fusion."""


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


@dataclass(frozen=True, slots=True)
class FusedCandidates:
    """The candidates of one search in fused order."""

    chunk_ids: list[str]
    """Chunk ids, best first, at most :data:`FUSED_CANDIDATE_LIMIT`."""
    truncated: bool
    """More candidates were found than kept (by fusion or by a store's read)."""
    below_floor: bool = False
    """No candidate is close enough to the query to be an answer (default ranking only)."""


def fuse_candidates(
    scores: CandidateScores,
    query: str,
    tokens: Sequence[str],
    *,
    fusion: FusionMode = "zscore",
    weights: RankingWeights | None = None,
    time_window: TimeWindow | None = None,
) -> FusedCandidates:
    """The candidates ``scores`` holds, fused by ``fusion`` (``tokens``: the query's keyword tokens).

    ``zscore`` (the default, :func:`actors.read.ranking.rank_candidates` with ``weights``) also
    judges the no-match floor (:func:`actors.read.ranking.below_floor`); ``time_window`` is the
    time the query names (memories dated in it rank higher)."""
    if scores.chunk_count == 0:
        return FusedCandidates([], truncated=False)
    vector_hits, keyword_hits = scores.vector_hits, scores.keyword_hits
    floored = False
    if fusion == "zscore":
        candidates = [
            _candidate(chunk_id, scores, time_window)
            for chunk_id in dict.fromkeys((*vector_hits.chunk_ids, *keyword_hits.chunk_ids))
        ]
        chosen = weights or RankingWeights()
        ranked = rank_candidates(
            candidates,
            query_speaker(query),
            vector_weight=chosen.vector_weight,
            neighbour_share=chosen.neighbour_share,
            speaker_bonus=chosen.speaker_bonus,
            time_bonus=chosen.time_bonus,
        )
        by_id = {candidate.chunk_id: candidate for candidate in candidates}
        floored = below_floor(
            [by_id[chunk_id] for chunk_id in ranked],
            scores.texts,
            query_word_weights(tokens, scores.documents, scores.frequencies),
            # Only a keyword index that holds every chunk can tell that a name was never stored.
            unknown_name=not (scores.partial or scores.lagging)
            and unknown_names(named_words(query), scores.frequencies),
        )
        fused = ranked[:FUSED_CANDIDATE_LIMIT]
    elif fusion == "convex":
        fused = convex_fuse(
            vector_hits.chunk_ids,
            scores.vector_scores,
            keyword_hits.chunk_ids,
            scores.keyword_scores,
            limit=FUSED_CANDIDATE_LIMIT,
        )
    elif fusion == "keyword":
        fused = list(keyword_hits.chunk_ids[:FUSED_CANDIDATE_LIMIT])
    else:
        fused = rrf_fuse([vector_hits.chunk_ids, keyword_hits.chunk_ids], limit=FUSED_CANDIDATE_LIMIT)
    truncated = len(fused) >= FUSED_CANDIDATE_LIMIT or vector_hits.truncated or keyword_hits.truncated
    return FusedCandidates(fused, truncated, floored)


def _candidate(chunk_id: str, scores: CandidateScores, time_window: TimeWindow | None) -> Candidate:
    """What ranking reads of one candidate chunk: its scores and its memory's place, speaker and date."""
    memory = scores.memories[scores.parent_of[chunk_id]]
    event = memory.kind == "event"
    # An event's place is its seq; a memory of exactly one event of its session stands at that
    # event's place (the offline observer writes one per message).
    single = memory.kind != "reflection" and len(memory.source_seqs) == 1
    return Candidate(
        chunk_id,
        scores.vector_scores.get(chunk_id, 0.0),
        scores.keyword_scores.get(chunk_id, 0.0),
        (memory.session_id, memory.source_seqs[0]) if single else None,
        text_speaker(memory.content) if event else None,
        time_window is not None and time_window.contains(memory.timestamp),
    )


def apply_rerank(hits: Sequence[str], order: Sequence[int]) -> list[str]:
    """``hits`` reordered (and filtered) to the reranker's offsets; bad offsets are a failure."""
    if any(not 0 <= offset < len(hits) for offset in order) or len(set(order)) != len(order):
        raise RerankError(reason="invalid_offsets")
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
