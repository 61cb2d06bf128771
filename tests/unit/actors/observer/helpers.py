"""Event factories and a deterministic token counter for the observer unit tests."""

from __future__ import annotations

from typing import Any

from protocol.events import SessionEvent

RUN = "run-1"
NOW = "2026-07-23 09:15"
TS = "2026-07-23T10:20:30+00:00"
TS_SHOWN = "2026-07-23 10:20"


def simple_count(text: str) -> int:
    """Deterministic, subadditive stand-in for a tokenizer: about four characters per token."""
    return len(text) // 4 + 1


def event(
    seq: int, event_type: str, payload: dict[str, Any], ts: str = TS, session_id: str = RUN
) -> SessionEvent:
    return SessionEvent(
        schema_version="1.0", run_id=session_id, seq=seq, turn_no=1, type=event_type, payload=payload, ts=ts
    )


def tool_call_step(seq: int, call_id: str, name: str = "bash", text: str = "running it") -> SessionEvent:
    return event(
        seq,
        "llm_step_completed",
        {
            "assistant_message": {
                "role": "assistant",
                "content": text,
                "tool_calls": [{"id": call_id, "name": name, "arguments": {"cmd": "ls"}}],
            }
        },
    )


def tool_result(seq: int, call_id: str, text: str = "file.txt", name: str = "bash") -> SessionEvent:
    return event(
        seq,
        "tool_execution_end",
        {
            "tool_result": {
                "tool_call_id": call_id,
                "result": {"tool_name": name, "content": [{"type": "text", "text": text}]},
                "is_error": False,
            }
        },
    )
