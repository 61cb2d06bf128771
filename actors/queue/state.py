"""The durable job queue as a pure state machine (DESIGN.md "QueueActor", invariants 2 and 3).

``QueueState`` holds the in-memory view of the ``extension_agent`` FIFO. Its step methods take the
current time as an argument and return *commands*: frozen values that the ``QueueActor`` executes
(write the store, call a worker, emit an event, arm a timer). The state machine does no I/O, so its
whole behaviour is tested by asserting on commands, and after a crash the actor rebuilds it from
the durable rows with :meth:`QueueState.restore`.

How the actor drives it:

1. ``Store.enqueue_job`` durably stores the envelope and yields its sequence number; only then
   ``accept(envelope, job_seq, now)``. (Ask :meth:`QueueState.active_seq` first to avoid storing a
   duplicate row at all.)
2. After every step, ``next_dispatch(now)``; execute each command in order.
3. A worker's :data:`JobOutcome` goes to ``on_outcome(job_seq, outcome, now, attempt=...)``; a dead
   worker to ``on_worker_lost(job_seq, now, attempt=...)``.

Store effect of each command (the actor persists *before* acting on it):

- :class:`Dispatch`: row -> ``running`` with ``attempts = attempt``; then call the handler.
- :class:`ScheduleRetry`: row -> ``pending`` with ``not_before``.
- :class:`MarkSucceeded`, :class:`GiveUp`: the row leaves the active queue (succeeded / failed).
- :class:`AlreadyQueued`: if ``job_seq != existing_seq``, delete the surplus row ``job_seq``.
- :class:`EmitJobFailed`, :class:`WakeAt`, :class:`OutcomeIgnored`: no store write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from actors.queue.retry import GiveUpNow, RetryPolicy, decide_retry
from protocol.errors import OmrayError
from protocol.jobs import JobEnvelope, JobPayload
from protocol.outcomes import (
    REASON_INTERRUPTED,
    REASON_RETRY_EXHAUSTED,
    REASON_WORKER_CRASHED,
    JobFailed,
    JobFailedEvent,
    JobSucceeded,
)

JobStatus = Literal["pending", "running"]
"""Durable status of a job that is still in the queue."""


class QueueStateError(OmrayError):
    """The actor called the state machine against its contract (e.g. two jobs with one sequence number)."""


# --- commands -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Run attempt ``attempt`` of the job on the worker registered for ``handler_id``."""

    job_seq: int
    """Queue sequence number of the job."""
    job_id: str
    """Id of the job."""
    handler_id: str
    """Stable handler id that picks the worker actor."""
    attempt: int
    """1-based attempt number; pass it back with the outcome."""
    payload: JobPayload
    """What to do."""


@dataclass(frozen=True, slots=True)
class WakeAt:
    """Nothing is eligible now, but a retry becomes eligible at ``time``: call ``next_dispatch`` then."""

    time: float
    """Earliest ``not_before`` among waiting jobs."""


@dataclass(frozen=True, slots=True)
class MarkSucceeded:
    """The job finished; it leaves the durable queue."""

    job_seq: int
    """Queue sequence number of the job."""
    job_id: str
    """Id of the job."""
    attempts: int
    """Attempts it took."""


@dataclass(frozen=True, slots=True)
class ScheduleRetry:
    """The attempt failed; the job waits in the queue until ``not_before``."""

    job_seq: int
    """Queue sequence number of the job."""
    job_id: str
    """Id of the job."""
    attempts: int
    """Attempts made so far."""
    not_before: float
    """Earliest time of the next attempt."""
    reason: str
    """Category code of the failure."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """The queue stops trying; the job leaves the durable queue as failed."""

    job_seq: int
    """Queue sequence number of the job."""
    job_id: str
    """Id of the job."""
    attempts: int
    """Attempts made in total."""
    reason: str
    """Category code of the last failure."""


@dataclass(frozen=True, slots=True)
class EmitJobFailed:
    """Emit the transient ``extension_agent.job_failed`` runtime event for session ``run_id``."""

    run_id: str
    """Session the event belongs to (the job payload's ``run_id``)."""
    event: JobFailedEvent
    """Sanitized event payload."""


@dataclass(frozen=True, slots=True)
class AlreadyQueued:
    """The job id is already pending or running as ``existing_seq``; it is not queued twice."""

    job_id: str
    """Id of the job."""
    job_seq: int
    """Sequence number the duplicate was stored under (the surplus row, unless equal)."""
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
    | GiveUp
    | EmitJobFailed
    | AlreadyQueued
    | OutcomeIgnored
)
"""Anything a step can ask the actor to do (or, for notices, to log)."""


# --- durable rows -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredJobState:
    """One durable row of a job still in the queue, as the actor reads it back on restart."""

    job_seq: int
    """Queue sequence number."""
    envelope: JobEnvelope
    """The job as accepted."""
    status: JobStatus
    """``pending`` (waiting, maybe for a retry) or ``running`` (an attempt had started)."""
    attempts: int = 0
    """Attempts started so far (a ``running`` row counts the one in progress)."""
    not_before: float | None = None
    """Earliest time of the next attempt, for a job waiting on a retry."""
    last_reason: str | None = None
    """Category code of the last failure, if any."""


@dataclass(slots=True)
class _Job:
    seq: int
    envelope: JobEnvelope
    status: JobStatus
    attempts: int
    not_before: float | None
    last_reason: str | None
    # Restored from a 'running' row: goes before everything else, ignoring not_before.
    interrupted: bool = False


# --- the state machine --------------------------------------------------------------------------


class QueueState:
    """In-memory state of the durable FIFO; every step returns the commands the actor must execute.

    Guarantees:

    - **Start order.** Jobs start (first attempt) in the order of their queue sequence numbers,
      never in the order Ray happens to deliver calls.
    - **Retries do not block the line.** A job waiting for its retry backoff does not hold back
      the jobs behind it: the original host re-queues a failing message with a delay and the
      transport keeps serving the others meanwhile; holding the whole queue for one broken job
      would stall every session. Once its ``not_before`` has passed the job competes by its
      original sequence number, so it goes before anything accepted after it. Handlers are
      idempotent and resume from durable coverage, so a later job overtaking a retry is safe.
    - **At most ``max_in_flight`` attempts at once** (default 1, the original's serial worker).
    - **At-least-once, finished once.** A job leaves the queue only with :class:`MarkSucceeded` or
      :class:`GiveUp`; results for anything not in flight are ignored, so a finished job is never
      dispatched or finished again.
    - **At most ``policy.max_attempts`` attempts per job**, counting attempts lost to a worker
      crash or to a restart of the queue itself.
    - A job id is never queued twice while it is pending or running.

    Only the owning ``QueueActor`` calls it, from one thread.
    """

    def __init__(self, policy: RetryPolicy | None = None, *, max_in_flight: int = 1) -> None:
        if max_in_flight < 1:
            raise QueueStateError(f"max_in_flight must be >= 1, got {max_in_flight!r}")
        self._policy = policy if policy is not None else RetryPolicy()
        self._max_in_flight = max_in_flight
        self._jobs: dict[int, _Job] = {}
        self._seq_by_job_id: dict[str, int] = {}

    # --- restart -----------------------------------------------------------------------------

    @classmethod
    def restore(
        cls,
        stored_jobs: Sequence[StoredJobState],
        now: float,
        policy: RetryPolicy | None = None,
        *,
        max_in_flight: int = 1,
    ) -> tuple[QueueState, list[Command]]:
        """Rebuild the state from the durable rows after the actor restarted.

        A ``running`` row was interrupted: that attempt counts, and the job is dispatched again
        before anything else (in sequence order), without backoff; if it has no attempts left it
        gives up now. If two rows share a job id (a crash between storing a duplicate and
        discarding it), the lowest sequence number wins and the others come back as
        :class:`AlreadyQueued` so the actor deletes them.
        """
        state = cls(policy, max_in_flight=max_in_flight)
        commands: list[Command] = []
        for row in sorted(stored_jobs, key=lambda r: r.job_seq):
            if row.job_seq in state._jobs:
                raise QueueStateError(f"two stored rows with job_seq {row.job_seq!r}")
            existing = state._seq_by_job_id.get(row.envelope.job_id)
            if existing is not None:
                commands.append(AlreadyQueued(row.envelope.job_id, row.job_seq, existing))
                continue
            interrupted = row.status == "running"
            job = _Job(
                seq=row.job_seq,
                envelope=row.envelope,
                status="pending",
                attempts=row.attempts,
                not_before=None if interrupted else row.not_before,
                last_reason=REASON_INTERRUPTED if interrupted else row.last_reason,
                interrupted=interrupted,
            )
            if job.attempts >= state._policy.max_attempts:
                # Every allowed attempt has started already: never start another one.
                commands.extend(state._give_up(job, GiveUpNow(event_reason=REASON_RETRY_EXHAUSTED)))
                continue
            state._jobs[job.seq] = job
            state._seq_by_job_id[row.envelope.job_id] = job.seq
        return state, commands

    # --- steps -------------------------------------------------------------------------------

    def accept(self, envelope: JobEnvelope, job_seq: int, now: float) -> list[Command]:
        """Queue a job that was just stored durably under ``job_seq``.

        Returns ``[]`` for a new job, or ``[AlreadyQueued]`` if the job id is already pending or
        running (then nothing changes). ``now`` is unused today; it keeps every step's signature
        uniform for the actor and the tests.
        """
        del now
        existing = self._seq_by_job_id.get(envelope.job_id)
        if existing is not None:
            return [AlreadyQueued(envelope.job_id, job_seq, existing)]
        if job_seq in self._jobs:
            raise QueueStateError(f"job_seq {job_seq!r} is already used by another queued job")
        self._jobs[job_seq] = _Job(job_seq, envelope, "pending", 0, None, None)
        self._seq_by_job_id[envelope.job_id] = job_seq
        return []

    def next_dispatch(self, now: float) -> list[Command]:
        """Start as many eligible jobs as free slots allow; or say when the next retry is due.

        Order: interrupted jobs from a restart first, then the lowest sequence number whose
        ``not_before`` has passed. Adds :class:`WakeAt` when a slot stays free only because every
        waiting job is still in its backoff.
        """
        commands: list[Command] = []
        free = self._max_in_flight - self.in_flight
        while free > 0:
            job = self._next_eligible(now)
            if job is None:
                break
            job.status = "running"
            job.attempts += 1
            job.not_before = None
            job.interrupted = False
            commands.append(
                Dispatch(
                    job.seq, job.envelope.job_id, job.envelope.handler_id, job.attempts, job.envelope.payload
                )
            )
            free -= 1
        if free > 0:
            waits = [
                j.not_before
                for j in self._jobs.values()
                if j.status == "pending" and j.not_before is not None and j.not_before > now
            ]
            if waits:
                commands.append(WakeAt(min(waits)))
        return commands

    def on_outcome(
        self,
        job_seq: int,
        outcome: JobSucceeded | JobFailed,
        now: float,
        *,
        attempt: int | None = None,
    ) -> list[Command]:
        """Apply a worker's result for the attempt in flight.

        Pass the ``attempt`` from the :class:`Dispatch`: without it, a late result of an older
        attempt of the same job cannot be told apart from the current one.
        """
        job = self._in_flight_job(job_seq, attempt)
        if isinstance(job, OutcomeIgnored):
            return [job]
        if outcome.job_id != job.envelope.job_id:
            return [OutcomeIgnored(job_seq, "job_id_mismatch")]
        if isinstance(outcome, JobSucceeded):
            self._remove(job)
            return [MarkSucceeded(job.seq, job.envelope.job_id, job.attempts)]
        return self._fail(job, outcome, now)

    def on_worker_lost(self, job_seq: int, now: float, *, attempt: int | None = None) -> list[Command]:
        """The worker died mid-job: one failed, retryable attempt (``worker_crashed``)."""
        job = self._in_flight_job(job_seq, attempt)
        if isinstance(job, OutcomeIgnored):
            return [job]
        failure = JobFailed(job_id=job.envelope.job_id, retryable=True, reason=REASON_WORKER_CRASHED)
        return self._fail(job, failure, now)

    # --- queries -----------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        """Jobs waiting to run (including those waiting for a retry); not counting in-flight ones."""
        return sum(1 for j in self._jobs.values() if j.status == "pending")

    @property
    def in_flight(self) -> int:
        """Attempts currently running."""
        return sum(1 for j in self._jobs.values() if j.status == "running")

    @property
    def max_in_flight(self) -> int:
        """Most attempts allowed to run at once."""
        return self._max_in_flight

    def active_seq(self, job_id: str) -> int | None:
        """Sequence number of the pending or running job with this id, if any."""
        return self._seq_by_job_id.get(job_id)

    def snapshot(self) -> dict[str, object]:
        """JSON-able view for ``omray status``: counts and per-job ids, never payload contents."""
        return {
            "depth": self.depth,
            "in_flight": self.in_flight,
            "max_in_flight": self._max_in_flight,
            "max_attempts": self._policy.max_attempts,
            "jobs": [
                {
                    "job_seq": j.seq,
                    "job_id": j.envelope.job_id,
                    "handler_id": j.envelope.handler_id,
                    "status": j.status,
                    "attempts": j.attempts,
                    "not_before": j.not_before,
                    "last_reason": j.last_reason,
                }
                for j in sorted(self._jobs.values(), key=lambda j: j.seq)
            ],
        }

    # --- internals ---------------------------------------------------------------------------

    def _next_eligible(self, now: float) -> _Job | None:
        best: _Job | None = None
        for job in self._jobs.values():
            if job.status != "pending":
                continue
            if not job.interrupted and job.not_before is not None and job.not_before > now:
                continue
            if best is None or (not job.interrupted, job.seq) < (not best.interrupted, best.seq):
                best = job
        return best

    def _in_flight_job(self, job_seq: int, attempt: int | None) -> _Job | OutcomeIgnored:
        job = self._jobs.get(job_seq)
        if job is None or job.status != "running":
            return OutcomeIgnored(job_seq, "not_in_flight")
        if attempt is not None and attempt != job.attempts:
            return OutcomeIgnored(job_seq, "attempt_mismatch")
        return job

    def _fail(self, job: _Job, failure: JobFailed, now: float) -> list[Command]:
        decision = decide_retry(job.attempts, failure, self._policy)
        job.last_reason = failure.reason
        if isinstance(decision, GiveUpNow):
            self._remove(job)
            return self._give_up(job, decision)
        job.status = "pending"
        job.not_before = now + decision.delay_s
        return [ScheduleRetry(job.seq, job.envelope.job_id, job.attempts, job.not_before, failure.reason)]

    def _give_up(self, job: _Job, decision: GiveUpNow) -> list[Command]:
        last = job.last_reason or decision.event_reason
        event = JobFailedEvent.for_job(
            job_id=job.envelope.job_id,
            handler_id=job.envelope.handler_id,
            attempts=max(job.attempts, 1),
            event_reason=decision.event_reason,
            last_failure=last,
        )
        return [
            GiveUp(job.seq, job.envelope.job_id, job.attempts, last),
            EmitJobFailed(job.envelope.payload.run_id, event),
        ]

    def _remove(self, job: _Job) -> None:
        del self._jobs[job.seq]
        del self._seq_by_job_id[job.envelope.job_id]
