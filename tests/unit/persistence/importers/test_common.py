"""Importer machinery: bad input, atomic output, timestamps, session ids, streaming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from persistence.importers import (
    ImportFormatError,
    ImportTargetError,
    InvalidImportSessionIdError,
    TranscriptFormat,
    TranscriptSourceError,
    default_events_path,
    import_transcript,
)
from persistence.importers.common import normalize_timestamp
from tests.unit.persistence.importers.helpers import FIXTURES, flat, run_import

SECRET = "sk-secret-memory-text"

_TS = '"timestamp":"2026-01-01T00:00:00Z"'
GOOD_FIRST_LINE: dict[TranscriptFormat, str] = {
    "pi": '{"type":"message",' + _TS + ',"message":{"role":"user","content":"hi"}}',
    "claude-code": '{"type":"user",' + _TS + ',"message":{"role":"user","content":"hi"}}',
    "codex": "{" + _TS + ',"type":"event_msg","payload":{"type":"user_message","message":"hi"}}',
}

# A known record missing the structure its format needs (line 3 of each file).
BAD_STRUCTURE: dict[TranscriptFormat, str] = {
    "pi": '{"type":"message","message":{"role":"toolResult","content":[],"toolCallId":7,"note":"'
    + SECRET
    + '"}}',
    "claude-code": '{"type":"assistant","message":{"content":{"text":"' + SECRET + '"}}}',
    "codex": '{"type":"response_item","payload":{"type":"function_call","name":"' + SECRET + '"}}',
}


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("transcript_format", ["pi", "claude-code", "codex"])
@pytest.mark.parametrize("bad_line", ["{not json " + SECRET, "[1, 2]", "structure"])
def test_malformed_line_names_file_and_line_and_leaves_no_output(
    tmp_path: Path, transcript_format: TranscriptFormat, bad_line: str
) -> None:
    line = BAD_STRUCTURE[transcript_format] if bad_line == "structure" else bad_line
    source = _write(tmp_path / "t.jsonl", [GOOD_FIRST_LINE[transcript_format], "", line])
    out = tmp_path / "out" / "events.jsonl"

    with pytest.raises(ImportFormatError) as caught:
        import_transcript(transcript_format, source, "7", out)

    assert caught.value.line_no == 3  # blank lines count
    assert caught.value.path == str(source)
    assert "line 3" in str(caught.value) and str(source) in str(caught.value)
    assert SECRET not in str(caught.value)
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # the temp file is gone too


def test_failed_import_keeps_an_existing_file_untouched(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    out.write_text("previous\n", encoding="utf-8")
    source = _write(tmp_path / "t.jsonl", [GOOD_FIRST_LINE["pi"], "{bad"])
    with pytest.raises(ImportFormatError):
        import_transcript("pi", source, "7", out, overwrite=True)
    assert out.read_text(encoding="utf-8") == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["events.jsonl", "t.jsonl"]


def test_existing_output_is_refused_unless_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    out.write_text("previous\n", encoding="utf-8")
    source = FIXTURES / "pi-session.jsonl"
    with pytest.raises(ImportTargetError):
        import_transcript("pi", source, "7", out)
    assert out.read_text(encoding="utf-8") == "previous\n"
    summary = import_transcript("pi", source, "7", out, overwrite=True)
    assert summary.events == len(out.read_text(encoding="utf-8").splitlines())


def test_missing_source_is_a_typed_error(tmp_path: Path) -> None:
    with pytest.raises(TranscriptSourceError):
        import_transcript("codex", tmp_path / "absent.jsonl", "7", tmp_path / "events.jsonl")
    assert not (tmp_path / "events.jsonl").exists()


@pytest.mark.parametrize("session_id", ["", "../x", "a/b", "..", "x" * 129, "has space"])
def test_unsafe_session_ids_are_rejected(tmp_path: Path, session_id: str) -> None:
    with pytest.raises(InvalidImportSessionIdError):
        import_transcript("pi", FIXTURES / "pi-session.jsonl", session_id, tmp_path / "events.jsonl")
    assert not (tmp_path / "events.jsonl").exists()


def test_numeric_looking_session_id_stays_a_string_and_default_path(tmp_path: Path) -> None:
    _, events = run_import("pi", FIXTURES / "pi-session.jsonl", tmp_path, session_id="0012")
    raw = json.loads((tmp_path / "session" / "events.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert raw["run_id"] == "0012" and events[0].run_id == "0012"
    expected = tmp_path / ".hatfield" / "sessions" / "0012" / "events.jsonl"
    assert default_events_path("0012", tmp_path) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2025-11-20T23:33:50.805Z", "2025-11-20T23:33:50+00:00"),
        ("2025-11-20T23:33:50", "2025-11-20T23:33:50+00:00"),
        ("2025-11-21T01:33:50.999+02:00", "2025-11-20T23:33:50+00:00"),
        (1763681630791, "2025-11-20T23:33:50+00:00"),
        (1763681630, "2025-11-20T23:33:50+00:00"),
        ("yesterday", None),
        ("", None),
        (None, None),
        (True, None),
    ],
)
def test_timestamps_are_utc_seconds(value: object, expected: str | None) -> None:
    assert normalize_timestamp(value) == expected


def test_records_without_timestamp_repeat_the_previous_one(tmp_path: Path) -> None:
    source = _write(
        tmp_path / "t.jsonl",
        [
            '{"type":"message","timestamp":"2026-01-01T10:00:00Z","message":{"role":"user","content":"a"}}',
            '{"type":"message","message":{"role":"assistant","content":[{"type":"text","text":"b"}]}}',
        ],
    )
    _, events = run_import("pi", source, tmp_path)
    assert [e.ts for e in events] == ["2026-01-01T10:00:00+00:00"] * 3


def test_orphan_result_and_assistant_before_any_user_turn(tmp_path: Path) -> None:
    source = _write(
        tmp_path / "t.jsonl",
        [
            '{"type":"message","timestamp":"2026-01-01T10:00:00Z","message":{"role":"assistant",'
            '"content":[{"type":"text","text":"ready"}]}}',
            '{"type":"message","timestamp":"2026-01-01T10:00:01Z","message":{"role":"toolResult",'
            '"toolCallId":"nope","content":"x"}}',
        ],
    )
    _, events = run_import("pi", source, tmp_path)
    assert [flat(e) for e in events] == [
        (1, 0, "llm_step_completed", ("ready", [])),
        (2, 0, "tool_execution_end", ("nope", "tool", False, "x")),
        (3, 0, "agent_end", {"reason": "completed"}),
    ]


def test_big_lines_stream_through(tmp_path: Path) -> None:
    big = "y" * 3_000_000
    record = {
        "type": "message",
        "timestamp": "2026-01-01T00:00:00Z",
        "message": {"role": "user", "content": big},
    }
    source = _write(tmp_path / "t.jsonl", [json.dumps(record)] * 3)
    summary, events = run_import("pi", source, tmp_path)
    assert summary.turns == 3
    assert all(e.payload["text"] == big for e in events)


def test_progress_callback_sees_every_record(tmp_path: Path) -> None:
    seen: list[tuple[int, int]] = []
    import_transcript(
        "codex",
        FIXTURES / "codex-rollout.jsonl",
        "7",
        tmp_path / "events.jsonl",
        progress=lambda stats: seen.append((stats.records, stats.events)),
    )
    assert [records for records, _ in seen[:-1]] == list(range(1, 25))
    assert seen[-1] == (24, 12)  # the final call comes after the last turn is closed
