"""Attempts in flight, and what a worker's answer counts as (the job-id mismatch policy).

:class:`InFlight` remembers each attempt the queue sent (not thread-safe: the QueueActor holds its
lock). :func:`read_outcome` decides what a worker's answer means for the run it belongs to: a valid
outcome of that run's job is applied; anything else (a malformed answer, a dead worker, an answer
naming another job) is a lost attempt, retried by policy, so it never holds the run's lane and slot.
:func:`apply_answer` feeds that to the state machine and says what the queue reports about it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from actors.queue.commands import Command, Dispatch
from actors.queue.state import QueueState
from protocol.outcomes import JOB_OUTCOME_ADAPTER, JobOutcome, JobSucceeded

logger = logging.getLogger("omray.queue")


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt sent to a worker."""

    job_id: str
    """The run's (carrier) job id."""
    attempt: int
    """Which attempt of that job it is."""
    handler_id: str
    """The pool it went to."""
    started: float
    """When it was sent (epoch seconds)."""


def read_outcome(job_seq: int, raw: Mapping[str, Any] | None, sent: Attempt | None) -> JobOutcome | None:
    """The outcome to apply to run ``job_seq``, or ``None`` when the attempt counts as lost.

    ``raw`` is what the worker answered (``None``: it died mid-job); ``sent`` the attempt the queue
    remembers sending (``None`` when it has none: the outcome is then checked by the state machine).
    Logs ids only, never the answer.
    """
    if raw is None:
        return None
    try:
        parsed = JOB_OUTCOME_ADAPTER.validate_python(raw)
    except ValidationError:
        logger.error("malformed worker outcome", extra={"job_seq": job_seq})
        return None
    if sent is not None and parsed.job_id != sent.job_id:
        # An answer about another job says nothing about this run: a lost attempt, retried,
        # rather than an ignored one that would hold the run's lane and slot for good.
        logger.error("worker outcome names another job", extra={"job_seq": job_seq})
        return None
    return parsed


@dataclass(frozen=True, slots=True)
class Answered:
    """What one worker answer did to the state machine, and what the queue reports about it."""

    commands: list[Command]
    """The state machine's commands for it."""
    kind: str
    """The outcome's kind (``succeeded``, ``failed``), or ``worker_lost`` for a lost attempt."""
    usage: Mapping[str, Any] | None
    """The detail of a success of an attempt the queue sent (its model usage), else ``None``."""


def apply_answer(
    state: QueueState, job_seq: int, raw: Mapping[str, Any] | None, sent: Attempt | None, now: float
) -> Answered:
    """Apply a worker's answer ``raw`` for run ``job_seq`` (``sent``: the attempt remembered for it).

    An answer that :func:`read_outcome` counts as lost is a lost worker for the state machine;
    otherwise the outcome is applied to the attempt that was sent (any attempt, when none is
    remembered: a restarted queue).
    """
    parsed = read_outcome(job_seq, raw, sent)
    attempt = sent.attempt if sent else None
    if parsed is None:
        return Answered(state.on_worker_lost(job_seq, now, attempt=attempt), "worker_lost", None)
    commands = state.on_outcome(job_seq, parsed, now, attempt=attempt)
    usage = parsed.detail if isinstance(parsed, JobSucceeded) and sent is not None else None
    return Answered(commands, parsed.kind, usage)


class InFlight:
    """The attempts sent and not answered yet, by the run's ``job_seq``."""

    def __init__(self) -> None:
        self._attempts: dict[int, Attempt] = {}

    def sent(self, commands: Sequence[Dispatch], now: float) -> int:
        """Record starts before they go out (an outcome may arrive at once); jobs they coalesced."""
        coalesced = 0
        for command in commands:
            self._attempts[command.job_seq] = Attempt(
                command.job_id, command.attempt, command.handler_id, now
            )
            coalesced += len(command.covered) - 1
        return coalesced

    def answered(self, job_seq: int) -> Attempt | None:
        """Forget the attempt of run ``job_seq`` (answered or never sent); what was remembered."""
        return self._attempts.pop(job_seq, None)

    def snapshot(self, now: float) -> list[dict[str, Any]]:
        """Ids, attempt numbers, pools and running times (what ``status()`` lists)."""
        return [
            {
                "job_seq": seq,
                "job_id": sent.job_id,
                "attempt": sent.attempt,
                "handler_id": sent.handler_id,
                "running_s": round(now - sent.started, 3),
            }
            for seq, sent in self._attempts.items()
        ]
