"""The agent-turn breakdown from Claude Code's debug and diagnostics files (``bench.agent_turn_parse``)."""

from __future__ import annotations

import json

import pytest

from bench.agent_mock import anthropic_stream, responses_stream, stream_events
from bench.agent_turn import CONFIGS, rotated
from bench.agent_turn_parse import TurnPhases, debug_lines, median_phases, turn_phases

# Lines as Claude Code 2.1.197 writes them with CLAUDE_CODE_DEBUG_LOG_LEVEL=verbose (the project's
# paths replaced), a "both" turn: SessionStart hook, MCP server, the request, Stop, SessionEnd.
DEBUG = """\
2026-12-03T20:23:53.900Z [DEBUG] MDM settings load completed in 1ms
2026-12-03T20:23:54.026Z [DEBUG] [MCP] --mcp-config servers running fully async (nonblocking)
2026-12-03T20:23:54.046Z [VERBOSE] Getting matching hook commands for SessionStart with query: startup
2026-12-03T20:23:54.058Z [WARN] [3P telemetry] Event dropped (no event logger): hook_execution_start
2026-12-03T20:23:54.205Z [DEBUG] MCP server "omray": Starting connection with timeout of 30000ms
2026-12-03T20:23:54.258Z [DEBUG] Hook output does not start with {, treating as plain text
2026-12-03T20:23:54.288Z [DEBUG] MCP server "omray": Successfully connected (transport: stdio) in 86ms
2026-12-03T20:23:54.288Z [DEBUG] MCP server "omray": Connection established with capabilities: {"tools":1}
2026-12-03T20:23:54.288Z [DEBUG] [MCP] Server "omray" connected with subscribe=false
2026-12-03T20:23:54.289Z [WARN] [3P telemetry] Event dropped (no event logger): mcp_server_connection
2026-12-03T20:23:54.332Z [DEBUG] Failed to stat directory /p/output-styles: ENOENT
2026-12-03T20:23:54.366Z [DEBUG] [API REQUEST] /v1/messages source=sdk
2026-12-03T20:23:54.374Z [DEBUG] Stream started - received first chunk
2026-12-03T20:23:54.385Z [VERBOSE] Getting matching hook commands for Stop with query: undefined
2026-12-03T20:23:54.386Z [VERBOSE] Matched 1 unique hooks for query "no match query" (1 before deduplication)
2026-12-03T20:23:54.500Z [DEBUG] Hook output does not start with {, treating as plain text
2026-12-03T20:23:54.503Z [DEBUG] MCP server "omray": Sending SIGINT to MCP server process
2026-12-03T20:23:54.505Z [DEBUG] MCP server "omray": UNKNOWN connection closed after 0s (cleanly)
2026-12-03T20:23:54.556Z [DEBUG] MCP server "omray": MCP server process exited cleanly
2026-12-03T20:23:54.559Z [VERBOSE] Getting matching hook commands for SessionEnd with query: other
2026-12-03T20:23:54.660Z [DEBUG] SessionEnd:other [/venv/bin/omray hook claude-code] completed with status 0
2026-12-03T20:23:54.660Z [DEBUG] Hook output does not start with {, treating as plain text
"""
DIAGNOSTICS = "\n".join(
    json.dumps({"timestamp": stamp, "level": "info", "event": event, "data": data})
    for stamp, event, data in [
        ("2026-12-03T20:23:53.901Z", "init_started", {}),
        ("2026-12-03T20:23:54.126Z", "hook_spawn_started", {"hook_event_name": "SessionStart", "index": 0}),
        (
            "2026-12-03T20:23:54.257Z",
            "hook_spawn_completed",
            {"hook_event_name": "SessionStart", "index": 0, "duration_ms": 194, "exit_code": 0},
        ),
        ("2026-12-03T20:23:54.565Z", "hook_spawn_started", {"hook_event_name": "SessionEnd", "index": 0}),
        (
            "2026-12-03T20:23:54.660Z",
            "hook_spawn_completed",
            {"hook_event_name": "SessionEnd", "index": 0, "duration_ms": 100, "exit_code": 0},
        ),
    ]
)


def test_a_turn_with_hooks_and_mcp_is_broken_down_into_its_phases() -> None:
    phases = turn_phases(DEBUG, DIAGNOSTICS)
    assert phases.to_request_ms == pytest.approx(466.0)
    assert phases.after_response_ms == pytest.approx(286.0)
    # Spawn to end, not Claude Code's duration_ms (which holds its own work before the spawn).
    assert phases.session_start_hook_ms == pytest.approx(131.0)
    assert phases.session_end_hook_ms == pytest.approx(95.0)
    assert phases.stop_hook_ms == pytest.approx(115.0)
    assert phases.mcp_connect_ms == 86.0
    # From "connected" to the next line that is not about the connection (the tool list is in).
    assert phases.mcp_listed_ms == pytest.approx(44.0)
    assert phases.mcp_stop_ms == pytest.approx(53.0)


def test_a_bare_turn_has_only_its_request_and_end() -> None:
    bare = "\n".join(
        line
        for line in DEBUG.splitlines()
        if "MDM" in line or "API REQUEST" in line or "first chunk" in line or "Failed to stat" in line
    )
    phases = turn_phases(bare, "")
    assert phases.to_request_ms == pytest.approx(466.0)
    assert phases.after_response_ms == pytest.approx(0.0)
    assert phases.session_start_hook_ms is None and phases.stop_hook_ms is None
    assert phases.mcp_connect_ms is None and phases.mcp_stop_ms is None


def test_missing_or_foreign_logs_give_no_figures_rather_than_wrong_ones() -> None:
    assert turn_phases("", "") == TurnPhases()
    assert turn_phases("not a log\n  continuation\n", "not json\n{}\n") == TurnPhases()
    # A Stop hook whose output line never came, a SIGINT with no exit seen: no figure.
    cut = DEBUG.split("2026-12-03T20:23:54.500Z", 1)[0]
    phases = turn_phases(cut, DIAGNOSTICS.split("\n")[1])  # a spawn with no completion
    assert phases.stop_hook_ms is None and phases.mcp_stop_ms is None
    assert phases.session_start_hook_ms is None


def test_continuation_lines_are_dropped_and_times_are_milliseconds() -> None:
    lines = debug_lines(
        "2026-12-03T20:23:54.000Z [DEBUG] one\nsecond line\n2026-12-03T20:23:54.250Z [DEBUG] two\n"
    )
    assert [message for _, message in lines] == ["one", "two"]
    assert lines[1][0] - lines[0][0] == pytest.approx(250.0)


def test_medians_skip_turns_that_did_not_see_a_phase() -> None:
    turns = [
        TurnPhases(to_request_ms=v, stop_hook_ms=s) for v, s in [(300.0, None), (100.0, 40.0), (200.0, 20.0)]
    ]
    medians = median_phases(TurnPhases, turns)
    assert medians["to_request_ms"] == 200.0
    assert medians["stop_hook_ms"] == 20.0  # nearest rank: the lower middle of two
    assert medians["mcp_stop_ms"] is None


def test_every_configuration_leads_a_round_equally_often() -> None:
    rounds = range(2 * len(CONFIGS))
    leaders = [rotated(round_no)[0] for round_no in rounds]
    assert sorted(leaders) == sorted(CONFIGS * 2)
    assert all(sorted(rotated(round_no)) == sorted(CONFIGS) for round_no in rounds)


def test_the_mock_streams_what_the_clients_read() -> None:
    events = list(stream_events(anthropic_stream("m")))
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    assert "".join(d["delta"]["text"] for n, d in events if n == "content_block_delta") == "Done."
    assert any(d.get("delta", {}).get("stop_reason") == "end_turn" for _, d in events)
    responses = list(stream_events(responses_stream("m")))
    assert responses[-1][0] == "response.completed"
    assert responses[-1][1]["response"]["output"][0]["content"][0]["text"] == "Done."
