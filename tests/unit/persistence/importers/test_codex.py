"""Codex rollouts: duplicate texts from response items and event messages written once."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.persistence.importers.helpers import FIXTURES, assert_envelope, flat, run_import

END = {"reason": "completed"}


def test_codex_fixture_events_exactly(tmp_path: Path) -> None:
    summary, events = run_import("codex", FIXTURES / "codex-rollout.jsonl", tmp_path)

    assert_envelope(events)
    assert [flat(e) for e in events] == [
        # Environment context and developer prompt are left out; the user text appears once.
        (1, 1, "agent_command_applied", "Add a --dry-run flag to kettle brew."),
        (2, 1, "llm_step_completed", ("", [("call_rg", "shell")])),
        (3, 1, "tool_execution_end", ("call_rg", "shell", False, "kettle/cli.py:42:def brew(args):\n")),
        (4, 1, "llm_step_completed", ("", [("call_patch", "apply_patch")])),
        (
            5,
            1,
            "tool_execution_end",
            ("call_patch", "apply_patch", False, "Success. Updated the following files:\nM kettle/cli.py\n"),
        ),
        # event_msg first, response_item twin dropped.
        (6, 1, "llm_step_completed", ("Added `--dry-run`; brew now prints the plan without heating.", [])),
        (7, 1, "agent_end", END),
        # event_msg first this time for the user text.
        (8, 2, "agent_command_applied", "Now run the tests."),
        (9, 2, "llm_step_completed", ("", [("call_pytest", "shell")])),
        (10, 2, "tool_execution_end", ("call_pytest", "shell", True, "1 failed, 12 passed\n")),
        # response_item first, event_msg twin dropped.
        (11, 2, "llm_step_completed", ("One test fails: test_brew_heats expects the heater to run.", [])),
        (12, 2, "agent_end", END),
    ]
    first_call = events[1].payload["assistant_message"]["tool_calls"][0]
    assert first_call["arguments"] == {
        "command": ["bash", "-lc", "rg -n 'def brew' kettle"],
        "workdir": "/home/dev/kettle",
    }
    patch_call = events[3].payload["assistant_message"]["tool_calls"][0]
    assert patch_call["arguments"]["input"].startswith("*** Begin Patch")
    assert summary.turns == 2
    assert summary.skipped == {"response_item:local_shell_call": 1, "x-future-record": 1}
    assert summary.ignored["response_item:message(context)"] == 1
    assert summary.ignored["response_item:reasoning"] == 1
    assert summary.ignored["event_msg:token_count"] == 2


def _rollout(tmp_path: Path, records: list[tuple[str, dict[str, object]]]) -> Path:
    path = tmp_path / "rollout.jsonl"
    lines = [
        json.dumps({"timestamp": f"2026-01-01T00:00:{i:02d}Z", "type": kind, "payload": payload})
        for i, (kind, payload) in enumerate(records)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _user_item(text: str) -> tuple[str, dict[str, object]]:
    return (
        "response_item",
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]},
    )


def _user_event(text: str) -> tuple[str, dict[str, object]]:
    return ("event_msg", {"type": "user_message", "message": text})


def _agent_event(text: str) -> tuple[str, dict[str, object]]:
    return ("event_msg", {"type": "agent_message", "message": text})


def test_repeated_text_from_one_source_is_kept_and_event_only_rollouts_work(tmp_path: Path) -> None:
    source = _rollout(
        tmp_path,
        [
            _user_event("again"),
            _agent_event("hi"),
            _user_event("again"),
            _agent_event("hi"),
            _agent_event("hi"),
        ],
    )
    _, events = run_import("codex", source, tmp_path)
    assert [flat(e) for e in events] == [
        (1, 1, "agent_command_applied", "again"),
        (2, 1, "llm_step_completed", ("hi", [])),
        (3, 1, "agent_end", END),
        (4, 2, "agent_command_applied", "again"),
        (5, 2, "llm_step_completed", ("hi\nhi", [])),  # consecutive assistant texts form one step
        (6, 2, "agent_end", END),
    ]


def test_a_twin_is_matched_only_within_its_turn(tmp_path: Path) -> None:
    source = _rollout(tmp_path, [_user_item("a"), _agent_event("same"), _user_item("b"), _user_event("a")])
    _, events = run_import("codex", source, tmp_path)
    # "a" from event_msg arrives after a new turn began: it is a new user turn, not a duplicate.
    assert [flat(e)[2:] for e in events] == [
        ("agent_command_applied", "a"),
        ("llm_step_completed", ("same", [])),
        ("agent_end", END),
        ("agent_command_applied", "b"),
        ("agent_command_applied", "a"),
    ]


def test_older_output_objects_and_plain_text_outputs(tmp_path: Path) -> None:
    call: dict[str, object] = {
        "type": "function_call",
        "name": "shell",
        "arguments": "not json",
        "call_id": "c1",
    }
    source = _rollout(
        tmp_path,
        [
            _user_item("go"),
            ("response_item", call),
            (
                "response_item",
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": {"content": "boom", "success": False},
                },
            ),
            ("response_item", {**call, "call_id": "c2"}),
            ("response_item", {"type": "function_call_output", "call_id": "c2", "output": "plain text"}),
        ],
    )
    _, events = run_import("codex", source, tmp_path)
    assert events[1].payload["assistant_message"]["tool_calls"][0]["arguments"] == "not json"
    assert flat(events[2])[3] == ("c1", "shell", True, "boom")
    assert flat(events[4])[3] == ("c2", "shell", False, "plain text")
