"""Production job handlers: what the Observer, Reflector and Indexer actors run for each job.

Each handler builds the ports of its pipeline from the job payload (database path, events path,
settings snapshot) and the worker's context (the StoreActor of the database, the queue), then runs
the pure orchestration. Handlers raise on failure; the worker turns that into a failure value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

from actors.models import ChatModel, model_for
from actors.observer_pipeline import ObserverPorts, observe_through
from actors.tokens import token_counter
from actors.worker import WorkerContext
from persistence.events_reader import read_event_range
from persistence.queries import MemoryReader
from protocol.errors import InvalidPayloadError
from protocol.jobs import JobEnvelope, ObserveBoundaryJob, ReflectGenerationJob
from protocol.settings import OmSettings, settings_from_mapping


def utc_now() -> str:
    """UTC ISO-8601 now, second precision (the original's ATOM format)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def local_now() -> str:
    """Local ``YYYY-MM-DD HH:MM`` now (the Observer's fallback time)."""
    return datetime.now().astimezone().strftime("%Y-%m-%d %H:%M")


def _resolve_model(settings: OmSettings, model: str) -> tuple[ChatModel, int]:
    return model_for(settings, model)


def observe_boundary(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.observe_boundary``."""
    job = envelope.payload
    if not isinstance(job, ObserveBoundaryJob):
        raise InvalidPayloadError(f"job {envelope.job_id!r} is not an observe_boundary job")
    settings = settings_from_mapping(job.settings)
    store = context.store_for(job.db_path)
    store.ping()  # creates and migrates the database before the first read
    ports = ObserverPorts(
        memory=MemoryReader(job.db_path),
        store=store,
        read_events=partial(read_event_range, job.events_path),
        resolve_model=partial(_resolve_model, settings),
        count_tokens=token_counter(settings.token_encoding).count,
        now_utc=utc_now,
        now_local=local_now,
        dispatch=context.dispatch,
    )
    return observe_through(job, envelope.job_id, settings, ports).as_dict()


def reflect_generation(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.reflect_generation``."""
    from actors.reflector_pipeline import ReflectorPorts
    from actors.reflector_pipeline import reflect_generation as run_reflection

    job = envelope.payload
    if not isinstance(job, ReflectGenerationJob):
        raise InvalidPayloadError(f"job {envelope.job_id!r} is not a reflect_generation job")
    settings = settings_from_mapping(job.settings)
    store = context.store_for(job.db_path)
    store.ping()
    ports = ReflectorPorts(
        memory=MemoryReader(job.db_path),
        store=store,
        resolve_model=partial(_resolve_model, settings),
        count_tokens=token_counter(settings.token_encoding).count,
        now_utc=utc_now,
    )
    return run_reflection(job, envelope.job_id, settings, ports).as_dict()


def semantic_index(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.semantic_index``.

    Hybrid retrieval is not configured in this build, so there is nothing to index: the job
    succeeds without work, exactly as the original does when ``semantic`` is absent.
    """
    return {"status": "semantic_not_configured"}
