"""The Reflector and Dropper on a real Ray cluster, through the openai client and a scripted server."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import ray
from typer.testing import CliRunner

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.commands.memory_cli import memory_app
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServer
from tests.integration.conftest import assert_eventually

pytestmark = pytest.mark.integration


def _settings(tmp_path: Path, server: ScriptedServer) -> dict[str, Any]:
    return {
        "model": "scripted/memory",
        "observer": {"observe_after_tokens": 0},  # every turn end observes
        "providers": {"scripted": {"base_url": server.base_url, "context_window": 16384}},
        "storage": {"database": str(tmp_path / "om.sqlite")},
        "reflector": {"reflect_after_observation_tokens": 150},
        "pools": {"observations_max_tokens": 100},
    }


def _observe(client: OmrayClient, tmp_path: Path, session_id: str, turns: int) -> None:
    events_path = tmp_path / "events.jsonl"
    for turn in demo_session(session_id)[:turns]:
        client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)


def _generations(db: Path, session_id: str) -> list[tuple[str, str]]:
    import sqlite3

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return list(
            conn.execute(
                "SELECT generation_id, status FROM om_memory_generation WHERE run_id = ? ORDER BY created_at",
                (session_id,),
            )
        )


def test_threshold_generation_is_promoted_and_shown_by_memory_status(
    names: RuntimeNames, tmp_path: Path
) -> None:
    model = ScriptedMemoryModel()
    with ScriptedServer(chat_default=model) as server:
        ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        _observe(client, tmp_path, "s-reflect", 3)
        assert client.wait_idle(timeout_s=120)
        reader = MemoryReader(tmp_path / "om.sqlite")
        generation = reader.active_generation("s-reflect")
        assert generation is not None and generation.status == "succeeded"
        [reflection] = reader.active_reflections("s-reflect")
        assert reflection.content.startswith("The session fixed date parsing")
        counts = reader.memory_counts("s-reflect")
        assert counts.recorded_observations > len(
            reader.active_candidate_set("s-reflect").observations
        )  # dropped
        result = CliRunner().invoke(
            memory_app, ["status", "--session", "s-reflect", "--db", str(tmp_path / "om.sqlite"), "--json"]
        )
        assert result.exit_code == 0, result.output
        status = json.loads(result.output)
        assert status["visible_reflections"] == 1 and status["dropped_observations"] >= 1


def test_reflector_killed_mid_generation_promotes_exactly_once(names: RuntimeNames, tmp_path: Path) -> None:
    model = ScriptedMemoryModel()
    model.hold_reflector_s = 30.0  # the first Reflector request hangs; the worker dies meanwhile
    with ScriptedServer(chat_default=model) as server:
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            retry_base_delay_s=0.5,
        )
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        _observe(client, tmp_path, "s-kill", 3)
        assert_eventually(
            lambda: model.reflector_requests >= 1, timeout_s=120, message="reflector never called"
        )
        reflector = ray.get_actor(names.reflector, namespace=names.namespace)
        os.kill(ray.get(reflector.ping.remote())["pid"], signal.SIGKILL)
        assert client.wait_idle(timeout_s=120)
        generations = _generations(tmp_path / "om.sqlite", "s-kill")
        assert [status for _, status in generations].count("succeeded") == 1
        reader = MemoryReader(tmp_path / "om.sqlite")
        assert len(reader.active_reflections("s-kill")) == 1
        assert client.job_counts()["failed"] == 0
