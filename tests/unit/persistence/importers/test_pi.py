"""pi sessions: user turns, merged-per-message assistant steps, tool results, bash runs, turn ends."""

from __future__ import annotations

from pathlib import Path

from tests.unit.persistence.importers.helpers import FIXTURES, assert_envelope, flat, run_import

END = {"reason": "completed"}


def test_pi_fixture_events_exactly(tmp_path: Path) -> None:
    summary, events = run_import("pi", FIXTURES / "pi-session.jsonl", tmp_path)

    assert_envelope(events)
    assert [flat(e)[:3] for e in events] == [
        (1, 1, "agent_command_applied"),
        (2, 1, "llm_step_completed"),
        (3, 1, "tool_execution_end"),
        (4, 1, "tool_execution_end"),
        (5, 1, "llm_step_completed"),
        (6, 1, "agent_end"),
        (7, 2, "agent_command_applied"),
        (8, 2, "llm_step_completed"),
        (9, 2, "tool_execution_end"),
        (10, 2, "llm_step_completed"),
        (11, 2, "tool_execution_end"),
        (12, 2, "agent_end"),
        (13, 3, "agent_command_applied"),  # no answer yet: no agent_end for turn 3
    ]
    details = {e.seq: flat(e)[3] for e in events}
    assert details[1] == "The kettle CLI crashes on an empty config file. Find out why."
    # Thinking is left out; text and both tool calls stay in one step.
    assert details[2] == (
        "Let me look at the config loader and its test.",
        [("call_read_1", "read"), ("call_grep_2", "bash")],
    )
    assert details[3] == ("call_grep_2", "bash", True, "grep: tests/: No such file or directory")
    assert details[4][:3] == ("call_read_1", "read", False)
    assert details[7] == "Fix it and default to an empty mapping."  # content given as parts
    assert details[8] == ("", [("call_edit_3", "edit")])  # the aborted empty reply wrote nothing
    assert details[11] == (
        "",
        "bash",
        False,
        "$ python -m kettle --config empty.yaml\nkettle: nothing to brew\n",
    )
    assert details[6] == details[12] == END

    assert events[0].ts == "2026-03-02T09:00:05+00:00"
    assert events[5].ts == "2026-03-02T09:00:14+00:00"  # agent_end at the turn's last activity
    step = events[1].payload["assistant_message"]
    assert step["tool_calls"][0]["arguments"] == {"path": "kettle/config.py"}

    assert summary.events == summary.last_seq == 13
    assert summary.turns == 3
    assert summary.records == 17
    assert summary.skipped == {"custom_entry": 1}
    assert summary.ignored == {
        "compaction": 1,
        "message:assistant(empty)": 1,
        "model_change": 1,
        "session": 1,
        "thinking_level_change": 1,
    }
