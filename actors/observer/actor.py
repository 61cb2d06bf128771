"""ObserverActor: the thin shell that runs ``observe_boundary`` jobs (reference §7.2–§7.8).

The handler builds the pipeline's ports from the job payload (database path, events path, and the
settings, read when the job runs from the file the job names) and the worker's context (the
StoreActor of the database, its reader on the database's node, the queue), then runs the
orchestration in
:mod:`actors.observer.pipeline`. It raises on failure; the shell (:class:`actors.worker.WorkerActor`)
turns that into a failure value.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from actors.indexer.schedule import events_root_of, schedule_index
from actors.models.budget import held_under
from actors.models.clients import worker_clients
from actors.models.registry import model_for
from actors.models.tokens import token_counter
from actors.models.usage import with_cost
from actors.observer.pipeline import ObserverPorts, observe_through
from actors.worker import RoleActor, WorkerContext, local_now, utc_now
from persistence.settings.file import job_settings_block
from persistence.settings.parse import settings_from_mapping
from protocol.errors import InvalidPayloadError
from protocol.jobs import OBSERVE_BOUNDARY_HANDLER, JobEnvelope, ObserveBoundaryJob


def observe_boundary(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.observe_boundary``."""
    job = envelope.payload
    if not isinstance(job, ObserveBoundaryJob):
        raise InvalidPayloadError(f"job {envelope.job_id!r} is not an observe_boundary job")
    block = job_settings_block(job.settings_file, job.settings)  # current settings, not a snapshot
    settings = settings_from_mapping(block)
    store = context.store_for(job.db_path)
    store.ping()  # creates and migrates the database before the first read
    reader = context.reader_for(job.db_path)  # on the database's node: its rows and events are there
    ports = ObserverPorts(
        memory=reader,
        store=store,
        read_events=partial(
            reader.read_event_window,
            job.events_path,
            redact_patterns=settings.redact_patterns,
            session_id=job.session_id,  # a missing or foreign file is a failure that says so
        ),
        resolve_model=partial(model_for, settings, clients=worker_clients()),
        count_tokens=token_counter(settings.token_encoding).count,
        now_utc=utc_now,
        now_local=local_now,
        dispatch=context.dispatch,
    )
    with held_under(block):
        result = observe_through(job, envelope.job_id, settings, ports)
    if result.status != "deferred":
        # After success only (§7.2 step 4): index what was just committed (a deferral committed nothing).
        root = events_root_of(job.events_path, job.session_id)
        schedule_index(context.dispatch, settings.semantic, job.db_path, job.session_id, block, root)
    return with_cost(result.as_dict(), settings.prices, "observe")


class ObserverActor(RoleActor):
    """Runs ``observe_boundary`` jobs, one attempt of a job at a time; holds no durable state."""

    role_handler_id = OBSERVE_BOUNDARY_HANDLER
    default_handler = "actors.observer.actor:observe_boundary"
