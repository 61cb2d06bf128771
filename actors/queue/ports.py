"""What the QueueActor needs from the outside: its store, its worker pools and its metrics.

Plain protocols, so the actor runs in unit tests with a real ``persistence.Store`` and fake pools,
and in a cluster with Ray-backed ones (``cluster/named_actors.py`` builds those and hands them in).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from actors.queue.figures import ModelUsage, QueueFigures
from protocol.queue_rows import JobCounts, JobWrite, RuntimeEvent, StoredJob, WaitingJobs


class QueueStorePort(Protocol):
    """The queue-database reads and writes the actor needs (a ``persistence.Store``)."""

    def next_job_seq(self) -> int: ...
    def apply_job_writes(self, writes: Sequence[JobWrite]) -> int: ...
    def list_unfinished_jobs(self) -> Sequence[StoredJob]: ...
    def runtime_events(
        self, session_id: str, after_seq: int = 0, db_path: str | None = None
    ) -> Sequence[RuntimeEvent]: ...
    def job_counts(self) -> JobCounts: ...
    def failed_to_redrive(
        self,
        db_path: str | None = None,
        handler_ids: Sequence[str] | None = None,
        *,
        max_redrives: int | None = None,
        excluded_reasons: Sequence[str] = (),
    ) -> Sequence[StoredJob]: ...
    def waiting_for_cause(
        self, excluded_reasons: Sequence[str], max_redrives: int
    ) -> Sequence[WaitingJobs]: ...


class QueueMetricsPort(Protocol):
    """Where the queue reports its numbers (Ray metrics in a cluster; nothing in unit tests)."""

    def queue_figures(self, figures: QueueFigures) -> None: ...
    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None: ...
    def job_failed(self, handler_id: str, reason: str) -> None: ...
    def model_usage(self, handler_id: str, usage: ModelUsage) -> None: ...


class NoMetrics:
    """A metrics port that records nothing."""

    def queue_figures(self, figures: QueueFigures) -> None:
        """Ignore."""

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        """Ignore."""

    def job_failed(self, handler_id: str, reason: str) -> None:
        """Ignore."""

    def model_usage(self, handler_id: str, usage: ModelUsage) -> None:
        """Ignore."""


class WorkerPoolPort(Protocol):
    """Starts attempts on workers and collects outcomes (``None`` = the worker died mid-job).

    A pool may also offer ``start_many(starts) -> job seqs not sent`` (each start a ``handler_id,
    job_seq, envelope, attempt`` tuple); the queue then hands it every start of one commit at once.
    And it may offer ``on_ready(callback)``: the pool then calls ``callback()`` (cheap, never
    blocking) each time outcomes become ready to ``poll``, and the queue's loop thread collects them
    itself, ``poll(0)``, instead of a collector thread waiting in ``poll``.
    """

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None: ...
    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        """Finished attempts, waiting up to ``timeout_s`` for the first one."""
        ...
