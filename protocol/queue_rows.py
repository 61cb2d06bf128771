"""The durable rows and writes of the job queue's own database (``<prefix>.queue.sqlite``).

Shapes only: what the QueueActor writes in one group commit (:data:`JobWrite`), what it reads back
on restart (:class:`StoredJob`), and what status asks (:class:`RuntimeEvent`, :class:`JobCounts`).
``persistence`` stores them; ``actors.queue`` builds and reads them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from protocol.ids import SESSION_ID_ALIASES
from protocol.jobs import JobEnvelope

JobState = Literal["pending", "running", "succeeded", "failed"]
"""Lifecycle of one queued job."""


def iso_utc(epoch_s: float) -> str:
    """UTC ISO-8601 text of an epoch time (how the queue's rows hold times)."""
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat()


def epoch_of(iso: str | None) -> float | None:
    """Epoch seconds of an ISO-8601 text (``None`` stays ``None``)."""
    return None if iso is None else datetime.fromisoformat(iso).timestamp()


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class JobAccepted(_Result):
    """Queue write: job ``job_seq`` was accepted (a new ``pending`` row); the QueueActor numbers its jobs."""

    kind: Literal["accepted"] = "accepted"
    job_seq: int
    envelope: JobEnvelope
    accepted_at: str
    redrive_of: int | None = None
    """The failed job this one re-drives: its row records ``redriven_to`` in the same write."""
    redrives: int = 0
    """How many times this job's work was re-driven (0 for a new job)."""


class JobStarted(_Result):
    """Queue write: attempt ``attempt`` of job ``job_seq`` started (row -> ``running``)."""

    kind: Literal["started"] = "started"
    job_seq: int
    attempt: int
    started_at: str


class JobRetry(_Result):
    """Queue write: a running job waits for a retry until ``not_before`` (row -> ``pending``)."""

    kind: Literal["retry"] = "retry"
    job_seq: int
    not_before: str
    failure_reason: str


class JobHeldWrite(_Result):
    """Queue write: a running job found its project's daily budget used up (row -> ``pending``): it
    waits until ``not_before`` after a restart (in memory, its database's hold decides), and
    ``held_attempts`` of its runs do not count as attempts."""

    kind: Literal["held"] = "held"
    job_seq: int
    held_attempts: int = Field(ge=1)
    not_before: str
    failure_reason: str


class JobFinished(_Result):
    """Queue write: the job left the FIFO as ``succeeded`` or ``failed``."""

    kind: Literal["finished"] = "finished"
    job_seq: int
    state: Literal["succeeded", "failed"]
    finished_at: str
    failure_reason: str | None = None


class JobGivenUp(_Result):
    """Queue write: the job failed for good, together with its ``job_failed`` runtime event."""

    kind: Literal["given_up"] = "given_up"
    job_seq: int
    finished_at: str
    failure_reason: str
    session_id: str
    event_type: str
    event_payload: dict[str, Any]
    db_path: str = ""
    """Database of the job (its session is a session of that database)."""


class RuntimeEventWrite(_Result):
    """Queue write: a sanitized runtime event for a session."""

    kind: Literal["runtime_event"] = "runtime_event"
    session_id: str
    event_type: str
    payload: dict[str, Any]
    created_at: str
    db_path: str = ""
    """Database whose session the event concerns."""


JobWrite = JobAccepted | JobStarted | JobRetry | JobHeldWrite | JobFinished | JobGivenUp | RuntimeEventWrite
"""One durable write of the queue; a loop step applies its writes in one transaction."""


class StoredJob(_Result):
    """One unfinished or finished job row of ``omray_job``."""

    job_seq: int
    """Acceptance order."""
    envelope: JobEnvelope
    """The job as accepted."""
    handler_id: str
    """Stable handler id."""
    session_id: str = Field(validation_alias=SESSION_ID_ALIASES, serialization_alias="run_id")
    """Session of the payload."""
    state: JobState
    """Lifecycle state."""
    attempts: int
    """Attempts started so far."""
    not_before: str | None
    """Earliest start of the next attempt (UTC ISO-8601), after a retry."""
    accepted_at: str
    """When it was accepted."""
    started_at: str | None
    """When the latest attempt started."""
    finished_at: str | None
    """When it finished."""
    failure_reason: str | None
    """Short category code of the latest failure."""
    redrives: int = 0
    """How many times this job's work was re-driven after it failed (migration omray_015)."""
    held_attempts: int = 0
    """Runs of ``attempts`` held by the daily budget, not counted as attempts (migration omray_017)."""


class WaitingJobs(_Result):
    """Failed jobs that wait for their cause to go (issue 40 item 1), counted by what decides their
    re-drive: their database and handler, the settings they were sent with, and whether an automatic
    re-drive may still queue them (else only ``omray retry``)."""

    db_path: str
    """Memory database of the jobs."""
    handler_id: str
    """Their handler."""
    settings_fingerprint: str | None
    """Fingerprint of the settings the jobs were sent with (``None``: not known)."""
    automatic: bool
    """True while a later success (or a settings change) re-drives them by itself."""
    jobs: int
    """How many."""


class RuntimeEvent(_Result):
    """One row of ``omray_runtime_event`` (e.g. ``extension_agent.job_failed``)."""

    event_seq: int
    """Order of recording."""
    session_id: str = Field(validation_alias=SESSION_ID_ALIASES)
    """Session the event concerns (column ``run_id``)."""
    event_type: str
    """Event type."""
    payload: dict[str, Any]
    """Sanitized payload (ids, counts, codes; never memory text)."""
    created_at: str
    """When it was recorded."""
    db_path: str = ""
    """Database whose session it concerns (``""``: unknown, an event older than the column)."""


class JobCounts(_Result):
    """Number of jobs in each state."""

    pending: int
    """Waiting to start (including retries waiting for their backoff)."""
    running: int
    """Started and not finished."""
    succeeded: int
    """Finished successfully."""
    failed: int
    """Finished after exhausting retries."""


class EnqueueResult(_Result):
    """Outcome of accepting one job into the durable FIFO."""

    job_seq: int
    """Acceptance order of the (new or already queued) job."""
    job_id: str
    """Job id."""
    created: bool
    """False when the same job id was already pending or running."""
