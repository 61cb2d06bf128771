"""An events file that is missing, or holds another session's lines, fails the observe job with a
category of its own that says which file (issue 40 item 9); it used to end as ``transient_runtime``
(missing) or ``worker_crashed`` (another session's lines), and nothing is committed."""

from __future__ import annotations

import json
from pathlib import Path

from actors.observer.actor import ObserverActor
from cluster.commands.demo_session import demo_session, event_line
from persistence.reads.memory_reader import MemoryReader
from protocol.outcomes import JobFailed, explain_failure
from tests.unit.actors.observer.test_corrupt_events_line import SESSION, _envelope
from tests.unit.actors.observer.test_settings_at_run_time import FakeContext


def _events_of(session_id: str) -> list[dict[str, object]]:
    return [e for turn in demo_session(session_id)[:2] for e in turn]


def _failure(tmp_path: Path, end_seq: int) -> JobFailed:
    outcome = ObserverActor(FakeContext()).handle(_envelope(tmp_path, end_seq), 1)
    return JobFailed.model_validate(outcome)


def _covered(tmp_path: Path) -> int:
    if not (tmp_path / "om.sqlite").exists():
        return 0
    return MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") or 0


def test_an_events_file_of_another_session_is_an_events_mismatch(tmp_path: Path) -> None:
    other = _events_of("another-session")
    (tmp_path / "events.jsonl").write_text("".join(event_line(e) for e in other), encoding="utf-8")
    failed = _failure(tmp_path, int(other[-1]["seq"]))
    assert (failed.reason, failed.retryable, failed.error_class) == (
        "events_mismatch",
        False,
        "EventsMismatchError",
    )
    location = failed.events_location
    assert location is not None and (location.path, location.line_no) == (str(tmp_path / "events.jsonl"), 1)
    assert _covered(tmp_path) == 0
    cause, fix = explain_failure(failed.reason)
    assert "another session" in cause and "events.jsonl" in fix


def test_a_foreign_line_inside_the_range_is_an_events_mismatch_naming_its_line(tmp_path: Path) -> None:
    own = _events_of(SESSION)
    foreign = dict(own[2], run_id="another-session")
    lines = [event_line(e) for e in own[:2]] + [event_line(foreign)] + [event_line(e) for e in own[3:]]
    (tmp_path / "events.jsonl").write_text("".join(lines), encoding="utf-8")
    failed = _failure(tmp_path, int(own[-1]["seq"]))
    assert failed.reason == "events_mismatch"
    assert failed.events_location is not None and failed.events_location.line_no == 3
    assert "content" not in json.dumps(failed.model_dump())  # where, never what
    assert _covered(tmp_path) == 0


def test_a_missing_events_file_is_events_missing_and_retryable(tmp_path: Path) -> None:
    failed = _failure(tmp_path, 5)
    assert (failed.reason, failed.retryable) == ("events_missing", True)
    assert failed.error_class == "EventsMissingError"
    location = failed.events_location
    assert location is not None
    assert (location.path, location.line_no) == (str(tmp_path / "events.jsonl"), None)
    assert _covered(tmp_path) == 0
    cause, _fix = explain_failure(failed.reason)
    assert "does not exist" in cause
