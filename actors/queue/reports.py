"""What the queue tells people: metrics, logs and the recent failures ``status()`` lists.

Metrics never hurt work (DESIGN.md invariant 7): a failing exporter is logged and ignored. Logs and
metrics carry ids, counts and category codes only (invariant 8).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Mapping
from typing import Any

from actors.queue.figures import usage_of
from actors.queue.ports import QueueMetricsPort
from actors.queue.state import Command, EmitJobFailed, MarkSucceeded, ScheduleRetry
from actors.queue.writes import Accept
from protocol.outcomes import JobFailedEvent
from protocol.queue_rows import iso_utc

logger = logging.getLogger("omray.queue")


class QueueReports:
    """Counts, recent failures and metric updates of one queue (callers serialize the counters)."""

    def __init__(self, metrics: QueueMetricsPort, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self._clock = clock
        self.recent_failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self.completed = 0
        """Jobs that succeeded since this queue started."""

    def effect(self, command: Command | Accept) -> None:
        """What a command other than a start reports once its writes are durable."""
        if isinstance(command, MarkSucceeded):
            self.completed += 1
        elif isinstance(command, ScheduleRetry):
            logger.warning(
                "job attempt failed; retry scheduled",
                extra={"job_id": command.job_id, "attempts": command.attempts, "reason": command.reason},
            )
        elif isinstance(command, EmitJobFailed):
            self._job_failed(command.run_id, command.event, self._clock())

    def tokens(self, handler_id: str, detail: Mapping[str, Any]) -> None:
        """The model usage a successful attempt reported."""
        for usage in usage_of(handler_id, detail):
            safe_metric(self.metrics.model_usage, handler_id, usage)

    def _job_failed(self, run_id: str, event: JobFailedEvent, now: float) -> None:
        payload = event.model_dump()
        self.recent_failures.append({"session_id": run_id, **payload, "at": iso_utc(now)})
        safe_metric(self.metrics.job_failed, event.handler_id, event.reason)
        logger.error(
            "job failed after retrying",
            extra={
                "run_id": run_id,
                "job_id": event.job_id,
                "handler_id": event.handler_id,
                "reason": event.reason,
                "attempts": event.attempts,
            },
        )


def safe_metric(record: Callable[..., None], *args: Any) -> None:
    """Call a metric update; a failing exporter is logged and ignored (metrics never hurt work)."""
    try:
        record(*args)
    except Exception as exc:
        logger.warning("metric update failed", extra={"error_class": type(exc).__name__})
