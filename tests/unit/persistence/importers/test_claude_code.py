"""Claude Code sessions: per-part records merged by message id, sidechains and meta records left out."""

from __future__ import annotations

import json
from pathlib import Path

from tests.unit.persistence.importers.helpers import FIXTURES, assert_envelope, flat, run_import

END = {"reason": "completed"}


def test_claude_code_fixture_events_exactly(tmp_path: Path) -> None:
    summary, events = run_import("claude-code", FIXTURES / "claude-code-session.jsonl", tmp_path)

    assert_envelope(events)
    assert [flat(e) for e in events] == [
        # The slash command opens the turn, with the prompt it expanded to (a meta record).
        (1, 1, "agent_command_applied", "/review\n\nReview the staged changes and list any risks."),
        # Three records of message msg_A (thinking, text, two tool_use) make one step.
        (
            2,
            1,
            "llm_step_completed",
            ("I'll start with the staged diff.", [("toolu_diff", "Bash"), ("toolu_task", "Task")]),
        ),
        (
            3,
            1,
            "tool_execution_end",
            (
                "toolu_diff",
                "Bash",
                False,
                "diff --git a/kettle/config.py b/kettle/config.py\n-    return data['kettle']\n"
                "+    return (data or {}).get('kettle', {})",
            ),
        ),
        # The sub-agent's own records are skipped; its answer arrives as the Task result.
        (
            4,
            1,
            "tool_execution_end",
            ("toolu_task", "Task", False, "Only tests/test_config.py touches config."),
        ),
        (
            5,
            1,
            "llm_step_completed",
            ("One risk: `.get('kettle', {})` hides a misspelled top-level key.", []),
        ),
        (6, 1, "agent_end", END),
        (7, 2, "agent_command_applied", "Run the tests."),
        (8, 2, "llm_step_completed", ("", [("toolu_pytest", "Bash")])),
        (9, 2, "tool_execution_end", ("toolu_pytest", "Bash", True, "1 failed, 11 passed")),
        (10, 2, "llm_step_completed", ("test_missing_key fails: it expects a KeyError.", [])),
        (11, 2, "agent_end", END),
    ]
    assert events[1].ts == "2026-03-03T14:00:03+00:00"  # the step keeps its first record's time
    assert events[1].payload["assistant_message"]["tool_calls"][0]["arguments"] == {
        "command": "git diff --staged",
        "description": "Show staged diff",
    }
    assert summary.turns == 2
    assert summary.skipped == {"x-future-record": 1}
    assert summary.ignored == {
        "assistant(no text)": 1,
        "assistant(sidechain)": 1,
        "summary": 1,
        "system": 1,
        "user(sidechain)": 1,
    }


def test_interleaved_results_split_a_message_and_user_text_next_to_results_opens_a_turn(
    tmp_path: Path,
) -> None:
    lines = [
        '{"type":"user","timestamp":"2026-01-01T00:00:00Z","message":{"role":"user","content":"go"}}',
        '{"type":"assistant","timestamp":"2026-01-01T00:00:01Z","message":{"id":"m1","role":"assistant",'
        '"content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}',
        '{"type":"user","timestamp":"2026-01-01T00:00:02Z","message":{"role":"user",'
        '"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"image"},'
        '{"type":"text","text":"ok"}]}]}}',
        '{"type":"assistant","timestamp":"2026-01-01T00:00:03Z","message":{"id":"m1","role":"assistant",'
        '"content":[{"type":"tool_use","id":"t2","name":"Grep","input":{}}]}}',
        '{"type":"user","timestamp":"2026-01-01T00:00:04Z","message":{"role":"user",'
        '"content":[{"type":"tool_result","tool_use_id":"t2","content":"none"},{"type":"text","text":"stop"}]}}',
    ]
    source = tmp_path / "cc.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _, events = run_import("claude-code", source, tmp_path)
    assert [flat(e) for e in events] == [
        (1, 1, "agent_command_applied", "go"),
        (2, 1, "llm_step_completed", ("", [("t1", "Read")])),
        (3, 1, "tool_execution_end", ("t1", "Read", False, "ok")),
        (4, 1, "llm_step_completed", ("", [("t2", "Grep")])),
        (5, 1, "tool_execution_end", ("t2", "Grep", False, "none")),
        (6, 1, "agent_end", END),
        (7, 2, "agent_command_applied", "stop"),
    ]


def _record(kind: str, content: object, ts: int, **extra: object) -> str:
    message: dict[str, object] = {"role": kind, "content": content}
    if kind == "assistant":
        message["id"] = extra.pop("message_id", f"m{ts}")
        message["model"] = extra.pop("model", "claude-sonnet-4-5")
    return json.dumps({"type": kind, "timestamp": f"2026-01-01T00:00:{ts:02d}Z", "message": message, **extra})


def test_claude_codes_own_blocks_are_not_conversation(tmp_path: Path) -> None:
    # Records as Claude Code 2.1 writes them around `/compact`, `/model`, an interrupted request and
    # a prompt command given arguments.
    lines = [
        _record("user", "first prompt", 0),
        _record("assistant", [{"type": "text", "text": "first answer"}], 1),
        json.dumps({"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"}),
        _record("user", "This session is being continued ...", 2, isCompactSummary=True),
        _record("user", "<local-command-caveat>Caveat: ...</local-command-caveat>", 3, isMeta=True),
        _record(
            "user",
            "<command-name>/compact</command-name>\n  <command-message>compact</command-message>\n"
            "  <command-args></command-args>",
            4,
        ),
        _record("user", "<local-command-stdout>Compacted (ctrl+o to see more)</local-command-stdout>", 5),
        _record("user", [{"type": "text", "text": "Continue from where you left off."}], 6, isMeta=True),
        _record("assistant", [{"type": "text", "text": "No response requested."}], 7, model="<synthetic>"),
        _record("user", "<command-name>/model</command-name><command-args>haiku</command-args>", 8),
        _record(
            "user",
            "<local-command-stdout>Set model to haiku</local-command-stdout>"
            "<local-command-stderr></local-command-stderr>",
            9,
        ),
        _record("user", "second prompt", 10),
        _record("user", [{"type": "text", "text": "[Request interrupted by user]"}], 11),
        _record("assistant", [{"type": "text", "text": "API Error: 500"}], 12, isApiErrorMessage=True),
        _record("user", "<command-name>/review</command-name><command-args>PR 7</command-args>", 13),
        _record("assistant", [{"type": "text", "text": "review of PR 7"}], 14),
    ]
    source = tmp_path / "cc.jsonl"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary, events = run_import("claude-code", source, tmp_path)
    assert [flat(e) for e in events] == [
        (1, 1, "agent_command_applied", "first prompt"),
        (2, 1, "llm_step_completed", ("first answer", [])),
        (3, 1, "agent_end", END),
        (4, 2, "agent_command_applied", "second prompt"),
        (5, 3, "agent_command_applied", "/review PR 7"),
        (6, 3, "llm_step_completed", ("review of PR 7", [])),
        (7, 3, "agent_end", END),
    ]
    assert summary.ignored == {
        "assistant(synthetic)": 2,
        "system": 1,
        "user(compact_summary)": 1,
        "user(interrupted)": 1,
        "user(local_command)": 4,
        "user(meta)": 2,
    }
