"""A small multi-turn coding session of omray's own making, in the ``events.jsonl`` envelope.

Used by ``omray demo`` and the integration tests: a user asks an agent to fix a date-parsing bug,
the agent reads files, runs failing tests, edits code, and the tests pass.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from protocol.events import AfterTurnCommit, EventSummary

SCHEMA_VERSION = "1.0"


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def _turns() -> list[list[tuple[str, dict[str, Any]]]]:
    def assistant(text: str | None, calls: list[dict[str, Any]] | None = None) -> tuple[str, dict[str, Any]]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        return ("llm_step_completed", {"assistant_message": message})

    def result(call_id: str, name: str, text: str, is_error: bool = False) -> tuple[str, dict[str, Any]]:
        return (
            "tool_execution_end",
            {
                "tool_result": {
                    "tool_call_id": call_id,
                    "result": {"tool_name": name, "content": [{"type": "text", "text": text}]},
                    "is_error": is_error,
                }
            },
        )

    def user(text: str) -> tuple[str, dict[str, Any]]:
        return ("agent_command_applied", {"text": text})

    end = ("agent_end", {"reason": "completed"})
    return [
        [
            user(
                "The invoice importer crashes on dates like 2026-03-07T10:00Z. Please fix parse_date in "
                "src/billing/dates.py and keep the public signature unchanged."
            ),
            assistant(
                "I'll read the parser first.", [_tool_call("c1", "read", {"path": "src/billing/dates.py"})]
            ),
            result(
                "c1",
                "read",
                "def parse_date(text: str) -> datetime:\n"
                "    return datetime.strptime(text, '%Y-%m-%dT%H:%M:%S%z')",
            ),
            assistant(
                "parse_date only accepts seconds and a numeric offset, so 'Z' and minute precision fail. "
                "I'll switch it to datetime.fromisoformat with a Z normalization."
            ),
            end,
        ],
        [
            user("Run the billing tests before changing anything."),
            assistant(None, [_tool_call("c2", "bash", {"command": "pytest tests/billing -q"})]),
            result(
                "c2",
                "bash",
                "FAILED tests/billing/test_dates.py::test_zulu_minutes - ValueError: time data "
                "'2026-03-07T10:00Z' does not match format\n1 failed, 41 passed in 0.82s",
                is_error=True,
            ),
            assistant("One test fails with the same ValueError the importer hits; 41 pass."),
            end,
        ],
        [
            user("Go ahead with fromisoformat. We are on Python 3.11, so no third-party date libraries."),
            assistant(
                "Editing src/billing/dates.py.",
                [
                    _tool_call(
                        "c3",
                        "edit",
                        {"path": "src/billing/dates.py", "old": "datetime.strptime", "new": "_parse_iso"},
                    )
                ],
            ),
            result("c3", "edit", "Applied 1 edit to src/billing/dates.py (lines 12-19)."),
            assistant(None, [_tool_call("c4", "bash", {"command": "pytest tests/billing -q"})]),
            result("c4", "bash", "42 passed in 0.79s"),
            assistant(
                "Completed: parse_date now accepts 'Z' and minute precision via datetime.fromisoformat; "
                "all 42 billing tests pass."
            ),
            end,
        ],
        [
            user("Also add a regression test for 2026-03-07T10:00Z and update CHANGELOG.md under 'Fixed'."),
            assistant(
                None,
                [
                    _tool_call(
                        "c5", "edit", {"path": "tests/billing/test_dates.py", "append": "test_zulu_minutes"}
                    ),
                    _tool_call("c6", "edit", {"path": "CHANGELOG.md", "section": "Fixed"}),
                ],
            ),
            result("c5", "edit", "Added test_zulu_minutes_regression to tests/billing/test_dates.py."),
            result("c6", "edit", "Added one line under '## Fixed' in CHANGELOG.md."),
            assistant("Added the regression test and the changelog entry."),
            end,
        ],
        [
            user("I prefer small commits with imperative messages. Commit this as one commit."),
            assistant(
                None,
                [_tool_call("c7", "bash", {"command": "git commit -am 'Accept Z and minutes in dates'"})],
            ),
            result(
                "c7",
                "bash",
                "[main 4f2a9c1] Accept Z and minutes in dates\n 3 files changed, 21 insertions(+)",
            ),
            assistant("Committed as 4f2a9c1: 'Accept Z and minutes in dates'."),
            end,
        ],
    ]


def demo_session(session_id: str, start: datetime | None = None) -> list[list[dict[str, Any]]]:
    """The session as turns of event envelopes (seq from 1, one minute apart)."""
    when = start or datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    seq = 0
    turns: list[list[dict[str, Any]]] = []
    for turn_no, turn in enumerate(_turns(), start=1):
        events = []
        for event_type, payload in turn:
            seq += 1
            when += timedelta(minutes=1)
            events.append(
                {
                    "schema_version": SCHEMA_VERSION,
                    "run_id": session_id,
                    "seq": seq,
                    "turn_no": turn_no,
                    "type": event_type,
                    "payload": payload,
                    "ts": when.replace(microsecond=0).isoformat(),
                }
            )
        turns.append(events)
    return turns


def event_line(event: dict[str, Any]) -> str:
    """One ``events.jsonl`` line."""
    return json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n"


def commit_turn(
    events_path: Path, turn: list[dict[str, Any]], *, session_end: bool = False
) -> AfterTurnCommit:
    """Append one turn's events to ``events_path``; return the after-turn context an agent then sends
    (``session_end`` on the session's last turn)."""
    events_path.parent.mkdir(parents=True, exist_ok=True)
    with events_path.open("a", encoding="utf-8") as handle:
        handle.writelines(event_line(event) for event in turn)
    return AfterTurnCommit(
        session_id=turn[0]["run_id"],
        turn_no=turn[0]["turn_no"],
        status="completed",
        events=tuple(EventSummary(seq=e["seq"], type=e["type"], payload=e["payload"]) for e in turn),
        session_end=session_end,
    )
