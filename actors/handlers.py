"""Production job handlers: what the Observer, Reflector and Indexer actors run for each job.

Each handler builds the ports of its pipeline from the job payload (database path, events path,
settings snapshot) and the worker's context (the StoreActor of the database, the queue), then runs
the pure orchestration. Handlers raise on failure; the worker turns that into a failure value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import partial
from typing import Any

from actors.embeddings import embedder_for
from actors.hybrid import schedule_index
from actors.models import ChatModel, model_for
from actors.observer_pipeline import ObserverPorts, observe_through
from actors.tokens import token_counter
from actors.worker import WorkerContext
from persistence.events_reader import read_event_range
from persistence.queries import MemoryReader
from persistence.semantic_index import SemanticIndex
from protocol.errors import InvalidPayloadError
from protocol.jobs import JobEnvelope, ObserveBoundaryJob, ReflectGenerationJob, SemanticIndexJob
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
    result = observe_through(job, envelope.job_id, settings, ports).as_dict()
    # After success only (§7.2 step 4): index what was just committed.
    schedule_index(context.dispatch, settings.semantic, job.db_path, job.run_id, job.settings)
    return result


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
        schedule_index=lambda run_id: schedule_index(
            context.dispatch, settings.semantic, job.db_path, run_id, job.settings
        ),
    )
    return run_reflection(job, envelope.job_id, settings, ports, attempt=attempt).as_dict()


def semantic_index(envelope: JobEnvelope, attempt: int, context: WorkerContext) -> dict[str, Any]:
    """Handler of ``observational_memory.semantic_index``: one bounded batch (reference §14.4).

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
    index = SemanticIndex(job.db_path, settings.semantic, state_writer=store)
    result = index.synchronize(embedder_for(settings.semantic))
    continuation = None
    if not result.complete:
        continuation = schedule_index(
            context.dispatch, settings.semantic, job.db_path, job.run_id, job.settings
        )
    return {
        "status": "complete" if result.complete else "partial",
        "indexed_memories": result.indexed_memories,
        "source_memories": result.source_memories,
        "embedded_chunks": result.embedded_chunks,
        "rebuilt": result.rebuilt,
        "continuation_job_id": continuation,
    }
