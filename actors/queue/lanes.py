"""Which lane a job runs in, which jobs may run as one, and what identifies a job (pure).

A *lane* is one session of one database (observe and reflect jobs), or the index work of one
database: jobs of a lane start in acceptance order and never overlap; lanes run in parallel. Jobs
with one *coalesce key* that wait next to each other in a lane may run as one.
"""

from __future__ import annotations

from typing import Final

from protocol.jobs import JobEnvelope, JobPayload, ObserveBoundaryJob, SemanticIndexJob

JobKey = tuple[str, str]
"""A job's identity in the queue: ``(db_path, job_id)``; ids of different databases never collide."""

MAX_COALESCED: Final = 64
"""Most waiting jobs one dispatch may cover (bounds one batch of durable writes)."""


def job_key(envelope: JobEnvelope) -> JobKey:
    """``(db_path, job_id)`` of a job."""
    return (envelope.payload.db_path, envelope.job_id)


def lane_of(envelope: JobEnvelope) -> str:
    """The lane a job runs in: one session of one database, or one database's index work.

    Jobs of a lane start in acceptance order and never overlap; lanes run in parallel.
    """
    payload = envelope.payload
    if isinstance(payload, SemanticIndexJob):
        return f"index\x00{payload.db_path}"
    return f"session\x00{payload.db_path}\x00{payload.session_id}"


def coalesce_key(payload: JobPayload) -> tuple[str, ...] | None:
    """Jobs with one key may run as one; ``None``: never coalesced (reflect jobs)."""
    if isinstance(payload, ObserveBoundaryJob):
        # Observing through the latest boundary covers every earlier one of the same events file
        # (coverage is contiguous and parts are idempotent), so one run serves them all.
        return (
            "observe",
            payload.db_path,
            payload.session_id,
            payload.events_path,
            payload.renderer_version,
            payload.observer_schema_version,
        )
    if isinstance(payload, SemanticIndexJob):
        # An index batch synchronizes the whole database and queues its own continuation.
        return ("index", payload.db_path)
    return None


def carrier_end(payload: JobPayload) -> int:
    """How far a job's run reaches (an observe job's last boundary seq; 0 otherwise): of a
    coalesced group, the job reaching furthest (then the latest accepted) carries the run."""
    return payload.terminal_end_seq if isinstance(payload, ObserveBoundaryJob) else 0
