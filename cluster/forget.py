"""Planning and waiting for ``forget`` jobs (``OmrayClient.forget``, ``omray memory forget``, the MCP
``forget`` tool): resolve the ids read-only, send one job per session through the queue, wait until
each job's transaction has committed."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import ValidationError

from persistence.forget_queries import ForgetReader
from protocol.errors import InvalidPayloadError
from protocol.jobs import MAX_FORGET_IDS, ForgetJob, JobEnvelope

_ID = re.compile(r"[0-9a-f]{12,64}\Z")
WAIT_POLL_S = 0.05


def _checked_ids(memory_ids: Sequence[str]) -> list[str]:
    if isinstance(memory_ids, str):
        raise InvalidPayloadError("memory_ids must be a list of ids, not one string")
    ids: list[str] = []
    for number, given in enumerate(memory_ids, start=1):
        value = given.strip().lower() if isinstance(given, str) else None
        if value is None or not _ID.match(value):
            raise InvalidPayloadError(
                f"memory id #{number} must be 12 to 64 hexadecimal characters (a full id or a display id)"
            )
        ids.append(value)
    if len(ids) > MAX_FORGET_IDS:
        raise InvalidPayloadError(f"at most {MAX_FORGET_IDS} ids per call")
    return list(dict.fromkeys(ids))


def _checked_ranges(event_ranges: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    ranges: list[tuple[int, int]] = []
    for number, pair in enumerate(event_ranges, start=1):
        try:
            start, end = (int(value) for value in pair)
        except (TypeError, ValueError):
            raise InvalidPayloadError(f"event range #{number} must be two seqs (start, end)") from None
        if not 1 <= start <= end <= 2**63 - 1:
            raise InvalidPayloadError(f"event range #{number} must satisfy 1 <= start <= end")
        ranges.append((start, end))
    return ranges


def plan_forget(
    reader: ForgetReader,
    db_path: str,
    settings_block: dict[str, Any],
    memory_ids: Sequence[str] = (),
    session_id: str | None = None,
    event_ranges: Sequence[Sequence[int]] = (),
) -> tuple[list[JobEnvelope], dict[str, Any]]:
    """The forget jobs for a request and the report of the ids that need none. Raises
    :class:`InvalidPayloadError` (nothing sent) for a malformed request."""
    ids = _checked_ids(memory_ids)
    ranges = _checked_ranges(event_ranges)
    if not ids and session_id is None:
        raise InvalidPayloadError("name memory ids to forget, or a session")
    if ids and session_id is not None:
        raise InvalidPayloadError("give memory ids or a session, not both")
    if ranges and session_id is None:
        raise InvalidPayloadError("event ranges need the session they belong to")
    report: dict[str, Any] = {"already_forgotten": [], "unknown": [], "ambiguous": []}
    by_session: dict[str, list[str]] = {}
    for located in reader.locate(ids):
        if located.status == "found" and located.run_id is not None and located.memory_id is not None:
            by_session.setdefault(located.run_id, []).append(located.memory_id)
        elif located.status == "forgotten":
            report["already_forgotten"].append(located.given)
        else:
            report[located.status].append(located.given)
    payloads: list[dict[str, Any]] = [
        {"session_id": run_id, "memory_ids": tuple(found)} for run_id, found in by_session.items()
    ]
    if session_id is not None:
        payloads.append(
            {"session_id": session_id, "event_ranges": tuple(ranges), "whole_session": not ranges}
        )
    envelopes: list[JobEnvelope] = []
    for payload in payloads:
        try:
            job = ForgetJob(db_path=db_path, settings=settings_block, **payload)
        except ValidationError as exc:
            raise InvalidPayloadError(f"invalid forget request ({type(exc).__name__})") from None
        envelopes.append(JobEnvelope(job_id=uuid.uuid4().hex, session_id=job.session_id, payload=job))
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
