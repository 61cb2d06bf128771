"""Claude Code sessions: per-part records merged by message id, sidechains and meta records left out."""

from __future__ import annotations

from pathlib import Path

from tests.unit.importers.helpers import FIXTURES, assert_envelope, flat, run_import

END = {"reason": "completed"}


def test_claude_code_fixture_events_exactly(tmp_path: Path) -> None:
    summary, events = run_import("claude-code", FIXTURES / "claude-code-session.jsonl", tmp_path)

    assert_envelope(events)
    assert [flat(e) for e in events] == [
        (
            1,
            1,
            "agent_command_applied",
            "<command-message>review is running…</command-message>\n<command-name>/review</command-name>",
        ),
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
        "user(meta)": 1,
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
