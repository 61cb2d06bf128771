"""Cooperative cancellation and deadlines of one tool call (reference §13).

A host that runs ``memory_search`` or ``recall`` under a cancellation token or a time budget
passes a :class:`ToolInterrupt`; the read service checks it between steps (never inside one SQL
statement) and answers ``{"cancelled": True, "message": ...}`` or
``{"timed_out": True, "timeout_seconds": ..., "message": ...}`` instead of a result. Without one,
nothing is checked and nothing changes. The clock is an argument, so tests need no wall clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

ToolResult = dict[str, object]
"""A JSON-able tool answer."""

Clock = Callable[[], float]
"""Monotonic seconds (``time.monotonic``)."""


class CancelToken:
    """A thread-safe flag the host sets to stop a running tool call at its next checkpoint."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        """Ask the tool call to stop."""
        self._event.set()

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` was called."""
        return self._event.is_set()


@dataclass(frozen=True)
class ToolInterrupt:
    """The cancellation token and deadline of one tool call; build it with :meth:`start`."""

    token: CancelToken | None = None
    """Cancellation token, or ``None`` when the host cannot cancel."""
    timeout_seconds: float | None = None
    """The time budget as given (reported in the timed-out answer); ``None`` for no deadline."""
    deadline: float | None = None
    """``clock()`` value past which the call has timed out, or ``None``."""
    clock: Clock = field(default=time.monotonic)
    """Where the time comes from."""

    @classmethod
    def start(
        cls,
        token: CancelToken | None = None,
        timeout_seconds: float | None = None,
        clock: Clock = time.monotonic,
    ) -> ToolInterrupt:
        """An interrupt whose deadline is ``timeout_seconds`` from now; ``None`` or ``<= 0`` means none."""
        if timeout_seconds is None or not timeout_seconds > 0:
            return cls(token=token, clock=clock)
        return cls(
            token=token, timeout_seconds=timeout_seconds, deadline=clock() + timeout_seconds, clock=clock
        )

    def check(self, checkpoint: str) -> ToolResult | None:
        """The interrupt answer at ``checkpoint`` (e.g. ``"before recall started"``), or ``None`` to go on."""
        if self.token is not None and self.token.cancelled:
            return {"cancelled": True, "message": f"Cancelled {checkpoint}."}
        if self.deadline is not None and self.clock() >= self.deadline:
            return {
                "timed_out": True,
                "timeout_seconds": self.timeout_seconds,
                "message": f"Timed out {checkpoint}.",
            }
        return None


NO_INTERRUPT = ToolInterrupt()
"""Never cancelled, no deadline: the default of every tool call."""


class Interrupted(Exception):
    """Raised at a checkpoint to unwind a tool call; carries the answer to return."""

    def __init__(self, answer: ToolResult) -> None:
        super().__init__(answer.get("message"))
        self.answer = answer


def checkpoint(interrupt: ToolInterrupt, where: str) -> None:
    """Raise :class:`Interrupted` when ``interrupt`` says stop at ``where``."""
    answer = interrupt.check(where)
    if answer is not None:
        raise Interrupted(answer)
