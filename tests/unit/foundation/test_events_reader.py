"""The events.jsonl reader: ranges, partial last lines, corrupt lines, schema versions, big lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from persistence.files.events_reader import iter_events, last_event_seq, read_event_range, read_event_window
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
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(4), _line(7)])
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


# --- D10: corrupt envelopes are typed errors naming file and line -------------------------------


@pytest.mark.parametrize("version", ["abc", " 1.0", "1.0 ", "1..0", "", "\uff11.0"])
def test_malformed_schema_version_is_corrupt_not_skipped(tmp_path: Path, version: str) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2, version=version), _line(3)])
    with pytest.raises(EventsFileError) as info:
        read_event_range(path, 1, 3)
    assert (info.value.path, info.value.line_no, info.value.seq) == (str(path), 2, 2)
    assert "schema_version" in str(info.value)


def test_non_string_schema_version_is_corrupt(tmp_path: Path) -> None:
    line = json.loads(_line(2))
    line["schema_version"] = 1
    path = _write(tmp_path / "events.jsonl", [_line(1), json.dumps(line)])
    with pytest.raises(EventsFileError, match="line 2"):
        read_event_range(path, 1, 2)


def test_well_formed_other_major_is_still_skipped(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2, version="2"), _line(3, version="0.9.1")])
    assert [e.seq for e in iter_events(path)] == [1]


def test_duplicate_seq_is_corrupt(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2), _line(2), _line(3)])
    with pytest.raises(EventsFileError) as info:
        read_event_range(path, 1, 3)
    assert (info.value.line_no, info.value.seq, info.value.after_seq) == (3, 2, 2)
    assert "duplicate seq" in str(info.value)


def test_out_of_order_seq_is_corrupt_not_lost(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(s) for s in (7, 8, 10, 9)])
    with pytest.raises(EventsFileError) as info:
        read_event_range(path, 1, 9)
    assert (info.value.line_no, info.value.seq, info.value.after_seq) == (4, 9, 10)
    assert "out of order" in str(info.value)


def test_out_of_order_seq_inside_a_longer_read_is_corrupt(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(s) for s in (7, 8, 10, 9, 11)])
    with pytest.raises(EventsFileError) as info:
        list(iter_events(path))
    assert (info.value.line_no, info.value.seq, info.value.after_seq) == (4, 9, 10)
    assert "out of order" in str(info.value)


def test_seq_beyond_sqlite_integers_is_corrupt_not_overflow(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2**70)])
    with pytest.raises(EventsFileError) as info:
        read_event_range(path, 1, 2**70)
    assert info.value.line_no == 2 and info.value.seq is None and "seq" in str(info.value)


# --- D11: a range read needs only its own lines ------------------------------------------------


def test_range_read_never_reads_the_line_after_its_end(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2), _line(3), "{corrupt"])
    assert [e.seq for e in read_event_range(path, 1, 3)] == [1, 2, 3]
    window = read_event_window(path, 2, 3)
    assert [e.seq for e in window.events] == [2, 3] and window.through == 3
    with pytest.raises(EventsFileError, match="line 4"):
        read_event_range(path, 1, 4)


def test_corrupt_line_before_the_range_is_not_needed(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), "{corrupt", _line(3), _line(4), _line(5)])
    assert [e.seq for e in read_event_range(path, 3, 5)] == [3, 4, 5]
    assert [e.seq for e in read_event_range(path, 4, 5)] == [4, 5]
    with pytest.raises(EventsFileError) as info:
        read_event_range(path, 2, 5)  # seq 2 may be the corrupt line
    assert (info.value.line_no, info.value.seq, info.value.after_seq) == (2, None, 1)


def test_corrupt_line_inside_the_range_fails_the_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2), "{corrupt", _line(4)])
    with pytest.raises(EventsFileError) as info:
        read_event_range(path, 2, 4)
    assert (info.value.line_no, info.value.after_seq) == (3, 2)
    assert info.value.location() == {"path": str(path), "line_no": 3, "seq": None, "after_seq": 2}


def test_trailing_corrupt_line_fails_a_read_that_may_need_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", [_line(1), "{corrupt"])
    with pytest.raises(EventsFileError):
        read_event_range(path, 2, 2)


# --- D1: how far a range read got --------------------------------------------------------------


def test_window_through_stops_at_the_last_complete_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    full = _line(28)
    path.write_text("".join(_line(s) + "\n" for s in range(1, 28)) + full[: len(full) // 2], encoding="utf-8")
    window = read_event_window(path, 20, 28)
    assert [e.seq for e in window.events] == list(range(20, 28)) and window.through == 27
    assert read_event_window(path, 1, 999).through == 27


def test_window_through_reaches_the_end_across_a_hole(tmp_path: Path) -> None:
    # A range that ends in a hole is a real hole once no later line goes back into it; lines the
    # read does not need (corrupt, past the range) are passed over on the way.
    path = _write(tmp_path / "events.jsonl", [_line(1), _line(2), _line(5), "{corrupt", _line(7)])
    window = read_event_window(path, 1, 4)
    assert [e.seq for e in window.events] == [1, 2] and window.through == 4
    assert read_event_window(tmp_path / "missing.jsonl", 1, 3).through == 0
