"""Waiting for ``forget`` jobs (``OmrayClient.forget``, ``omray memory forget``, the MCP ``forget``
tool) and their report. The ids are resolved read-only where the database lives
(:meth:`actors.read.database_views.DatabaseViews.forget_plan`), one job per session goes through the
queue, and the caller waits here until each job's transaction has committed."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

WAIT_POLL_S = 0.05


class ForgetResults(Protocol):
    """Reads a forget job's result (a local ``ForgetReader``, or the database's reader elsewhere)."""

    def forget_result(self, job_id: str) -> dict[str, Any] | None:
        """What the job removed once its transaction committed, else ``None``."""
        ...


def wait_for_results(
    reader: ForgetResults, job_ids: Sequence[str], wait_s: float, sleep: Callable[[float], None] = time.sleep
) -> dict[str, dict[str, Any]]:
    """The results of the jobs that committed within ``wait_s`` seconds."""
    deadline = time.monotonic() + wait_s
    results: dict[str, dict[str, Any]] = {}
    while True:
        for job_id in job_ids:
            if job_id not in results and (found := reader.forget_result(job_id)) is not None:
                results[job_id] = found
        if len(results) == len(job_ids) or time.monotonic() >= deadline:
            return results
        sleep(WAIT_POLL_S)


def forget_report(
    report: dict[str, Any], job_ids: Sequence[str], results: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """One answer for the caller: what was forgotten, what was not found, and whether every job finished."""
    forgotten: dict[str, Any] = {
        "observations": [],
        "reflections": [],
        "transcript_events": 0,
        "generations": 0,
    }
    for result in results.values():
        forgotten["observations"] += result.get("observations", [])
        forgotten["reflections"] += result.get("reflections", [])
        forgotten["transcript_events"] += int(result.get("transcript_events", 0))
        forgotten["generations"] += int(result.get("generations", 0))
        report["unknown"] += result.get("unknown", [])
    return {
        "ok": True,
        "complete": len(results) == len(job_ids),
        "jobs": list(job_ids),
        "pending_jobs": [job_id for job_id in job_ids if job_id not in results],
        "forgotten": forgotten,
        **report,
    }
