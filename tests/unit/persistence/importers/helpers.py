"""Shared helpers of the importer tests: run an import and flatten its events for exact comparison."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from persistence.files.events_reader import iter_events
from persistence.importers import ImportSummary, TranscriptFormat, import_transcript
from protocol.events import SessionEvent

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "transcripts"
"""The project's own small transcripts, one per format."""

REAL_TRANSCRIPTS = Path(__file__).resolve().parents[5] / "shared" / "data" / "transcripts"
"""Third-party transcripts shared next to the repository (may be absent)."""


def run_import(
    transcript_format: TranscriptFormat, source: Path, tmp_path: Path, session_id: str = "42"
) -> tuple[ImportSummary, list[SessionEvent]]:
    """Import ``source`` into ``tmp_path`` and read the events back with the real reader."""
    out = tmp_path / "session" / "events.jsonl"
    summary = import_transcript(transcript_format, source, session_id, out)
    return summary, list(iter_events(out))


def flat(event: SessionEvent) -> tuple[Any, ...]:
    """``(seq, turn_no, type, details)`` with the payload fields each type carries, for exact asserts."""
    payload = event.payload
    details: Any
    if event.type == "agent_command_applied":
        details = payload["text"]
    elif event.type == "llm_step_completed":
        message = payload["assistant_message"]
        assert message["role"] == "assistant"
        details = (message["content"], [(c["id"], c["name"]) for c in message["tool_calls"]])
    elif event.type == "tool_execution_end":
        result = payload["tool_result"]
        content = result["result"]["content"]
        assert [part["type"] for part in content] == ["text"]
        details = (
            result["tool_call_id"],
            result["result"]["tool_name"],
            result["is_error"],
            content[0]["text"],
        )
    else:
        details = payload
    return (event.seq, event.turn_no, event.type, details)


def assert_envelope(events: list[SessionEvent], session_id: str = "42") -> None:
    """Seqs 1..n without holes, one run id, schema 1.0, UTC second-precision timestamps."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for event in events:
        assert event.run_id == session_id
        assert event.schema_version == "1.0"
        assert len(event.ts) == 25 and event.ts.endswith("+00:00") and event.ts[10] == "T"
