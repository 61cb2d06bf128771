"""When given-up jobs are queued again (pure; issue 40 item 1).

A job that used up its attempts during a model outage (a closed port, an unknown model, a missing
key) is recorded as failed. Its session may have ended, so no later turn will carry its events:
without a re-drive they would never be observed. The queue re-drives the failed jobs of a database
and a *stage* (the model stages, observe and reflect, share one cause; indexing has its own) once
the cause is shown to be gone: a later job of the same database and stage succeeds, or a job is
accepted for that database with other settings than the failed jobs were sent with (the user fixed
``omray.yaml``: each job's payload carries a fingerprint of its settings), or, for jobs that failed
because the database's node was down (``data_node_lost``), that node is back in the cluster. ``omray retry``
re-drives everything on request.

A re-drive queues a copy of the failed job under a new sequence number (at the end of its lane, so
lane order and every invariant of :class:`actors.queue.state.QueueState` hold) and records on the
failed row which job it became, in the same commit: a row is re-driven once. Observe jobs start from
the session's coverage, so a re-driven job whose events a later job already covered observes nothing
twice. Automatic re-drives of one job's work stop after :data:`AUTOMATIC_REDRIVES` (a job that fails
for a cause of its own does not loop); a settings change and ``omray retry`` have no such limit (a
copy queued for a settings change carries the new fingerprint, so it is re-driven again only by
another change).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from protocol.jobs import (
    OBSERVE_BOUNDARY_HANDLER,
    REFLECT_GENERATION_HANDLER,
    SEMANTIC_INDEX_HANDLER,
    JobEnvelope,
    ObserveBoundaryJob,
)
from protocol.outcomes import (
    REASON_CONFLICT,
    REASON_DATA_NODE_LOST,
    REASON_INVALID_INPUT,
    REASON_INVALID_PAYLOAD,
)
from protocol.queue_rows import StoredJob, WaitingJobs

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


def fingerprint_of(envelope: JobEnvelope) -> str | None:
    """The settings fingerprint a job was sent with (``None``: not known, e.g. a worker's job)."""
    payload = envelope.payload
    return payload.settings_fingerprint if isinstance(payload, ObserveBoundaryJob) else None


def sent_under(envelope: JobEnvelope, fingerprint: str) -> JobEnvelope:
    """``envelope`` as if sent with settings ``fingerprint`` (a copy queued for a settings change)."""
    if not isinstance(envelope.payload, ObserveBoundaryJob):
        return envelope
    payload = envelope.payload.model_copy(update={"settings_fingerprint": fingerprint})
    return envelope.model_copy(update={"payload": payload})


@dataclass(frozen=True, slots=True)
class Redrive:
    """Queue again the failed jobs of ``db_path`` (the shell reads them from the store)."""

    db_path: str
    """Their database."""
    handler_ids: tuple[str, ...] | None
    """Of these handlers (``None``: every handler)."""
    new_fingerprint: str | None = None
    """For a settings change: only jobs sent with other settings, their copies under these."""

    @property
    def automatic_only(self) -> bool:
        """True when jobs re-driven :data:`AUTOMATIC_REDRIVES` times already stay failed."""
        return self.new_fingerprint is None


@dataclass
class RedriveTracker:
    """Which failed jobs wait for their cause to go, and which events show it gone.

    Pure: fed with give-ups, successes, accepts and the durable counts at a restart, it answers
    :class:`Redrive` values; each proof re-drives once (the state it answered on is cleared). Only the
    owning ``QueueActor`` calls it, under its lock.
    """

    waiting: set[tuple[str, str]] = field(default_factory=set)
    """``(database, stage)`` pairs whose failed jobs a success there re-drives."""
    fingerprints: dict[str, set[str]] = field(default_factory=dict)
    """Per database: the settings fingerprints its waiting failed jobs were sent with."""

    def gave_up(self, db_path: str, handler_id: str, reason: str, fingerprint: str | None = None) -> None:
        """A job of ``db_path``, sent with settings ``fingerprint``, gave up for ``reason``."""
        if reason in NOT_REDRIVEN:
            return
        self.waiting.add((db_path, stage_of(handler_id)))
        if fingerprint is not None:
            self.fingerprints.setdefault(db_path, set()).add(fingerprint)

    def restored(self, group: WaitingJobs) -> None:
        """Failed jobs found waiting in the durable queue at a restart."""
        if group.automatic:
            self.waiting.add((group.db_path, stage_of(group.handler_id)))
        if group.settings_fingerprint is not None:
            self.fingerprints.setdefault(group.db_path, set()).add(group.settings_fingerprint)

    def succeeded(self, db_path: str, handler_id: str) -> Redrive | None:
        """A job of ``db_path`` succeeded: re-drive the stage's failed jobs there, or ``None`` when
        nothing of that stage waits. The pair is cleared: one re-drive per proof."""
        stage = stage_of(handler_id)
        if (db_path, stage) not in self.waiting:
            return None
        self.waiting.discard((db_path, stage))
        return Redrive(db_path, handlers_of(stage))

    def accepted(self, db_path: str, fingerprint: str | None) -> Redrive | None:
        """A job sent with settings ``fingerprint`` was accepted for ``db_path``: when failed jobs
        there were sent with other settings, the settings changed; re-drive those under the new
        ones. ``None`` otherwise (an unknown fingerprint proves nothing)."""
        known = self.fingerprints.get(db_path, set())
        if fingerprint is None or not known - {fingerprint}:
            return None
        self.fingerprints[db_path] = known & {fingerprint}
        return Redrive(db_path, None, fingerprint)


def waiting_for_their_node(failed: Iterable[StoredJob]) -> frozenset[str]:
    """Databases with failed jobs (not re-driven yet) that gave up because their data node was not in
    the cluster: once that node is back, they are re-driven (the shell checks the node)."""
    return frozenset(
        job.envelope.payload.db_path for job in failed if job.failure_reason == REASON_DATA_NODE_LOST
    )
