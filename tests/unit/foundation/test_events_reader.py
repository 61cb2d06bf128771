"""The events.jsonl reader: ranges, partial last lines, corrupt lines, schema versions, big lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from persistence.events_reader import iter_events, last_event_seq, read_event_range
from protocol.errors import EventsFileError


def _line(seq: int, *, version: str = "1.0", event_type: str = "agent_end", payload: object = None) -> str:
    return json.dumps(
        {
            "schema_version": version,
            "run_id": "5",
            "seq": seq,
            "turn_no": 1,
            "type": event_type,
            "payload": payload if payload is not None else {"reason": "completed"},
            "ts": "2026-07-23T00:00:00+00:00",
        }
    )


def _write(path: Path, lines: list[str], trailing_newline: bool = True) -> Path:
    path.write_text("\n".join(lines) + ("\n" if trailing_newline else ""), encoding="utf-8")
    return path


def test_reads_inclusive_range_in_file_order(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(s) for s in (1, 2, 3, 5, 6)])
    assert [e.seq for e in read_event_range(path, 2, 5)] == [2, 3, 5]
    assert [e.seq for e in iter_events(path)] == [1, 2, 3, 5, 6]
    assert read_event_range(path, 1, 1)[0].run_id == "5"  # numeric-looking ids stay strings


def test_stops_at_first_seq_past_the_end(tmp_path: Path) -> None:
    # The corrupt line after seq 3 is never reached because the read stops at seq 4.
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(3), _line(4), "{not json"])
    assert [e.seq for e in read_event_range(path, 1, 3)] == [1, 3]


def test_partial_last_line_ends_the_read_quietly(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    full = _line(2)
    path.write_text(_line(1) + "\n" + full[: len(full) // 2], encoding="utf-8")
    assert [e.seq for e in iter_events(path)] == [1]


def test_complete_last_line_without_newline_is_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2)], trailing_newline=False)
    assert [e.seq for e in iter_events(path)] == [1, 2]


def test_corrupt_line_in_the_middle_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), "{secret memory text", _line(3)])
    with pytest.raises(EventsFileError) as info:
        list(iter_events(path))
    assert info.value.line_no == 2
    assert info.value.path == str(path)
    assert "line 2" in str(info.value)
    assert "secret" not in str(info.value)


def test_envelope_missing_fields_is_a_typed_error(tmp_path: Path) -> None:
    bad = json.dumps({"schema_version": "1.0", "run_id": "5", "type": "agent_end", "payload": {}, "ts": ""})
    path = _write(tmp_path / "events.jsonl", [_line(1), bad])
    with pytest.raises(EventsFileError, match="seq"):
        list(iter_events(path))


def test_non_object_line_is_a_typed_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", ["[1, 2]", _line(2)])
    with pytest.raises(EventsFileError, match="line 1"):
        list(iter_events(path))


def test_incompatible_major_schema_version_is_skipped(tmp_path: Path) -> None:
    other = json.dumps({"schema_version": "2.0", "something": "else"})
    path = _write(tmp_path / "events.jsonl", [_line(1), other, _line(3, version="1.7")])
    assert [e.seq for e in iter_events(path)] == [1, 3]


def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), "", "   ", _line(2)])
    assert [e.seq for e in iter_events(path)] == [1, 2]


def test_multi_megabyte_line(tmp_path: Path) -> None:
    big = "x" * (5 * 1024 * 1024)
    path = _write(
        tmp_path / "events.jsonl",
        [_line(1), _line(2, event_type="agent_command_applied", payload={"text": big}), _line(3)],
    )
    events = read_event_range(path, 2, 3)
    assert len(events[0].payload["text"]) == len(big)
    assert [e.seq for e in events] == [2, 3]


def test_missing_file_reads_as_empty(tmp_path: Path) -> None:
    assert list(iter_events(tmp_path / "nope.jsonl")) == []
    assert last_event_seq(tmp_path / "nope.jsonl") == 0


def test_last_event_seq(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(7), _line(4)])
    assert last_event_seq(path) == 7


def test_empty_payload_written_as_a_json_array_reads_as_empty(tmp_path: Path) -> None:
    # The PHP host's json_encode writes an empty payload as ``[]``; that line is not corrupt.
    path = _write(tmp_path / "events.jsonl", [_line(1, event_type="turn_advanced", payload=[]), _line(2)])
    events = read_event_range(path, 1, 2)
    assert [(e.seq, e.payload) for e in events] == [(1, {}), (2, {"reason": "completed"})]


def test_non_empty_payload_array_is_still_a_typed_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1, payload=["x"])])
    with pytest.raises(EventsFileError, match="payload"):
        list(iter_events(path))
