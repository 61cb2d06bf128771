"""The node-local log of shipped events: validation, a crash's half line, permissions, batch sizes."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest

from actors.store.events_log import append_shipped
from persistence.files.events_log import EventLog
from persistence.files.events_reader import read_event_window
from protocol.errors import InvalidPayloadError
from protocol.shipping import batch_size, shipped_events_path, shipped_events_root


def _event(seq: int, session: str = "s1", text: str = "hello") -> dict[str, Any]:
    return {
        "schema_version": "1.0",
        "run_id": session,
        "seq": seq,
        "turn_no": 1,
        "type": "llm_step_completed",
        "payload": {"text": text},
        "ts": "2026-01-01T00:00:00+00:00",
    }


def test_a_batch_is_appended_once_and_read_like_any_events_file(tmp_path: Path) -> None:
    db = str(tmp_path / "data" / "om.sqlite")
    log = EventLog(shipped_events_root(db))
    first = append_shipped(log, "s1", [_event(1), _event(2), _event(5)])
    again = append_shipped(log, "s1", [_event(2), _event(5), _event(6)])
    assert (first.appended, first.duplicates, first.last_seq) == (3, 0, 5)
    assert (again.appended, again.duplicates, again.last_seq) == (1, 2, 6)
    window = read_event_window(shipped_events_path(db, "s1"), 1, 6, session_id="s1")
    assert [event.seq for event in window.events] == [1, 2, 5, 6] and window.through == 6


@pytest.mark.parametrize(
    "batch",
    [
        [_event(1, session="other")],
        [_event(2), _event(1)],
        [_event(1), _event(1)],
        [{"seq": 1}],
    ],
    ids=["another-session", "decreasing", "repeated", "malformed"],
)
def test_a_bad_batch_is_refused_and_writes_nothing(tmp_path: Path, batch: list[dict[str, Any]]) -> None:
    log = EventLog(tmp_path / "om.sqlite.events")
    with pytest.raises(InvalidPayloadError):
        append_shipped(log, "s1", batch)
    assert not log.path("s1").exists()


def test_a_session_id_that_is_not_a_file_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidPayloadError):
        EventLog(tmp_path).path("../escape")


def test_a_half_written_last_line_is_cut_before_the_next_append(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "root")
    append_shipped(log, "s1", [_event(1)])
    with log.path("s1").open("ab") as handle:
        handle.write(b'{"schema_version": "1.0", "run_id": "s1", "seq": 2')  # a crash mid-write
    restarted = EventLog(tmp_path / "root")
    assert restarted.tail("s1") == 1
    assert append_shipped(restarted, "s1", [_event(2)]).appended == 1
    window = read_event_window(restarted.path("s1"), 1, 2, session_id="s1")
    assert [event.seq for event in window.events] == [1, 2]


def test_folders_are_private_and_the_log_is_0600(tmp_path: Path) -> None:
    log = EventLog(tmp_path / "a" / "b.events")
    append_shipped(log, "s1", [_event(1)])
    assert stat.S_IMODE(log.path("s1").stat().st_mode) == 0o600
    assert stat.S_IMODE(log.path("s1").parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "a" / "b.events").stat().st_mode) == 0o700


def test_batch_size_bounds_count_and_bytes_but_always_takes_one() -> None:
    assert batch_size([10] * 10, max_events=4, max_bytes=1000) == 4
    assert batch_size([400, 400, 400], max_events=10, max_bytes=1000) == 2
    assert batch_size([5000, 1], max_events=10, max_bytes=1000) == 1
    assert batch_size([], max_events=10, max_bytes=1000) == 0
