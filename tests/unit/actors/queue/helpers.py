"""Shared builders for the queue unit tests."""

from __future__ import annotations

from typing import Literal

from actors.queue.state import Command, QueueState, WakeAt
from protocol.jobs import JobEnvelope, ObserveBoundaryJob, ReflectGenerationJob, SemanticIndexJob
from protocol.queue_rows import StoredJob, iso_utc


def envelope(job_id: str, session_id: str = "session-1", db_path: str | None = None) -> JobEnvelope:
    """A small valid job envelope (semantic index job) with the given ids.

    Without ``db_path`` each job id gets a database of its own, hence a lane of its own, so tests
    of the queue's global behaviour see one job per lane.
    """
    return JobEnvelope(
        job_id=job_id,
        correlation_id=session_id,
        payload=SemanticIndexJob(session_id=session_id, db_path=db_path or f"/data/{job_id}/om.sqlite"),
    )


def stored(
    job_seq: int,
    job: JobEnvelope,
    state: Literal["pending", "running"],
    *,
    attempts: int = 0,
    not_before: float | None = None,
    failure_reason: str | None = None,
    held_attempts: int = 0,
) -> StoredJob:
    """An unfinished durable row as the store reads it back (times as the store holds them)."""
    return StoredJob(
        job_seq=job_seq,
        envelope=job,
        handler_id=job.handler_id,
        session_id=job.payload.session_id,
        state=state,
        attempts=attempts,
        not_before=None if not_before is None else iso_utc(not_before),
        accepted_at=iso_utc(0.0),
        started_at=None,
        finished_at=None,
        failure_reason=failure_reason,
        held_attempts=held_attempts,
    )


def observe(job_id: str, session_id: str, end_seq: int, db_path: str = "/data/om.sqlite") -> JobEnvelope:
    """An observe job of session ``run_id`` through ``end_seq``."""
    return JobEnvelope(
        job_id=job_id,
        correlation_id=session_id,
        payload=ObserveBoundaryJob(
            session_id=session_id,
            terminal_end_seq=end_seq,
            terminal_status="completed",
            renderer_version="1",
            observer_schema_version="1",
            db_path=db_path,
            events_path=f"/data/{session_id}/events.jsonl",
        ),
    )


def reflect(job_id: str, session_id: str, db_path: str = "/data/om.sqlite") -> JobEnvelope:
    """A reflect job of session ``run_id``."""
    return JobEnvelope(
        job_id=job_id,
        correlation_id=session_id,
        payload=ReflectGenerationJob(
            session_id=session_id,
            generation_id="a" * 64,
            observation_set_hash="b" * 64,
            reflector_model="builtin/extractive",
            reflector_schema_version="1",
            db_path=db_path,
        ),
    )


def scan_next_dispatch(state: QueueState, now: float) -> list[Command]:
    """``QueueState.next_dispatch`` as first written: sort every free lane head, then start in order.

    The reference the indexed implementation is checked against (same commands, same state after).
    """
    commands: list[Command] = []
    state._holds.purge(now)
    free = state.max_in_flight - state.in_flight
    waits: list[float] = []
    if free > 0:
        heads = sorted(state._free_lane_heads(), key=lambda j: (not j.interrupted, j.seq))
        for head in heads:
            if free == 0:
                break
            if state._waiting(head, now):
                # A retry's backoff or an idle hold; or its database's budget hold (times below).
                if head.not_before is not None and head.not_before > now:
                    waits.append(head.not_before)
                continue
            if state._is_full(head.handler_id):
                continue
            commands.append(state._start_head(head, now))
            free -= 1
    if free > 0:
        waits.extend(state._holds.wakes(now))
        if waits:
            commands.append(WakeAt(min(waits)))
    return commands
