"""Hybrid retrieval glue: scheduling index jobs and answering ``memory_search`` in hybrid mode.

The index itself is :class:`persistence.semantic_index.SemanticIndex`; embedders and the reranker
are in :mod:`actors.embeddings`. This module wires them to settings, the queue and the read side.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from actors.embeddings import embedder_for, reranker_for
from actors.search_core import SearchRequest
from persistence.semantic_index import SemanticIndex, SemanticStateWriter
from protocol.jobs import JobEnvelope, SemanticIndexJob
from protocol.semantic import DateBounds, run_hybrid_search
from protocol.settings import SemanticSettings

logger = logging.getLogger("omray.hybrid")


class NoStateWrites:
    """A state writer for processes that must not write (e.g. the CLI without a runtime).

    Search only writes to mark a damaged index dirty; skipping that is safe because the next
    index job re-checks every derived file against its recorded checksum and rebuilds.
    """

    def save_semantic_state(self, *args: Any, **kwargs: Any) -> None:
        """Skip the write (logged)."""
        logger.info("semantic state write skipped in a read-only process")


def index_job(db_path: str, run_id: str, settings_block: Mapping[str, Any]) -> JobEnvelope:
    """A ``semantic_index`` job for one database; the id is 32 random hex chars (reference §5.2)."""
    payload = SemanticIndexJob(run_id=run_id, db_path=db_path, settings=dict(settings_block))
    return JobEnvelope(job_id=uuid.uuid4().hex, correlation_id=run_id, payload=payload)


def schedule_index(
    dispatch: Callable[[JobEnvelope], str] | None,
    semantic: SemanticSettings | None,
    db_path: str,
    run_id: str,
    settings_block: Mapping[str, Any],
) -> str | None:
    """Dispatch an index batch when hybrid retrieval is configured; returns its job id."""
    if dispatch is None or semantic is None:
        return None
    return dispatch(index_job(db_path, run_id, settings_block))


HybridSearch = Callable[[SearchRequest], dict[str, object]]
"""The ``hybrid_search`` hook of ``actors.read_service.memory_search``."""


def hybrid_search_for(
    db_path: str, semantic: SemanticSettings, state_writer: SemanticStateWriter | None = None
) -> HybridSearch:
    """``memory_search`` in hybrid mode over ``db_path``; errors are visible answers, never exact results."""
    index = SemanticIndex(db_path, semantic, state_writer or NoStateWrites())
    embedder = embedder_for(semantic)
    reranker = reranker_for(semantic)

    def search(request: SearchRequest) -> dict[str, object]:
        return run_hybrid_search(
            lambda: index.search(
                request.query,
                embedder,
                bounds=DateBounds.from_request(request),
                reranker=reranker,
                limit=request.limit,
            ),
            request.query,
            request.limit,
        )

    return search
