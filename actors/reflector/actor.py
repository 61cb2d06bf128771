"""ReflectorActor: the thin shell that runs ``reflect_generation`` jobs, Dropper included (§9.2–§9.8).

The handler builds the pipeline's ports from the job payload and the worker's context, then runs
the orchestration in :mod:`actors.reflector.pipeline`. It raises on failure; the shell turns that
into a failure value.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, ClassVar

from actors.indexer.schedule import schedule_index
from actors.models.budget import held_under
from actors.models.clients import worker_clients
from actors.models.registry import model_for
from actors.models.tokens import token_counter
from actors.models.usage import with_cost
from actors.reflector.forget import run_forget
from actors.reflector.pipeline import ReflectorPorts
from actors.reflector.pipeline import reflect_generation as run_reflection
from actors.worker import RoleActor, WorkerContext, utc_now
from persistence.settings.file import job_settings_block
from persistence.settings.parse import settings_from_mapping
from protocol.errors import InvalidPayloadError
from protocol.jobs import (
    FORGET_HANDLER,
    REFLECT_GENERATION_HANDLER,
    ForgetJob,
    JobEnvelope,
    ReflectGenerationJob,
)


def reflect_generation(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.reflect_generation``. Forget jobs have a handler of their
    own (:func:`actors.reflector.forget.forget`); one that still reaches this handler (sent under
    the reflect handler id by an older queue) is run as a forget job all the same."""
    job = envelope.payload
    if isinstance(job, ForgetJob):
        return run_forget(envelope, job, context)
    if not isinstance(job, ReflectGenerationJob):
        raise InvalidPayloadError(f"job {envelope.job_id!r} is not a reflect_generation job")
    block = job_settings_block(job.settings_file, job.settings)  # current settings, not a snapshot
    settings = settings_from_mapping(block)
    store = context.store_for(job.db_path)
    store.ping()
    ports = ReflectorPorts(
        memory=context.reader_for(job.db_path),
        store=store,
        resolve_model=partial(model_for, settings, clients=worker_clients()),
        count_tokens=token_counter(settings.token_encoding).count,
        now_utc=utc_now,
        schedule_index=lambda session_id: schedule_index(
            context.dispatch, settings.semantic, job.db_path, session_id, block
        ),
    )
    with held_under(block):
        result = run_reflection(job, envelope.job_id, settings, ports, attempt=attempt)
    return with_cost(result.as_dict(), settings.prices, "reflect")


class ReflectorActor(RoleActor):
    """Runs ``reflect_generation`` jobs (Reflector, then Dropper), and ``forget`` jobs; holds no
    durable state."""

    role_handler_id = REFLECT_GENERATION_HANDLER
    default_handler = "actors.reflector.actor:reflect_generation"
    hosted_handlers: ClassVar[Mapping[str, str]] = {FORGET_HANDLER: "actors.reflector.forget:forget"}
