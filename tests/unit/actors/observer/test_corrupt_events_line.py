"""A corrupt events line fails only the jobs that need it, with a failure that says where (D11)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from actors.observer.actor import ObserverActor
from cluster.commands.demo_session import demo_session, event_line
from persistence.reads.memory_reader import MemoryReader
from protocol.jobs import JobEnvelope, ObserveBoundaryJob
from protocol.outcomes import EventsLocation, JobFailed, JobFailedEvent, JobSucceeded
from tests.unit.actors.observer.test_settings_at_run_time import FakeContext

# The per-boundary policy (the original): these tests observe at every job, whatever its size.
PER_BOUNDARY: dict[str, Any] = {"observer": {"observe_after_tokens": 0}}

SESSION = "s-corrupt"
SECRET = "{secret memory text that must never be echoed"


def _envelope(tmp_path: Path, end_seq: int) -> dict[str, object]:
    job = ObserveBoundaryJob(
        session_id=SESSION,
        terminal_end_seq=end_seq,
        terminal_status="completed",
        renderer_version="1",
        observer_schema_version="1",
        db_path=str(tmp_path / "om.sqlite"),
        events_path=str(tmp_path / "events.jsonl"),
        settings={"model": "builtin/extractive", **PER_BOUNDARY},
    )
    return JobEnvelope(job_id=f"observe-{end_seq}", correlation_id=SESSION, payload=job).model_dump()


def test_corrupt_line_after_the_range_fails_only_the_job_that_needs_it(tmp_path: Path) -> None:
    turns = demo_session(SESSION)
    first = [e for turn in turns[:2] for e in turn]
    second = turns[2]
    events_path = tmp_path / "events.jsonl"
    # Right after the first boundary, the next turn's first event was written corrupt.
    events_path.write_text(
        "".join(event_line(e) for e in first) + SECRET + "\n" + "".join(event_line(e) for e in second[1:]),
        encoding="utf-8",
    )
    worker = ObserverActor(FakeContext())
    first_end = int(first[-1]["seq"])
    done = JobSucceeded.model_validate(worker.handle(_envelope(tmp_path, first_end), 1))
    assert done.detail["status"] == "inserted"
    assert MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") == first_end

    failed = JobFailed.model_validate(worker.handle(_envelope(tmp_path, int(second[-1]["seq"])), 1))
    assert failed.reason == "events_file_corrupt" and failed.error_class == "EventsFileError"
    location = failed.events_location
    assert location is not None
    assert (location.path, location.line_no, location.seq, location.after_seq) == (
        str(events_path),
        len(first) + 1,
        None,
        first_end,
    )
    assert "secret" not in json.dumps(failed.model_dump())

    event = JobFailedEvent.for_job(
        job_id=failed.job_id,
        handler_id="observational_memory.observe_boundary",
        attempts=4,
        event_reason="retry_exhausted",
        last_failure=failed.reason,
        events_location=location,
    )
    assert event.events_location == location and "secret" not in event.model_dump_json()


def test_job_failed_event_carries_the_location_key_only_when_there_is_one() -> None:
    plain = JobFailedEvent.for_job(
        job_id="j", handler_id="h", attempts=4, event_reason="retry_exhausted", last_failure="conflict"
    )
    assert "events_location" not in plain.model_dump() and "events_location" not in plain.model_dump_json()
    located = plain.model_copy(
        update={"events_location": EventsLocation(path="/p/events.jsonl", line_no=3, seq=None, after_seq=2)}
    )
    dumped = located.model_dump()
    assert dumped["events_location"] == {"path": "/p/events.jsonl", "line_no": 3, "seq": None, "after_seq": 2}
    assert JobFailedEvent.model_validate(dumped) == located
