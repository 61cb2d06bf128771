"""Every real pi and Claude Code transcript in ../shared/data/transcripts converts and reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from persistence.importers import TranscriptFormat
from tests.unit.persistence.importers.helpers import REAL_TRANSCRIPTS, assert_envelope, run_import

_GLOBS: dict[TranscriptFormat, str] = {"pi": "pi-mono/*.jsonl", "claude-code": "claude-code/**/*.jsonl"}


def _cases() -> list[tuple[TranscriptFormat, Path]]:
    return [(fmt, path) for fmt, pattern in _GLOBS.items() for path in sorted(REAL_TRANSCRIPTS.glob(pattern))]


@pytest.mark.skipif(
    not REAL_TRANSCRIPTS.is_dir(), reason=f"shared transcripts folder {str(REAL_TRANSCRIPTS)!r} is absent"
)
def test_both_formats_have_real_transcripts() -> None:
    found = {fmt for fmt, _ in _cases()}
    assert found == {"pi", "claude-code"}


@pytest.mark.skipif(
    not REAL_TRANSCRIPTS.is_dir(), reason=f"shared transcripts folder {str(REAL_TRANSCRIPTS)!r} is absent"
)
@pytest.mark.parametrize(
    ("transcript_format", "source"), _cases(), ids=lambda value: getattr(value, "name", value)
)
def test_real_transcript_converts_and_reads_back(
    tmp_path: Path, transcript_format: TranscriptFormat, source: Path
) -> None:
    summary, events = run_import(transcript_format, source, tmp_path)

    assert_envelope(events)
    assert summary.events == summary.last_seq == len(events) > 0
    assert summary.turns >= 1 and summary.skipped == {}
    turn_nos = [e.turn_no for e in events]
    assert turn_nos == sorted(turn_nos)
    # Each turn that got an answer ends with exactly one agent_end, its last event.
    for turn in set(turn_nos):
        in_turn = [e for e in events if e.turn_no == turn]
        ends = [e for e in in_turn if e.type == "agent_end"]
        answered = any(e.type == "llm_step_completed" for e in in_turn)
        assert len(ends) == (1 if answered else 0)
        if ends:
            assert in_turn[-1] is ends[0]
    # Every tool result's call was written earlier in the file.
    call_ids: set[str] = set()
    for event in events:
        if event.type == "llm_step_completed":
            call_ids.update(c["id"] for c in event.payload["assistant_message"]["tool_calls"])
        elif event.type == "tool_execution_end" and event.payload["tool_result"]["tool_call_id"]:
            assert event.payload["tool_result"]["tool_call_id"] in call_ids
