"""The ``forget`` job (``omray memory forget``), run by the reflector pool: the role that rewrites memory.

The job runs in its session's lane, so every job of the session accepted before it (an observe job
in flight, a reflection) has committed first; the StoreActor then removes the named rows and their
derived copies in one transaction (``persistence.forget``), and an index job compacts the hybrid
index (search already drops hits whose canonical row is gone).
"""

from __future__ import annotations

from typing import Any

from actors.indexer.schedule import schedule_index
from actors.worker import WorkerContext, utc_now
from persistence.settings_parse import settings_from_mapping
from protocol.jobs import ForgetJob, JobEnvelope


def run_forget(envelope: JobEnvelope, job: ForgetJob, context: WorkerContext) -> dict[str, Any]:
    """Forget what ``job`` names; returns ids and counts, never text."""
    store = context.store_for(job.db_path)
    store.ping()
    request = {
        "run_id": job.session_id,
        "memory_ids": list(job.memory_ids),
        "event_ranges": [list(pair) for pair in job.event_ranges],
        "whole_session": job.whole_session,
    }
    result = dict(store.forget(request, envelope.job_id, utc_now()))
    semantic = settings_from_mapping(job.settings).semantic if job.settings else None
    index_job_id = schedule_index(context.dispatch, semantic, job.db_path, job.session_id, job.settings)
    return {"status": "forgotten", **result, "index_job_id": index_job_id}
