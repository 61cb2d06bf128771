"""The commands the queue's state machine returns, and what the QueueActor does with each (pure values).

Every step of :class:`actors.queue.state.QueueState` returns a list of these frozen values; the
actor persists each one's store effect *before* acting on it:

- :class:`Dispatch`: every member row -> ``running`` with its own attempt count (``covered``); then
  call the handler once, with the carrier's payload.
- :class:`ScheduleRetry`: row -> ``pending`` with ``not_before``.
- :class:`HoldJob`: row -> ``pending`` with ``not_before`` (after a restart) and its held runs.
- :class:`MarkSucceeded`, :class:`GiveUp`: the row leaves the active queue (succeeded / failed).
- :class:`AlreadyQueued`: if ``job_seq != existing_seq``, delete the surplus row ``job_seq``.
- :class:`EmitJobFailed`, :class:`EmitJobHeld`: a runtime event for the session.
- :class:`WakeAt`, :class:`OutcomeIgnored`: no store write.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

from protocol.jobs import JobPayload
from protocol.outcomes import JobFailedEvent, JobHeldEvent


@dataclass(frozen=True, slots=True)
class JobCommand:
    """A command about one queued job."""

    job_seq: int
    """Queue sequence number of the job."""
    job_id: str
    """Id of the job."""


@dataclass(frozen=True, slots=True)
class Dispatch(JobCommand):
    """Run attempt ``attempt`` of the job on the worker registered for ``handler_id``."""

    handler_id: str
    """Stable handler id that picks the worker actor."""
    attempt: int
    """1-based attempt number; pass it back with the outcome."""
    payload: JobPayload
    """What to do."""
    members: tuple[tuple[int, int], ...] = field(default=())
    """``(job_seq, attempt)`` of every job this run covers, carrier included, in sequence order.

    More than one when waiting jobs of one lane were coalesced; each member's row is marked
    running with its own attempt, and all of them finish with this run's outcome.
    """

    @property
    def covered(self) -> tuple[tuple[int, int], ...]:
        """The members, or the carrier alone when none are listed."""
        return self.members or ((self.job_seq, self.attempt),)


@dataclass(frozen=True, slots=True)
class AttemptsEnded(JobCommand):
    """What follows a job's latest attempt: it finished, waits for a retry, or gives up."""

    attempts: int
    """Attempts made so far (all of them, once the job leaves the queue)."""


@dataclass(frozen=True, slots=True)
class MarkSucceeded(AttemptsEnded):
    """The job finished; it leaves the durable queue."""

    db_path: str = field(default="", compare=False)
    """Its database (a success there can re-drive failed jobs: :mod:`actors.queue.redrive`); not
    part of the command's identity."""
    handler_id: str = field(default="", compare=False)
    """Its handler."""


@dataclass(frozen=True, slots=True)
class ScheduleRetry(AttemptsEnded):
    """The attempt failed; the job waits in the queue until ``not_before``."""

    not_before: float
    """Earliest time of the next attempt."""
    reason: str
    """Category code of the failure."""


@dataclass(frozen=True, slots=True)
class HoldJob(AttemptsEnded):
    """The run found its project's daily budget used up: the job waits in its lane, held with its
    database (:mod:`actors.queue.holds`); the run is not counted as an attempt."""

    held: int
    """Runs of the job held so far (``attempts - held`` attempts count against its retries)."""
    not_before: float
    """Earliest start after a restart of the queue (holds live in memory): the next re-check."""
    reason: str
    """``budget_tokens`` or ``budget_usd``."""


@dataclass(frozen=True, slots=True)
class GiveUp(AttemptsEnded):
    """The queue stops trying; the job leaves the durable queue as failed."""

    reason: str
    """Category code of the last failure."""
    settings_fingerprint: str | None = field(default=None, compare=False)
    """The settings the job was sent with (:mod:`actors.queue.redrive`); not part of its identity."""


@dataclass(frozen=True, slots=True)
class WakeAt:
    """Nothing is eligible now, but a retry becomes eligible at ``time``: call ``next_dispatch`` then."""

    time: float
    """Earliest ``not_before`` among waiting jobs."""


@dataclass(frozen=True, slots=True)
class EmitJobFailed:
    """Emit the transient ``extension_agent.job_failed`` runtime event for session ``session_id``."""

    session_id: str
    """Session the event belongs to (the job payload's ``session_id``)."""
    event: JobFailedEvent
    """Sanitized event payload."""
    db_path: str = ""
    """Database of that session (the job payload's ``db_path``)."""


@dataclass(frozen=True, slots=True)
class EmitJobHeld:
    """Emit the ``extension_agent.memory_held`` runtime event for session ``session_id``: its database's
    model jobs are held from now on (once per hold, not per renewal)."""

    session_id: str
    """Session of the run that found the budget used up."""
    event: JobHeldEvent
    """Sanitized event payload."""
    db_path: str = ""
    """Its database."""


@dataclass(frozen=True, slots=True)
class AlreadyQueued(JobCommand):
    """The job id is already pending or running as ``existing_seq``; it is not queued twice.

    ``job_seq`` is the sequence number the duplicate was stored under (the surplus row, unless equal).
    """

    existing_seq: int
    """Sequence number of the job already in the queue; report this one to the caller."""


@dataclass(frozen=True, slots=True)
class OutcomeIgnored:
    """A result for a job (or attempt) that is not in flight, e.g. a late duplicate; nothing changed."""

    job_seq: int
    """Sequence number the result named."""
    why: Literal["not_in_flight", "job_id_mismatch", "attempt_mismatch"]
    """Why it was ignored."""


Command = (
    Dispatch
    | WakeAt
    | MarkSucceeded
    | ScheduleRetry
    | HoldJob
    | GiveUp
    | EmitJobFailed
    | EmitJobHeld
    | AlreadyQueued
    | OutcomeIgnored
)
"""Anything a step can ask the actor to do (or, for notices, to log)."""

NOTICES: Final = (AlreadyQueued, OutcomeIgnored, WakeAt)
"""The commands that write nothing and do nothing after a commit (the actor may log them)."""


def needs_commit(command: Command) -> bool:
    """False for the notices that write nothing and do nothing after a commit."""
    return not isinstance(command, NOTICES)
