"""What the queue tells people: metrics, logs, and its ``status()`` answer with the recent failures.

Metrics never hurt work (DESIGN.md invariant 7): a failing exporter is logged and ignored. Logs and
metrics carry ids, counts and category codes only (invariant 8). :func:`queue_status` assembles the
``status()`` answer from the queue's parts (pure).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from actors.queue.attempts import Answered, Attempt
from actors.queue.commands import Command, EmitJobFailed, EmitJobHeld, HoldJob, MarkSucceeded, ScheduleRetry
from actors.queue.figures import QueueFigures, state_figures, usage_of
from actors.queue.ports import QueueMetricsPort
from actors.queue.state import QueueState
from actors.queue.writes import Accept
from protocol.outcomes import JobFailedEvent
from protocol.queue_rows import WaitingJobs, iso_utc

logger = logging.getLogger("omray.queue")


class QueueReports:
    """Counts, recent failures and metric updates of one queue (callers serialize the counters)."""

    def __init__(self, metrics: QueueMetricsPort, clock: Callable[[], float]) -> None:
        self.metrics = metrics
        self._clock = clock
        self.recent_failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self.completed = 0
        """Jobs that succeeded since this queue started."""
        self._figures_reported = 0.0  # when the queue gauges were last set

    def effects(self, commands: Iterable[Command | Accept]) -> None:
        """What the commands of a durable batch report; a log or metric that fails is logged and
        skipped (it must not keep the batch's starts from going out)."""
        for command in commands:
            try:
                self.effect(command)
            except Exception as exc:
                logger.error("queue effect failed", extra={"error_class": type(exc).__name__})

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
            self._job_failed(command.session_id, command.event, self._clock(), command.db_path)
        elif isinstance(command, HoldJob):
            logger.info(
                "job held by its daily budget",
                extra={"job_id": command.job_id, "held": command.held, "reason": command.reason},
            )
        elif isinstance(command, EmitJobHeld):
            logger.warning(
                "daily model budget reached; model jobs held",
                extra={
                    "session_id": command.session_id,
                    "job_id": command.event.job_id,
                    "reason": command.event.reason,
                },
            )

    def answered(self, sent: Attempt | None, answer: Answered, now: float) -> None:
        """The metrics of one worker answer: the model usage of a success, and the attempt's time."""
        if answer.usage is not None and sent is not None:
            safe_metric(self.tokens, sent.handler_id, answer.usage)
        if sent is not None:
            seconds = now - sent.started
            safe_metric(self.metrics.attempt_finished, sent.handler_id, answer.kind, seconds, sent.attempt)

    def figures_due(self, now: float, every_s: float) -> bool:
        """True when the queue gauges were last set ``every_s`` ago or more."""
        return now - self._figures_reported >= every_s

    def figures(self, figures: QueueFigures, now: float) -> None:
        """Set the queue gauges (once a tick is enough, and saves the loop a call)."""
        self._figures_reported = now
        safe_metric(self.metrics.queue_figures, figures)

    def tokens(self, handler_id: str, detail: Mapping[str, Any]) -> None:
        """The model usage a successful attempt reported."""
        for usage in usage_of(handler_id, detail):
            safe_metric(self.metrics.model_usage, handler_id, usage)

    def _job_failed(self, session_id: str, event: JobFailedEvent, now: float, db_path: str = "") -> None:
        payload = event.model_dump()
        self.recent_failures.append(
            {"session_id": session_id, "db_path": db_path, **payload, "at": iso_utc(now)}
        )
        safe_metric(self.metrics.job_failed, event.handler_id, event.reason)
        logger.error(
            "job failed after retrying",
            extra={
                "session_id": session_id,
                "job_id": event.job_id,
                "handler_id": event.handler_id,
                "reason": event.reason,
                "attempts": event.attempts,
            },
        )


def queue_status(
    state: QueueState,
    reports: QueueReports,
    *,
    in_flight: list[dict[str, Any]],
    coalesced: int,
    unwritten: int,
    commits: Mapping[str, float],
    loop_alive: bool,
    now: float = 0.0,
    waiting: Sequence[WaitingJobs] = (),
) -> dict[str, Any]:
    """The queue's ``status()``: depth (how much of it is delayed, and until when), runs in flight,
    lanes, recent failures, failed jobs waiting for their cause by database, and counters (ids and
    counts only, never payload contents)."""
    snapshot = state.snapshot()
    delayed = state.delayed(now)
    held = state.held(now)
    return {
        "figures": state_figures(state).as_dict(),
        "depth": state.depth,
        "delayed": len(delayed),
        "delayed_retries": sum(1 for retry, _ in delayed if retry),
        "delayed_idle_flushes": sum(1 for retry, _ in delayed if not retry),
        "delayed_next_in_s": round(delayed[0][1] - now, 1) if delayed else None,
        "delayed_last_in_s": round(delayed[-1][1] - now, 1) if delayed else None,
        "waiting_for_cause": sum(group.jobs for group in waiting),
        "waiting_for_cause_by_project": waiting_by_project(waiting),
        "held": sum(int(hold["jobs"]) for hold in held),  # type: ignore[call-overload]
        "held_by_project": held,
        "in_flight": in_flight,
        "max_in_flight": state.max_in_flight,
        "lanes": snapshot["lanes"],
        "busy_lanes": snapshot["busy_lanes"],
        "capacity": snapshot["capacity"],
        "completed_since_start": reports.completed,
        "coalesced_since_start": coalesced,
        "recent_failures": list(reports.recent_failures),
        "unwritten": unwritten,
        "commits": dict(commits),
        "state": snapshot,
        "loop_alive": loop_alive,
    }


def waiting_by_project(waiting: Sequence[WaitingJobs]) -> list[dict[str, Any]]:
    """Failed jobs waiting for their cause, per database: how many, and how many of them a later
    success re-drives by itself (the others wait for a settings change or ``omray retry``)."""
    found: dict[str, dict[str, Any]] = {}
    for group in waiting:
        entry = found.setdefault(group.db_path, {"db_path": group.db_path, "jobs": 0, "automatic": 0})
        entry["jobs"] += group.jobs
        entry["automatic"] += group.jobs if group.automatic else 0
    return [found[db_path] for db_path in sorted(found)]


def safe_metric(record: Callable[..., None], *args: Any) -> None:
    """Call a metric update; a failing exporter is logged and ignored (metrics never hurt work)."""
    try:
        record(*args)
    except Exception as exc:
        logger.warning("metric update failed", extra={"error_class": type(exc).__name__})


# --- ``omray status`` text (pure: the status answer in, lines out) ---------------------------------


def _about(seconds: float) -> str:
    """A rough duration: ``12 s``, ``4 min``, ``2 h``."""
    if seconds < 90:
        return f"{max(round(seconds), 1)} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


def queue_summary_lines(queue: Mapping[str, Any]) -> list[str]:
    """The queue's depth (what of it is delayed, why, and until when, roughly) and the failed jobs
    waiting for their cause, per project, with how to release them."""
    depth = f"queue depth: {queue.get('depth', '?')}"
    if queue.get("delayed"):
        kinds = [
            f"{n} {what}"
            for n, what in (
                (
                    queue.get("delayed_idle_flushes", 0),
                    "idle flushes (an observe tail waiting for the session to go quiet)",
                ),
                (queue.get("delayed_retries", 0), "retries in backoff"),
            )
            if n
        ]
        first, last = queue.get("delayed_next_in_s"), queue.get("delayed_last_in_s")
        when = ""
        if first is not None and last is not None:
            when = f"; the next may start in ~{_about(first)}" + (
                f", the last in ~{_about(last)}" if last > first else ""
            )
        depth += f" ({queue['delayed']} of them delayed: {', '.join(kinds)}{when})"
    lines = [depth]
    for hold in queue.get("held_by_project") or ():
        lines.append(held_line(hold))
    for project in queue.get("waiting_for_cause_by_project") or ():
        automatic, jobs = project["automatic"], project["jobs"]
        how = (
            "queued again by themselves once a later job of that project succeeds or its settings change"
            if automatic == jobs
            else f"{automatic} queued again by themselves once a later job of that project succeeds, all "
            "of them once its settings change"
        )
        lines.append(
            f"failed jobs waiting for their cause to go: {jobs} of {project['db_path']} ({how}; "
            "`omray retry` in that project queues them now)"
        )
    return lines


def held_line(hold: Mapping[str, Any]) -> str:
    """One line about a project whose model jobs the daily budget holds: why, until when, how to resume."""
    key, unit = ("daily_usd", "USD") if hold.get("reason") == "budget_usd" else ("daily_tokens", "tokens")
    until = iso_utc(float(hold["until"]))[:16].replace("T", " ")
    return (
        f"held by the daily budget: {hold.get('jobs', 0)} observe/reflect jobs of {hold['db_path']} wait "
        f"(budget.{key} {float(hold['cap']):g} {unit} used up: {float(hold['spent']):g}); they resume at "
        f"{until} UTC, or within a minute of raising budget.{key} in that project's settings (`omray retry` "
        "there: at once). Search and compaction keep working"
    )


def failure_lines(queue: Mapping[str, Any]) -> list[str]:
    """One line per recent failure: its session and project, cause, job and fix."""
    return [
        f"failed: session {failure.get('session_id')!r} of {failure.get('db_path') or '?'}: "
        f"{failure['cause']} (job {failure['job_id'][:12]}, {failure['attempts']} attempts, last "
        f"failure {failure['last_failure']}); fix: {failure['fix']}"
        for failure in queue.get("recent_failures", [])
    ]
