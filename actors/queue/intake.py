"""What ``dispatch`` and ``dispatch_many`` accept: job envelopes, checked before anything is queued.

Bad input gets :class:`~protocol.errors.InvalidPayloadError` naming only the exception class (never
the payload) and queues nothing: one bad envelope in a ``dispatch_many`` rejects the whole call.
:func:`accept_jobs` then queues the valid ones, each job key once, and says which commit the
caller waits for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from actors.queue.commits import CommitLog
from actors.queue.state import QueueState
from protocol.errors import InvalidPayloadError
from protocol.jobs import JobEnvelope

MAX_DISPATCH_BATCH: Final = 256
"""Most jobs one ``dispatch_many`` call may carry (a client sends what its hooks have waiting)."""


def parse_envelope(envelope: JobEnvelope | Mapping[str, Any]) -> JobEnvelope:
    """One job envelope, validated."""
    try:
        return envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
    except Exception as exc:
        raise InvalidPayloadError(f"invalid job envelope ({type(exc).__name__})") from None


def parse_envelopes(envelopes: Sequence[JobEnvelope | Mapping[str, Any]]) -> list[JobEnvelope]:
    """A list of at most :data:`MAX_DISPATCH_BATCH` envelopes, all valid, in order; else an error."""
    if isinstance(envelopes, str | bytes | Mapping) or not isinstance(envelopes, Sequence):
        raise InvalidPayloadError(
            f"dispatch_many takes a list of job envelopes, not {type(envelopes).__name__}"
        )
    if len(envelopes) > MAX_DISPATCH_BATCH:
        raise InvalidPayloadError(
            f"at most {MAX_DISPATCH_BATCH} jobs per dispatch_many, got {len(envelopes)}"
        )
    jobs: list[JobEnvelope] = []
    for index, envelope in enumerate(envelopes):
        try:
            jobs.append(
                envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
            )
        except Exception as exc:
            raise InvalidPayloadError(
                f"invalid job envelope at index {index} ({type(exc).__name__}); no job accepted"
            ) from None
    return jobs


def accept_jobs(
    state: QueueState, log: CommitLog, jobs: Sequence[JobEnvelope], next_seq: int, now: float
) -> tuple[int | None, int]:
    """Queue ``jobs`` and the starts they allow; the generation the caller waits for, and the next
    free sequence number.

    A new job key is numbered from ``next_seq``, accepted by the state machine and its row queued
    for the next commit. A key already pending or running is not queued twice: the caller waits for
    the commit carrying its earlier accept when that is not durable yet, and for nothing otherwise
    (generation ``None``: every job is queued and durable already). The starts that are now possible
    (of these jobs' lanes or others) ride in the same commit as the accepts.
    """
    wait: int | None = None
    for job in jobs:
        existing = state.active_seq(job.job_id, job.payload.db_path)
        if existing is not None:
            pending = log.accept_pending(existing)
            if pending is not None:
                wait = max(wait or 0, pending)
            continue
        job_seq, next_seq = next_seq, next_seq + 1
        state.accept(job, job_seq, now)  # a new key: no notice to act on
        wait = log.accept(job_seq, job, now)
    log.add(state.next_dispatch(now), now)
    return wait, next_seq
