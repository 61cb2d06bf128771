"""``memory_search`` in hybrid mode: the semantic index wired to the embedder and the reranker.

The index itself is :class:`persistence.semantic.SemanticIndex`; embedders and the reranker are in
:mod:`actors.models.embeddings`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from actors.models.embeddings import embedder_for, reranker_for
from actors.read.search import SearchRequest
from persistence.semantic import SemanticIndex, SemanticStateWriter
from protocol.semantic import DateBounds, FusionMode, run_hybrid_search
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


HybridSearch = Callable[[SearchRequest], dict[str, object]]
"""The ``hybrid_search`` hook of ``actors.read.service.memory_search``."""


def hybrid_search_for(
    db_path: str,
    semantic: SemanticSettings,
    state_writer: SemanticStateWriter | None = None,
    *,
    fusion: FusionMode = "convex",
) -> HybridSearch:
    """``memory_search`` in hybrid mode over ``db_path``; errors are visible answers, never exact results.

    ``fusion`` picks how vector and keyword hits are merged (``rrf`` is the reference's rule; it is
    kept for comparison in ``omray bench recall``)."""
    index = SemanticIndex(db_path, semantic, state_writer or NoStateWrites(), fusion=fusion)
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
