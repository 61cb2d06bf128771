"""The indexing core (reference §14.4): plan a batch, embed it in batches, commit it.

One call of :func:`synchronize` is one bounded, resumable step of building a database's derived
index: under the index lock it plans the next chunks (:func:`actors.indexer.plan.plan_batch`, after
any rebuild the index decides on), embeds them outside the lock (:func:`embed_in_batches`), and
commits them through the index (:meth:`persistence.semantic.SemanticIndex.commit_batch`), which
drops the batch if the index changed meanwhile. The index's state row is written through the
database's Store (the ``state_writer`` the index was made with).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from actors.indexer.plan import plan_batch
from persistence.semantic import SemanticIndex, SyncResult
from persistence.semantic.batches import BatchPlan
from protocol.semantic import Embedder, EmbeddingError

JOB_BATCHES: Final[int] = 32
"""Embedding batches one indexer job commits at once. Every commit rewrites and checksums the
whole vector file, so one batch per commit made a backfill quadratic (at 50,000 memories most of
its time went to rewriting the file); 32 batches of the offline model's 32 chunks keep that
write a few percent of the embedding time at that size, and a job under a minute."""


def embed_in_batches(embedder: Embedder, texts: Sequence[str], size: int) -> list[list[float]]:
    """Vectors of ``texts`` (in their order), embedded ``size`` at a time, shortest texts first.

    Batching texts of similar length spares the padding an embedder adds to the longest text of
    a batch (half the work on mixed conversation turns with the offline model). An embedder whose
    ``batches_by_tokens`` is true (the offline one) gets every text in one call: it sorts them by
    token count and batches them itself, which pads less than sorting by characters here."""
    if getattr(embedder, "batches_by_tokens", False) is True:
        size = max(size, len(texts))
    order = sorted(range(len(texts)), key=lambda position: (len(texts[position]), position))
    vectors: list[list[float]] = [[] for _ in texts]
    for start in range(0, len(order), size):
        positions = order[start : start + size]
        embedded = embedder.embed([texts[position] for position in positions])
        if len(embedded) != len(positions):
            raise EmbeddingError(reason="invalid_vectors")
        for position, vector in zip(positions, embedded, strict=True):
            vectors[position] = vector
    return vectors


def plan_batches(
    index: SemanticIndex, batch_size: int | None = None, *, batches: int = 1, full_check: bool = False
) -> BatchPlan | SyncResult:
    """The first half of :func:`synchronize`: what the next ``batches`` batches of at most
    ``batch_size`` chunks (default: the settings' batch size) embed, planned under the index lock
    after any rebuild, or the result when there is no database yet.

    The embedding may then run anywhere (another process, another node);
    :meth:`persistence.semantic.SemanticIndex.commit_batch` takes the plan back with its vectors,
    and drops a plan made on another snapshot than the index holds by then."""
    size = batch_size if batch_size is not None else index.settings.embedding_api.batch_size
    if size < 1 or batches < 1:
        raise ValueError("batch_size and batches must be >= 1")
    if not index.has_database():
        return SyncResult(True, 0, 0, False, 0)  # no database yet: nothing to index
    with index.planning(full_check) as source:
        return plan_batch(source, size * batches)


def synchronize(
    index: SemanticIndex,
    embedder: Embedder,
    batch_size: int | None = None,
    *,
    batches: int = 1,
    full_check: bool = False,
) -> SyncResult:
    """Index up to ``batches`` batches of at most ``batch_size`` chunks (default: the settings'
    batch size), committed once; ``complete`` when nothing is left.

    Each batch is one embedding call; the vector file is saved and checksummed once per call of
    this function, so ``batches`` amortizes that O(index) write (the indexer passes
    :data:`JOB_BATCHES`). The index rebuilds first when any rebuild condition holds; ``full_check``
    compares every canonical memory (a database edited by other tools). The embedding calls run
    outside the lock; if the index changed meanwhile the work is dropped (``complete=False``,
    nothing written), and a failing call leaves the index as it was. Raises
    ``SemanticSearchError`` (``index_busy``, ``embedding_dimensions_changed``, or the embedder's
    own ``embedding_unavailable``).
    """
    size = batch_size if batch_size is not None else index.settings.embedding_api.batch_size
    plan = plan_batches(index, size, batches=batches, full_check=full_check)
    if isinstance(plan, SyncResult):
        return plan
    vectors = embed_in_batches(embedder, plan.vector_texts(), size)
    return index.commit_batch(plan, vectors)
