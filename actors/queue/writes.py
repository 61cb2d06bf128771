"""What one group commit writes: the queue's commands turned into durable rows (pure).

The QueueActor collects, in order, the jobs its callers handed it (:class:`Accept`) and the commands
its state machine returned; each with the time it was issued. :func:`writes_for` turns such a batch
into the :data:`~protocol.queue_rows.JobWrite` list of ONE transaction. It does no I/O and reads no
clock, so the same batch always gives the same writes (a batch whose commit failed is written again
byte for byte).

The one rule beyond a direct translation: a :class:`GiveUp` followed by the :class:`EmitJobFailed`
of the same job becomes ONE :class:`~protocol.queue_rows.JobGivenUp` write, so no crash falls
between a job leaving the queue and its ``job_failed`` event being recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from actors.queue.commands import (
    Command,
    Dispatch,
    EmitJobFailed,
    EmitJobHeld,
    GiveUp,
    HoldJob,
    MarkSucceeded,
    ScheduleRetry,
)
from protocol.jobs import JobEnvelope
from protocol.outcomes import JobFailedEvent
from protocol.queue_rows import (
    JobAccepted,
    JobFinished,
    JobGivenUp,
    JobHeldWrite,
    JobRetry,
    JobStarted,
    JobWrite,
    RuntimeEventWrite,
    iso_utc,
)


@dataclass(frozen=True, slots=True)
class Accept:
    """A job the state machine has taken whose row is not durable yet (its ``dispatch`` waits)."""

    job_seq: int
    """Queue sequence number the actor gave the job."""
    envelope: JobEnvelope
    """The job as accepted."""
    redrive_of: int | None = None
    """The failed job this one re-drives (:mod:`actors.queue.redrive`), if any."""
    redrives: int = 0
    """How many times this job's work was re-driven."""


Pending = Command | Accept
"""Something queued for a commit: a job to store, or a command to record and carry out."""

Issued = tuple[Pending, float]
"""A pending item with the time it was issued (epoch seconds): the time its row records."""


def writes_for(batch: Sequence[Issued]) -> list[JobWrite]:
    """The writes of one commit carrying ``batch``, in batch order."""
    writes: list[JobWrite] = []
    for index, (command, now) in enumerate(batch):
        at = iso_utc(now)
        if isinstance(command, Accept):
            writes.append(
                JobAccepted(
                    job_seq=command.job_seq,
                    envelope=command.envelope,
                    accepted_at=at,
                    redrive_of=command.redrive_of,
                    redrives=command.redrives,
                )
            )
        elif isinstance(command, Dispatch):
            # Durable first: if the queue dies after this write, the restart re-dispatches the run.
            writes.extend(JobStarted(job_seq=seq, attempt=n, started_at=at) for seq, n in command.covered)
        elif isinstance(command, ScheduleRetry):
            writes.append(
                JobRetry(
                    job_seq=command.job_seq,
                    not_before=iso_utc(command.not_before),
                    failure_reason=command.reason,
                )
            )
        elif isinstance(command, HoldJob):
            writes.append(
                JobHeldWrite(
                    job_seq=command.job_seq,
                    held_attempts=command.held,
                    not_before=iso_utc(command.not_before),
                    failure_reason=command.reason,
                )
            )
        elif isinstance(command, EmitJobHeld) or (
            isinstance(command, EmitJobFailed) and not is_paired(batch, index)
        ):
            writes.append(
                RuntimeEventWrite(
                    session_id=command.session_id,
                    event_type=command.event.event_type,
                    payload=command.event.model_dump(),
                    created_at=at,
                    db_path=command.db_path,
                )
            )
        elif isinstance(command, MarkSucceeded):
            writes.append(JobFinished(job_seq=command.job_seq, state="succeeded", finished_at=at))
        elif isinstance(command, GiveUp):
            writes.append(_give_up_write(command, paired_event(batch, index), at))
    return writes


def _give_up_write(command: GiveUp, emit: EmitJobFailed | None, at: str) -> JobWrite:
    if emit is None:
        return JobFinished(
            job_seq=command.job_seq, state="failed", finished_at=at, failure_reason=command.reason
        )
    # Giving up and its failure event are one write: no crash in between.
    return JobGivenUp(
        job_seq=command.job_seq,
        finished_at=at,
        failure_reason=command.reason,
        session_id=emit.session_id,
        event_type=JobFailedEvent.event_type,
        event_payload=emit.event.model_dump(),
        db_path=emit.db_path,
    )


def paired_event(batch: Sequence[Issued], index: int) -> EmitJobFailed | None:
    """The ``job_failed`` event right after the give-up at ``index``, when it is that job's."""
    command = batch[index][0]
    following = batch[index + 1][0] if index + 1 < len(batch) else None
    if (
        isinstance(command, GiveUp)
        and isinstance(following, EmitJobFailed)
        and following.event.job_id == command.job_id
    ):
        return following
    return None


def is_paired(batch: Sequence[Issued], index: int) -> bool:
    """True when the item at ``index`` is a ``job_failed`` event written with the give-up before it."""
    return index > 0 and paired_event(batch, index - 1) is not None


def only_finishes(batch: Sequence[Issued]) -> bool:
    """True when a non-empty batch only records successes: no caller and no start waits on it."""
    return bool(batch) and all(isinstance(item, MarkSucceeded) for item, _ in batch)


def wakes_callers_and_starts(batch: Sequence[Issued]) -> bool:
    """True when a batch makes some caller's job durable and also starts a run."""
    kinds = {type(item) for item, _ in batch}
    return Accept in kinds and Dispatch in kinds
