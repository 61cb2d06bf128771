"""``claude-code/<model>`` end to end: the REAL ``claude`` CLI, run by the Observer, Reflector and Dropper
workers of a real runtime, against a local mock of the Anthropic Messages API (the scripted server).

The CLI is looked up in ``$OMRAY_CLAUDE_CLI``, then ``~/.cache/omray-cli`` (where
``npm install --prefix ~/.cache/omray-cli @anthropic-ai/claude-code`` puts it), then ``PATH``; the
test skips, saying how to install it, when there is none. The CLI runs on a throwaway
``CLAUDE_CONFIG_DIR`` (standing for the user's ``~/.claude``) holding user-level hooks, a
``CLAUDE.md`` and a project whose ``.claude/settings.json`` has hooks too: none of them may run or
reach the model, no transcript may land under ``projects/``, and the project may gain no file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from cluster.status import explain
from persistence.reads.memory_reader import MemoryReader
from testkit.agent_cli import AgentCliMissing, find_agent_cli
from testkit.anthropic_messages import STRUCTURED_OUTPUT_TOOL, StructuredMemoryModel, api_error
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import Reply, ScriptedServer
from tests.integration.conftest import assert_eventually

pytestmark = pytest.mark.integration

HOOK_MARKER_EVENTS = ("SessionStart", "UserPromptSubmit", "Stop", "SessionEnd")
"""Hook events a headless run would fire if hooks were loaded."""
USER_MEMORY_MARKER = "USER-LEVEL-CLAUDE-MD-7c1e"
"""Text of the user's ``CLAUDE.md``: it must never reach the model."""


def claude_cli() -> str:
    """The ``claude`` executable to test, or skip with how to get one."""
    try:
        return find_agent_cli("claude", "OMRAY_CLAUDE_CLI", "@anthropic-ai/claude-code")
    except AgentCliMissing as exc:
        pytest.skip(f"{exc} to run this test")


def _hooks(marker_dir: Path, scope: str) -> dict[str, Any]:
    return {
        event: [{"hooks": [{"type": "command", "command": f"touch {marker_dir / f'{scope}-{event}'}"}]}]
        for event in HOOK_MARKER_EVENTS
    }


def _user_config(root: Path, markers: Path) -> Path:
    """A stand-in for the user's ``~/.claude`` with hooks and a ``CLAUDE.md`` of its own."""
    config = root / "claude-config"
    config.mkdir()
    (config / "settings.json").write_text(json.dumps({"hooks": _hooks(markers, "user")}))
    (config / "CLAUDE.md").write_text(USER_MEMORY_MARKER + "\n")
    return config


def _project(root: Path, markers: Path) -> Path:
    """The user's project, integrated with Claude Code (project hooks, as ``omray integrate`` writes)."""
    project_dir = root / "project"
    (project_dir / ".claude").mkdir(parents=True)
    (project_dir / ".claude" / "settings.json").write_text(json.dumps({"hooks": _hooks(markers, "project")}))
    (project_dir / "CLAUDE.md").write_text(USER_MEMORY_MARKER + "\n")
    return project_dir


def _files(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def _session_ids(db: Path) -> set[str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT run_id FROM om_observation UNION SELECT run_id FROM om_coverage"
        ).fetchall()
    return {str(row[0]) for row in rows}


def cli_env(server: ScriptedServer, config: Path) -> dict[str, str]:
    """What the workers (and so every CLI run) get: the mock, a dummy key, no telemetry or updates."""
    return {
        "ANTHROPIC_BASE_URL": server.root_url,
        "ANTHROPIC_API_KEY": "sk-ant-test-not-a-key",
        "CLAUDE_CONFIG_DIR": str(config),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_BUG_COMMAND": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
    }


def test_a_session_is_observed_reflected_and_projected_through_the_claude_cli(
    names: RuntimeNames, tmp_path: Path
) -> None:
    command = claude_cli()
    version = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert version.returncode == 0, "the claude CLI does not start"
    markers = tmp_path / "markers"
    markers.mkdir()
    config = _user_config(tmp_path, markers)
    project_dir = _project(tmp_path, markers)
    events_path = project_dir / ".hatfield" / "sessions" / "s-claude" / "events.jsonl"
    events_path.parent.mkdir(parents=True)
    db = tmp_path / "data" / "om.sqlite"
    memory_model = ScriptedMemoryModel()
    settings = {
        "model": "claude-code/haiku",
        "providers": {"claude-code": {"command": command, "timeout_s": 120, "max_budget_usd": 0.2}},
        "storage": {"database": str(db)},
        "observer": {"observe_after_tokens": 0},  # every turn end observes
        "reflector": {"reflect_after_observation_tokens": 150},
        "pools": {"observations_max_tokens": 100},
        "semantic": None,
    }
    with ScriptedServer(messages_default=StructuredMemoryModel(memory_model)) as server:
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            worker_env=cli_env(server, config),
        )
        client = OmrayClient(names, settings=settings, cwd=project_dir)
        turns = demo_session("s-claude")[:3]
        for turn in turns:
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
        before = _files(project_dir)
        assert client.wait_idle(timeout_s=300)
        requests = server.messages_requests

    reader = MemoryReader(db)
    last_seq = turns[-1][-1]["seq"]
    # Observed: every turn is covered and its observations cite its events.
    assert reader.contiguous_covered_end("s-claude", "1", "1") == last_seq
    observations = reader.all_observations("s-claude")
    assert observations and all(1 <= ref.seq <= last_seq for o in observations for ref in o.source_refs)
    # Reflected (and the Dropper ran): the Reflector's answer came back through the CLI too.
    [reflection] = reader.active_reflections("s-claude")
    assert reflection.content.startswith("The session fixed date parsing")
    assert memory_model.reflector_requests >= 1
    # Projected: compaction memory holds it.
    assert "The session fixed date parsing" in client.project("s-claude")
    usage = reader.token_usage("s-claude")
    assert {u.model for u in usage} == {"claude-code/haiku"} and sum(u.prompt_tokens for u in usage) > 0
    assert client.job_counts().get("failed", 0) == 0

    # Every model request came from a locked-down run: only the structured-answer tool, thinking
    # off, no CLAUDE.md of the user or the project.
    assert requests
    for request in requests:
        body = request.body
        assert [tool["name"] for tool in body["tools"]] == [STRUCTURED_OUTPUT_TOOL]
        assert body.get("thinking", {"type": "disabled"}) == {"type": "disabled"}
        assert USER_MEMORY_MARKER not in json.dumps(body)

    # The observer never observed itself: no hook ran, no transcript was kept, the project gained
    # no file, and the memory holds the one session it was given.
    assert sorted(os.listdir(markers)) == []
    assert not list(config.rglob("*.jsonl"))
    assert _files(project_dir) == before
    assert _session_ids(db) == {"s-claude"}


class _LoggedOutThenIn:
    """Refuses the credentials (HTTP 401, as for a login that expired) until ``logged_in`` is set."""

    def __init__(self) -> None:
        self.logged_in = False
        self.model = StructuredMemoryModel(ScriptedMemoryModel())

    def __call__(self, body: Any) -> Reply:
        return self.model(body) if self.logged_in else api_error(401, "authentication_error")


def test_a_logged_out_cli_is_reported_with_cause_and_fix_and_its_turns_wait(
    names: RuntimeNames, tmp_path: Path
) -> None:
    command = claude_cli()
    markers = tmp_path / "markers"
    markers.mkdir()
    config = _user_config(tmp_path, markers)
    project_dir = _project(tmp_path, markers)
    events_path = project_dir / ".hatfield" / "sessions" / "s-login" / "events.jsonl"
    events_path.parent.mkdir(parents=True)
    db = tmp_path / "data" / "om.sqlite"
    settings = {
        "model": "claude-code/haiku",
        "providers": {"claude-code": {"command": command, "timeout_s": 120}},
        "storage": {"database": str(db)},
        "observer": {"observe_after_tokens": 0},
        "semantic": None,
    }
    answers = _LoggedOutThenIn()
    with ScriptedServer(messages_default=answers) as server:
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            worker_env=cli_env(server, config),
            retry_base_delay_s=0.1,
        )
        client = OmrayClient(names, settings=settings, cwd=project_dir)
        first, second = demo_session("s-login")[:2]
        client.after_turn_commit(commit_turn(events_path, first), events_path=events_path)

        def gave_up() -> list[dict[str, Any]]:
            recent = client.status()["recent_failures"]
            return [explain(f) for f in recent if f.get("session_id") == "s-login"]

        failures = assert_eventually(
            gave_up, timeout_s=240, interval_s=0.5, message="the job did not give up"
        )
        assert failures[-1]["last_failure"] == "model_cli_login"
        assert "not logged in" in failures[-1]["cause"] and "/login" in failures[-1]["fix"]
        assert MemoryReader(db).contiguous_covered_end("s-login", "1", "1") in (0, None)

        # Logged in again: the next turn succeeds, and the turn that waited is re-driven and observed.
        answers.logged_in = True
        client.after_turn_commit(commit_turn(events_path, second), events_path=events_path)
        last_seq = second[-1]["seq"]
        assert_eventually(
            lambda: MemoryReader(db).contiguous_covered_end("s-login", "1", "1") == last_seq,
            timeout_s=240,
            interval_s=0.5,
            message="the waiting turn was not observed after the login came back",
        )
        assert client.wait_idle(timeout_s=120)
    assert sorted(os.listdir(markers)) == []
