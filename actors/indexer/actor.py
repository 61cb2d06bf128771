"""IndexerActor: the thin shell that runs ``semantic_index`` jobs, one bounded batch each (§14.4).

The index lives in :mod:`persistence.semantic`; this handler wires it to the embedder of the
settings and to the database's StoreActor (the only writer of the index state row).
"""

from __future__ import annotations

from typing import Any

from actors.indexer.schedule import schedule_index
from actors.models.clients import worker_clients
from actors.models.embeddings import embedder_for
from actors.worker import RoleActor, WorkerContext
from persistence.semantic import JOB_BATCHES, SemanticIndex
from protocol.errors import InvalidPayloadError
from protocol.jobs import SEMANTIC_INDEX_HANDLER, JobEnvelope, SemanticIndexJob
from protocol.settings import settings_from_mapping


def semantic_index(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.semantic_index``: one bounded commit of
    :data:`~persistence.semantic.JOB_BATCHES` embedding batches (reference §14.4).

    Without a ``semantic`` setting there is nothing to index and the job succeeds at once. When
    the batch did not complete the index, a continuation job is queued behind it.
    """
    job = envelope.payload
    if not isinstance(job, SemanticIndexJob):
        raise InvalidPayloadError(f"job {envelope.job_id!r} is not a semantic_index job")
    settings = settings_from_mapping(job.settings)
    if settings.semantic is None:
        return {"status": "semantic_not_configured"}
    store = context.store_for(job.db_path)
    store.ping()
    index = SemanticIndex(job.db_path, settings.semantic, state_writer=store, events_root=job.events_root)
    result = index.synchronize(embedder_for(settings.semantic, worker_clients()), batches=JOB_BATCHES)
    continuation = None
    if not result.complete:
        continuation = schedule_index(
            context.dispatch, settings.semantic, job.db_path, job.run_id, job.settings, job.events_root
        )
    return {
        "status": "complete" if result.complete else "partial",
        "indexed_memories": result.indexed_memories,
        "source_memories": result.source_memories,
        "embedded_chunks": result.embedded_chunks,
        "rebuilt": result.rebuilt,
        "continuation_job_id": continuation,
    }


class IndexerActor(RoleActor):
    """Runs ``semantic_index`` jobs; the derived index files are rebuilt from canonical rows."""

    role_handler_id = SEMANTIC_INDEX_HANDLER
    default_handler = "actors.indexer.actor:semantic_index"
