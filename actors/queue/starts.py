"""Sending the starts of a durable commit to the worker pools, and remembering what is in flight.

:class:`Starter` records each attempt as in flight *before* it is sent (an outcome may arrive at
once), then sends a commit's starts: together through the pool's ``start_many`` when it has one and
there are several, else one by one. A start that cannot be sent (its envelope does not build, the
pool refuses it or raises) is handed to ``lost``: the queue counts it as a lost attempt, retried by
policy, never as a job left "running" with nobody to report on it. It never raises, so no start of
a batch is skipped because another failed. Which starts go out, and in which order, is the state
machine's decision; this module only sends them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from actors.queue.attempts import InFlight
from actors.queue.commands import Dispatch
from actors.queue.ports import WorkerPoolPort
from protocol.jobs import JobEnvelope

Send = tuple[str, int, dict[str, Any], int]
"""One start as a pool's ``start_many`` takes it: ``handler_id, job_seq, envelope, attempt``."""


def envelope_of(command: Dispatch) -> dict[str, Any]:
    """What a worker receives for one start."""
    return JobEnvelope(job_id=command.job_id, payload=command.payload).model_dump()


def sends_for(starts: Sequence[Dispatch]) -> tuple[list[Send], list[Dispatch]]:
    """The sends of ``starts`` in order, and the starts whose envelope could not be built."""
    sends: list[Send] = []
    unbuilt: list[Dispatch] = []
    for command in starts:
        try:
            sends.append((command.handler_id, command.job_seq, envelope_of(command), command.attempt))
        except Exception:
            unbuilt.append(command)
    return sends, unbuilt


class Starter:
    """Sends starts to the worker pool and keeps the attempts in flight.

    ``lock`` is the queue's lock: :attr:`in_flight` and :attr:`coalesced` are read and changed under
    it only. ``lost(command, error_class)`` is called, without the lock, for each start not sent.
    """

    def __init__(
        self,
        workers: WorkerPoolPort,
        lock: threading.Lock,
        clock: Callable[[], float],
        lost: Callable[[Dispatch, str], None],
    ) -> None:
        self._workers = workers
        self._lock = lock
        self._clock = clock
        self._lost = lost
        self.in_flight = InFlight()
        """Attempts sent and not answered yet."""
        self.coalesced = 0
        """Jobs that rode in another job's run since the queue started."""

    def send(self, starts: Sequence[Dispatch]) -> None:
        """Send the starts of one durable commit (a commit's starts go out together)."""
        start_many = getattr(self._workers, "start_many", None)
        if start_many is None or len(starts) < 2:
            for command in starts:
                self._send_one(command)
            return
        self._mark_in_flight(starts)
        sends, failed = sends_for(starts)
        try:
            unsent = set(start_many(sends))
        except Exception:
            unsent = {job_seq for _, job_seq, _, _ in sends}
        failed.extend(command for command in starts if command.job_seq in unsent)
        for command in failed:
            self._lost(command, "StartFailed")

    def _send_one(self, command: Dispatch) -> None:
        self._mark_in_flight([command])
        try:
            self._workers.start(command.handler_id, command.job_seq, envelope_of(command), command.attempt)
        except Exception as exc:
            self._lost(command, type(exc).__name__)

    def _mark_in_flight(self, commands: Sequence[Dispatch]) -> None:
        with self._lock:
            self.coalesced += self.in_flight.sent(commands, self._clock())
