"""The ``forget`` job (``omray memory forget``), run by the reflector pool: the role that rewrites memory.

The job runs in its session's lane, so every job of the session accepted before it (an observe job
in flight, a reflection) has committed first; the StoreActor then removes the named rows and their
derived copies in one transaction (``persistence.writers.forget``), and an index job compacts the hybrid
index (search already drops hits whose canonical row is gone).

:func:`forget` is the handler of ``observational_memory.forget``
(:data:`protocol.jobs.FORGET_HANDLER`); the job's :class:`protocol.forget.ForgetRequest` goes to
the store as it is.
"""

from __future__ import annotations

from typing import Any

from actors.indexer.schedule import schedule_index
from actors.worker import WorkerContext, utc_now
from persistence.settings.parse import settings_from_mapping
from protocol.errors import InvalidPayloadError
from protocol.jobs import ForgetJob, JobEnvelope


def run_forget(envelope: JobEnvelope, job: ForgetJob, context: WorkerContext) -> dict[str, Any]:
    """Forget what ``job`` names; returns ids and counts, never text."""
    store = context.store_for(job.db_path)
    store.ping()
    result = dict(store.forget(job.request(), envelope.job_id, utc_now()))
    semantic = settings_from_mapping(job.settings).semantic if job.settings else None
    index_job_id = schedule_index(context.dispatch, semantic, job.db_path, job.session_id, job.settings)
    return {"status": "forgotten", **result, "index_job_id": index_job_id}


def forget(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.forget`` (every attempt does the same: forgetting is idempotent)."""
    job = envelope.payload
    if not isinstance(job, ForgetJob):
        raise InvalidPayloadError(f"job {envelope.job_id!r} is not a forget job")
    return run_forget(envelope, job, context)
