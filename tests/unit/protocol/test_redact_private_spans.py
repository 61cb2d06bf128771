"""A ``<private>`` span split across user messages (issue 40 item 7): what a user expects hidden.

An unclosed ``<private>`` hides the rest of its message and every later user message of the session
until one closes it; a message that starts inside the span is hidden up to its ``</private>``.
Assistant and tool events are not the user's words and are read as before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from persistence.files.events_reader import iter_events, read_event_window
from protocol.redact import DEFAULT_REDACTOR, scan_private
from protocol.source_text import event_search_text


@pytest.mark.parametrize(
    ("text", "depth", "expected", "depth_after"),
    [
        # masked
        ("keep <private>hide", 0, "keep [private]", 1),
        ("hide</private> keep", 1, "[private] keep", 0),
        ("hide all of it", 1, "[private]", 1),
        ("hide <private>deeper</private> still</private> keep", 1, "[private] keep", 0),
        ("hide</private> keep <private>hide again", 1, "[private] keep [private]", 1),
        ("stray hide</private> keep", 0, "[private] keep", 0),
        ("a <private>x</private> b </private> c", 0, "[private] c", 0),
        ("closed</private> keep", 2, "[private]", 1),
        # left alone
        ("nothing private here", 0, "nothing private here", 0),
        ("a <private>x</private> b", 0, "a [private] b", 0),
        ("a <privately> b", 0, "a <privately> b", 0),
    ],
)
def test_scan_private_carries_the_span_depth(text: str, depth: int, expected: str, depth_after: int) -> None:
    assert scan_private(text, depth) == (expected, depth_after)


def _write(path: Path, events: list[tuple[str, str]]) -> None:
    lines = []
    for seq, (role, text) in enumerate(events, start=1):
        if role == "user":
            kind, payload = "agent_command_applied", {"text": text}
        elif role == "user-message":
            kind, payload = (
                "agent_command_applied",
                {"message": {"role": "user", "content": [{"type": "text", "text": text}]}},
            )
        else:
            kind = "llm_step_completed"
            payload = {"assistant_message": {"role": "assistant", "content": text, "tool_calls": []}}
        lines.append(
            json.dumps(
                {
                    "schema_version": "1.0",
                    "run_id": "s",
                    "seq": seq,
                    "turn_no": seq,
                    "type": kind,
                    "payload": payload,
                    "ts": "2026-07-26T12:00:00+00:00",
                }
            )
        )
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


CASES = [
    pytest.param(
        [("user", "plan: <private>HIDE-1"), ("assistant", "noted"), ("user", "HIDE-2</private> keep-2")],
        ["plan: [private]", "noted", "[private] keep-2"],
        id="open-in-one-close-in-the-next",
    ),
    pytest.param(
        [
            ("user", "<private>HIDE-1"),
            ("user", "HIDE-2 HIDE-3"),
            ("user-message", "HIDE-4</private> keep-4"),
            ("user", "keep-5"),
        ],
        ["[private]", "[private]", "[private] keep-4", "keep-5"],
        id="a-message-in-between-and-a-content-part",
    ),
    pytest.param(
        [("user", "a <private>HIDE</private> keep-1"), ("user", "keep-2"), ("assistant", "keep-3")],
        ["a [private] keep-1", "keep-2", "keep-3"],
        id="closed-span-does-not-carry",
    ),
    pytest.param(
        [
            ("user", "keep-1 <private>HIDE-1"),
            ("assistant", "keep <private> words"),
            ("user", "HIDE-2</private>"),
        ],
        ["keep-1 [private]", "keep [private]", "[private]"],
        id="assistant-tags-do-not-open-or-close-the-user-span",
    ),
]


@pytest.mark.parametrize(("events", "expected"), CASES)
def test_a_span_split_across_user_messages_is_hidden(
    tmp_path: Path, events: list[tuple[str, str]], expected: list[str]
) -> None:
    path = tmp_path / "events.jsonl"
    _write(path, events)
    texts = [event_search_text(event).split(": ", 1)[1] for event in iter_events(path)]
    assert texts == expected
    for start in range(1, len(events) + 1):
        # a range read (an observe part, recall) from anywhere knows the span earlier messages left open
        window = read_event_window(path, start, len(events))
        assert [event_search_text(e).split(": ", 1)[1] for e in window.events] == expected[start - 1 :]
    assert "HIDE" in path.read_text(encoding="utf-8")  # the events file itself is never rewritten


def test_a_user_turn_payload_is_not_changed_in_place() -> None:
    payload = {"message": {"role": "user", "content": [{"type": "text", "text": "x</private> y"}]}}
    before = json.dumps(payload)
    redacted, depth = DEFAULT_REDACTOR.user_turn_payload(payload, 1)
    assert json.dumps(payload) == before and depth == 0
    assert redacted["message"]["content"][0]["text"] == "[private] y"
    assert redacted["message"]["role"] == "user"
