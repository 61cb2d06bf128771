"""``anthropic/<model>`` end to end: a real runtime's Observer, Reflector and Dropper on the official
``anthropic`` SDK against the scripted server's mock Messages API (native tool use, the key from the
workers' environment, the stable prefix marked for the provider's prompt cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from testkit.anthropic_messages import ToolUseMemoryModel
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServer

pytestmark = pytest.mark.integration

SESSION = "s-anthropic"
KEY = "sk-ant-integration-not-a-key"


def test_a_session_is_observed_reflected_and_projected_on_the_messages_api(
    names: RuntimeNames, tmp_path: Path
) -> None:
    events_path = tmp_path / ".hatfield" / "sessions" / SESSION / "events.jsonl"
    events_path.parent.mkdir(parents=True)
    db = tmp_path / "om.sqlite"
    memory_model = ScriptedMemoryModel()
    answers = ToolUseMemoryModel(memory_model, usage=(1200, 40, 900))
    with ScriptedServer(messages_default=answers) as server:
        settings = {
            "model": "anthropic/claude-haiku-4-5",
            "providers": {
                "anthropic": {"base_url": server.root_url, "api_key_env": "OMRAY_TEST_ANTHROPIC_KEY"}
            },
            "storage": {"database": str(db)},
            "observer": {"observe_after_tokens": 0},
            "reflector": {"reflect_after_observation_tokens": 150},
            "pools": {"observations_max_tokens": 100},
            "semantic": None,
        }
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            worker_env={"OMRAY_TEST_ANTHROPIC_KEY": KEY},
        )
        client = OmrayClient(names, settings=settings, cwd=tmp_path)
        turns = demo_session(SESSION)[:3]
        for turn in turns:
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
        assert client.wait_idle(timeout_s=240)
        requests = list(server.messages_requests)

    reader = MemoryReader(db)
    last_seq = int(turns[-1][-1]["seq"])
    assert reader.contiguous_covered_end(SESSION, "1", "1") == last_seq
    [reflection] = reader.active_reflections(SESSION)
    assert reflection.content.startswith("The session fixed date parsing")
    assert "The session fixed date parsing" in client.project(SESSION)
    usage = reader.token_usage(SESSION)
    assert {u.model for u in usage} == {"anthropic/claude-haiku-4-5"}
    assert all(u.cached_prompt_tokens > 0 for u in usage)  # what the cache served is counted as such
    assert client.job_counts().get("failed", 0) == 0
    assert requests and all(r.body["model"] == "claude-haiku-4-5" for r in requests)
    for request in requests:
        assert request.body["system"][0]["cache_control"] == {"type": "ephemeral"}
        assert KEY in request.headers.get("x-api-key", "") + request.headers.get("authorization", "")
    tools = {r.body["tools"][0]["name"] for r in requests}
    assert {"record_observations", "record_reflections"} <= tools
