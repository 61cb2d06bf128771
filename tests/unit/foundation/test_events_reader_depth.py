"""The events reader on deeply nested JSON (issue 16: D4): a typed error, never ``RecursionError``."""

from __future__ import annotations

from pathlib import Path

import pytest

from persistence.files.events_reader import iter_events
from protocol.errors import EventsFileError


def _line(seq: int, payload: str) -> str:
    return (
        f'{{"schema_version": "1.0", "run_id": "r", "seq": {seq}, "turn_no": 1, "type": "message", '
        f'"payload": {payload}, "ts": "2026-07-26T12:00:00+00:00"}}\n'
    )


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_a_deeply_nested_line_is_an_events_file_error_naming_the_line(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "events.jsonl"
    nested = '{"a": ' * depth + "1" + "}" * depth
    path.write_text(_line(1, '{"text": "ok"}') + _line(2, nested), encoding="utf-8")
    with pytest.raises(EventsFileError) as raised:
        list(iter_events(path))
    assert raised.value.line_no == 2 and "nested too deeply" in str(raised.value)


@pytest.mark.parametrize("depth", [50, 400, 900])
def test_nesting_is_read_or_refused_never_a_crash(tmp_path: Path, depth: int) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(_line(1, '{"v": ' + "[" * depth + "]" * depth + "}"), encoding="utf-8")
    try:
        events = list(iter_events(path))
    except EventsFileError as exc:
        assert exc.line_no == 1
    else:
        assert [event.seq for event in events] == [1]
