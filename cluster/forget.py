"""Planning and waiting for ``forget`` jobs (``OmrayClient.forget``, ``omray memory forget``, the MCP
``forget`` tool): resolve the ids read-only, send one job per session through the queue, wait until
each job's transaction has committed."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from persistence.reads.forgotten import ForgetReader
from protocol.forget import ForgetArguments
from protocol.jobs import ForgetJob, JobEnvelope

WAIT_POLL_S = 0.05


def plan_forget(
    reader: ForgetReader,
    db_path: str,
    settings_block: dict[str, Any],
    arguments: ForgetArguments,
) -> tuple[list[JobEnvelope], dict[str, Any]]:
    """The forget jobs for checked ``arguments`` (:func:`protocol.forget.forget_arguments`) and the
    report of the ids that need none."""
    report: dict[str, Any] = {"already_forgotten": [], "unknown": [], "ambiguous": []}
    by_session: dict[str, list[str]] = {}
    for located in reader.locate(list(arguments.ids)):
        if located.status == "found" and located.run_id is not None and located.memory_id is not None:
            by_session.setdefault(located.run_id, []).append(located.memory_id)
        elif located.status == "forgotten":
            report["already_forgotten"].append(located.given)
        else:
            report[located.status].append(located.given)
    jobs = [
        ForgetJob(session_id=run_id, memory_ids=tuple(found), db_path=db_path, settings=settings_block)
        for run_id, found in by_session.items()
    ]
    if arguments.session_id is not None:
        jobs.append(
            ForgetJob(
                session_id=arguments.session_id,
                event_ranges=arguments.event_ranges,
                whole_session=not arguments.event_ranges,
                db_path=db_path,
                settings=settings_block,
            )
        )
    envelopes = [JobEnvelope(job_id=uuid.uuid4().hex, session_id=job.session_id, payload=job) for job in jobs]
    return envelopes, report


def wait_for_results(
    reader: ForgetReader, job_ids: Sequence[str], wait_s: float, sleep: Callable[[float], None] = time.sleep
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
