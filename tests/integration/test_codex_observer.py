"""``codex/<model>`` end to end: the REAL ``codex`` CLI (``codex exec``), run by the workers of a real
runtime, against a local mock of the OpenAI Responses API (``providers.codex.base_url``).

The CLI is looked up in ``$OMRAY_CODEX_CLI``, then ``~/.cache/omray-cli`` (``npm install --prefix
~/.cache/omray-cli @openai/codex``), then ``PATH``; the test skips, saying how to install it, when
there is none. Codex runs on a throwaway ``CODEX_HOME`` whose ``config.toml`` has a ``notify``
program (omray's hook, as ``omray integrate codex`` writes it): it must not run, no session rollout
may be kept, and the project may gain no file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from testkit.agent_cli import AgentCliMissing, find_agent_cli
from testkit.codex_responses import StructuredResponsesModel
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServer
from tests.integration.test_claude_code_observer import _files, _session_ids

pytestmark = pytest.mark.integration


def codex_cli() -> str:
    """The ``codex`` executable to test, or skip with how to get one."""
    try:
        return find_agent_cli("codex", "OMRAY_CODEX_CLI", "@openai/codex")
    except AgentCliMissing as exc:
        pytest.skip(f"{exc} to run this test")


def test_a_session_is_observed_reflected_and_projected_through_codex_exec(
    names: RuntimeNames, tmp_path: Path
) -> None:
    command = codex_cli()
    markers = tmp_path / "markers"
    markers.mkdir()
    codex_home = tmp_path / "codex-home"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(f'notify = ["touch", "{markers / "notify"}"]\n')
    project_dir = tmp_path / "project"
    events_path = project_dir / ".hatfield" / "sessions" / "s-codex" / "events.jsonl"
    events_path.parent.mkdir(parents=True)
    db = tmp_path / "data" / "om.sqlite"
    memory_model = ScriptedMemoryModel()
    with ScriptedServer(responses_default=StructuredResponsesModel(memory_model)) as server:
        settings = {
            "model": "codex/gpt-5-mini",
            "providers": {
                "codex": {
                    "command": command,
                    "timeout_s": 120,
                    "base_url": server.base_url,
                    "api_key_env": "OMRAY_TEST_CODEX_KEY",
                }
            },
            "storage": {"database": str(db)},
            "observer": {"observe_after_tokens": 0},
            "reflector": {"reflect_after_observation_tokens": 150},
            "pools": {"observations_max_tokens": 100},
            "semantic": None,
        }
        worker_env = {"CODEX_HOME": str(codex_home), "OMRAY_TEST_CODEX_KEY": "sk-test-not-a-key"}
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            worker_env=worker_env,
        )
        client = OmrayClient(names, settings=settings, cwd=project_dir)
        turns = demo_session("s-codex")[:3]
        for turn in turns:
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
        before = _files(project_dir)
        assert client.wait_idle(timeout_s=300)
        requests = server.responses_requests

    reader = MemoryReader(db)
    assert reader.contiguous_covered_end("s-codex", "1", "1") == turns[-1][-1]["seq"]
    assert reader.all_observations("s-codex")
    [reflection] = reader.active_reflections("s-codex")
    assert reflection.content.startswith("The session fixed date parsing")
    assert "The session fixed date parsing" in client.project("s-codex")
    assert client.job_counts().get("failed", 0) == 0
    assert requests
    for request in requests:
        body = request.body
        # No tool to act with (Codex keeps only its request_user_input, which exec never answers).
        assert {tool.get("name") or tool.get("type") for tool in body.get("tools", [])} <= {
            "request_user_input"
        }
        assert body["text"]["format"]["type"] == "json_schema"
    assert sorted(os.listdir(markers)) == []
    assert not list(codex_home.rglob("rollout-*.jsonl"))
    assert _files(project_dir) == before
    assert _session_ids(db) == {"s-codex"}
