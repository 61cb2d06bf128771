"""``memory_search`` in hybrid mode: the semantic index wired to the embedder and the reranker, and
the tool answers built from what it retrieved (reference §13.4, §14.7).

The pipeline is :func:`actors.read.retrieval.retrieve` (its ranking rules in :mod:`actors.read.fusion`
and :mod:`actors.read.ranking`) over the index :class:`persistence.semantic.SemanticIndex`; embedders
and the reranker are in :mod:`actors.models.embeddings`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from actors.models.registry import embedder_for, reranker_for
from actors.read.query_time import query_time_window
from actors.read.ranking import RankingWeights
from actors.read.retrieval import retrieve
from actors.read.search import result_item
from persistence.search.request import SearchRequest
from persistence.semantic import SemanticIndex, SemanticStateWriter
from protocol.canonical import condense
from protocol.semantic import (
    NO_MATCH_MESSAGE,
    SEARCH_FAILED_MESSAGE,
    FusionMode,
    Retrieval,
    SemanticSearchError,
    SourceMemory,
)
from protocol.settings import SemanticSettings
from protocol.source_text import SourceExcerpt

logger = logging.getLogger("omray.hybrid")
_semantic_logger = logging.getLogger("omray.semantic")  # where hybrid search failures were always logged


class NoStateWrites:
    """A state writer for processes that must not write (e.g. the CLI without a runtime).

    Search only writes to mark a damaged index dirty; skipping that is safe because the next
    index job re-checks every derived file against its recorded checksum and rebuilds.
    """

    def save_semantic_state(self, *args: Any, **kwargs: Any) -> None:
        """Skip the write (logged)."""
        logger.info("semantic state write skipped in a read-only process")


HybridSearch = Callable[[SearchRequest], dict[str, object]]
"""The ``hybrid_search`` hook of ``actors.read.service.memory_search``."""


def hybrid_search_for(
    db_path: str,
    semantic: SemanticSettings,
    state_writer: SemanticStateWriter | None = None,
    *,
    fusion: FusionMode = "zscore",
    weights: RankingWeights | None = None,
) -> HybridSearch:
    """``memory_search`` in hybrid mode over ``db_path``; errors are visible answers, never exact results.

    ``fusion`` picks how vector and keyword hits are merged (``rrf`` is the reference's rule; it is
    kept for comparison in ``omray bench recall``)."""
    index = SemanticIndex(db_path, semantic, state_writer or NoStateWrites())
    embedder = embedder_for(semantic)
    reranker = reranker_for(semantic)

    def search(request: SearchRequest) -> dict[str, object]:
        return run_hybrid_search(
            lambda: retrieve(
                index,
                request.query,
                embedder,
                bounds=request.bounds,
                reranker=reranker,
                limit=request.limit,
                time_window=query_time_window(request.query, _query_clock(request.query_date)),
                floor=semantic.no_match,
                fusion=fusion,
                weights=weights,
            ),
            request.query,
            request.limit,
        )

    return search


def _query_clock(query_date: str | None) -> datetime:
    """The clock relative phrases are read against: the request's ``query_date`` (UTC), else now."""
    if query_date is None:
        return datetime.now(UTC)
    return datetime.strptime(query_date, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


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
    item = result_item(memory.kind, memory.session_id, memory.memory_id, memory.timestamp, content)
    if memory.kind == "observation":
        item["importance"] = memory.importance
    if excerpt is not None:
        item["source"] = excerpt.as_dict()
    if memory.covered_by is not None:
        item["covered_by"] = memory.covered_by
    return item


def hybrid_answer(query: str, limit: int, retrieval: Retrieval) -> dict[str, object]:
    """``{ok, query, limit, truncated, partial, count, results}`` for a retrieval, with ``no_match``
    and a message when nothing stored is close enough to the query."""
    results = [
        memory_result_item(memory, retrieval.excerpt_of(position))
        for position, memory in enumerate(retrieval.results[:limit])
    ]
    answer: dict[str, object] = {
        "ok": True,
        "query": query,
        "limit": limit,
        "truncated": retrieval.truncated or len(retrieval.results) > limit,
        "partial": retrieval.partial,
        "count": len(results),
        "results": results,
    }
    if retrieval.no_match:
        answer["no_match"] = True
        answer["message"] = NO_MATCH_MESSAGE
    return answer


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
        _semantic_logger.warning("om.semantic.search_failed", extra={"exception_class": type(exc).__name__})
        return {"ok": False, "error": "semantic_search_failed", "message": SEARCH_FAILED_MESSAGE}
    return hybrid_answer(query, limit, retrieval)
