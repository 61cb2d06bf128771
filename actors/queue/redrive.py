"""When given-up jobs are queued again (pure; issue 40 item 1).

A job that used up its attempts during a model outage (a closed port, an unknown model, a missing
key) is recorded as failed. Its session may have ended, so no later turn will carry its events:
without a re-drive they would never be observed. The queue re-drives the failed jobs of a database
and a *stage* (the model stages, observe and reflect, share one cause; indexing has its own) once
the cause is shown to be gone: a later job of the same database and stage succeeds. ``omray retry``
re-drives everything on request.

A re-drive queues a copy of the failed job under a new sequence number (at the end of its lane, so
lane order and every invariant of :class:`actors.queue.state.QueueState` hold) and records on the
failed row which job it became, in the same commit: a row is re-driven once. Observe jobs start from
the session's coverage, so a re-driven job whose events a later job already covered observes nothing
twice. Automatic re-drives of one job's work stop after :data:`AUTOMATIC_REDRIVES` (a job that fails
for a cause of its own does not loop); ``omray retry`` has no such limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from protocol.jobs import OBSERVE_BOUNDARY_HANDLER, REFLECT_GENERATION_HANDLER, SEMANTIC_INDEX_HANDLER
from protocol.outcomes import REASON_CONFLICT, REASON_INVALID_INPUT, REASON_INVALID_PAYLOAD

AUTOMATIC_REDRIVES: Final[int] = 3
"""Times the work of one job is re-driven automatically (each with a full attempt budget)."""

NOT_REDRIVEN: Final[frozenset[str]] = frozenset(
    {REASON_INVALID_PAYLOAD, REASON_INVALID_INPUT, REASON_CONFLICT}
)
"""Failure categories no fix of settings or endpoint can remove: never re-driven automatically."""

_STAGES: Final[dict[str, str]] = {
    OBSERVE_BOUNDARY_HANDLER: "model",
    REFLECT_GENERATION_HANDLER: "model",
    SEMANTIC_INDEX_HANDLER: "index",
}


def stage_of(handler_id: str) -> str:
    """The stage a handler's jobs share a cause of failure with (``model``, ``index``, or itself)."""
    return _STAGES.get(handler_id, handler_id)


def handlers_of(stage: str) -> tuple[str, ...]:
    """Handler ids of ``stage``."""
    found = tuple(handler for handler, its in _STAGES.items() if its == stage)
    return found or (stage,)


@dataclass
class RedriveTracker:
    """Which ``(database, stage)`` pairs have failed jobs waiting for their cause to go.

    Only the owning ``QueueActor`` calls it, under its lock.
    """

    waiting: set[tuple[str, str]] = field(default_factory=set)

    def gave_up(self, db_path: str, handler_id: str, reason: str) -> None:
        """A job of ``db_path`` gave up for ``reason``."""
        if reason not in NOT_REDRIVEN:
            self.waiting.add((db_path, stage_of(handler_id)))

    def succeeded(self, db_path: str, handler_id: str) -> tuple[str, ...] | None:
        """A job of ``db_path`` succeeded: the handler ids to re-drive there now (the stage's), or
        ``None`` when nothing of that stage waits. The pair is cleared: one re-drive per proof."""
        stage = stage_of(handler_id)
        if (db_path, stage) not in self.waiting:
            return None
        self.waiting.discard((db_path, stage))
        return handlers_of(stage)
