"""The Observer pipeline on a real Ray cluster, with the real openai client and a scripted server."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from protocol.events import AfterTurnCommit, EventSummary
from testkit.scripted_server import Reply, ScriptedServer, chat_text, chat_tool_calls
from tests.integration.conftest import assert_eventually

pytestmark = pytest.mark.integration

_LABEL = re.compile(r"\[Source entry id: ([^:\]]+):(\d+)\]\n\[[^\]@]+ @ (\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]")


def _observer_reply(body: Mapping[str, Any]) -> Reply:
    """Answer like a diligent model: one observation per source block of the chunk, then stop."""
    messages = body["messages"]
    if messages[-1]["role"] == "tool":
        return chat_text("Recorded.")
    chunk = messages[-1]["content"].split("NEW SOURCE-ADDRESSED CONVERSATION CHUNK:", 1)[1]
    observations = [
        {
            "timestamp": ts,
            "content": f"Event {seq} of session {run} happened",
            "relevance": "medium",
            "source_refs": [{"run_id": run, "seq": int(seq)}],
        }
        for run, seq, ts in _LABEL.findall(chunk)
    ]
    return chat_tool_calls(("record_observations", {"observations": observations}))


def _write_and_commit(
    client: OmrayClient, session_id: str, events_path: Path, turns: list[list[dict[str, Any]]]
) -> None:
    for turn in turns:
        ctx = commit_turn(events_path, turn)
        assert ctx.session_id == session_id
        assert client.after_turn_commit(ctx, events_path=events_path) is not None


def _settings(tmp_path: Path, model: str, providers: dict[str, Any] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {
        "model": model,
        "storage": {"database": str(tmp_path / "om.sqlite")},
        "observer": {"observe_after_tokens": 0},  # these tests observe at every turn end (the original)
        "semantic": None,  # and count observe jobs only
    }
    if providers:
        block["providers"] = providers
    return block


def test_multi_turn_session_is_observed_with_the_builtin_model(names: RuntimeNames, tmp_path: Path) -> None:
    ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    client = OmrayClient(names, settings=_settings(tmp_path, "builtin/extractive"), cwd=tmp_path)
    turns = demo_session("s-builtin")
    events_path = tmp_path / "events.jsonl"
    _write_and_commit(client, "s-builtin", events_path, turns)
    assert client.wait_idle(timeout_s=120)
    reader = MemoryReader(tmp_path / "om.sqlite")
    last_seq = turns[-1][-1]["seq"]
    assert reader.contiguous_covered_end("s-builtin", "1", "1") == last_seq
    observations = reader.all_observations("s-builtin")
    assert len(observations) >= 5
    assert all(
        ref.run_id == "s-builtin" and 1 <= ref.seq <= last_seq for o in observations for ref in o.source_refs
    )
    assert any("src/billing/dates.py" in o.content for o in observations)
    assert reader.activity("s-builtin") is None  # cleared after each part
    assert client.job_counts()["succeeded"] == len(turns)


def test_scripted_model_through_the_openai_client(names: RuntimeNames, tmp_path: Path) -> None:
    with ScriptedServer(chat_default=_observer_reply) as server:
        providers = {"scripted": {"base_url": server.base_url, "context_window": 16384}}
        ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(
            names, settings=_settings(tmp_path, "scripted/test-model", providers), cwd=tmp_path
        )
        turns = demo_session("s-scripted")[:2]
        _write_and_commit(client, "s-scripted", tmp_path / "events.jsonl", turns)
        assert client.wait_idle(timeout_s=120)
        first_requests = len(server.chat_requests)
        # One request per turn: each first answer was accepted in full, so no receipt round followed.
        assert first_requests == len(turns)
        assert server.chat_requests[0].body["model"] == "test-model"
        reader = MemoryReader(tmp_path / "om.sqlite")
        observations = reader.all_observations("s-scripted")
        rendered = {ref.seq for o in observations for ref in o.source_refs}
        assert len(observations) == len(rendered) > 0
        assert reader.contiguous_covered_end("s-scripted", "1", "1") == turns[-1][-1]["seq"]
        # A redelivered job for covered events makes no model call.
        ctx = AfterTurnCommit(
            session_id="s-scripted",
            turn_no=2,
            status="completed",
            events=(
                EventSummary(seq=turns[-1][-1]["seq"], type="agent_end", payload={"reason": "completed"}),
            ),
        )
        client.after_turn_commit(ctx, events_path=tmp_path / "events.jsonl")
        assert client.wait_idle(timeout_s=60)
        assert len(server.chat_requests) == first_requests
        assert len(reader.all_observations("s-scripted")) == len(observations)


def test_observer_killed_mid_part_commits_every_part_once(names: RuntimeNames, tmp_path: Path) -> None:
    slow_first = {"done": False}

    def reply(body: Mapping[str, Any]) -> Reply:
        answer = _observer_reply(body)
        if not slow_first["done"] and body["messages"][-1]["role"] != "tool":
            slow_first["done"] = True
            return Reply(status=answer.status, body=answer.body, delay_s=30.0)  # the worker dies meanwhile
        return answer

    with ScriptedServer(chat_default=reply) as server:
        providers = {"scripted": {"base_url": server.base_url, "context_window": 16384}}
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            retry_base_delay_s=0.5,
        )
        client = OmrayClient(names, settings=_settings(tmp_path, "scripted/m", providers), cwd=tmp_path)
        turns = demo_session("s-kill")[:1]
        _write_and_commit(client, "s-kill", tmp_path / "events.jsonl", turns)
        assert_eventually(lambda: len(server.chat_requests) >= 1, message="observer never called the model")
        import ray

        observer = ray.get_actor(names.observer, namespace=names.namespace)
        os.kill(ray.get(observer.ping.remote())["pid"], signal.SIGKILL)
        assert client.wait_idle(timeout_s=120)
        reader = MemoryReader(tmp_path / "om.sqlite")
        observations = reader.all_observations("s-kill")
        seqs = sorted(ref.seq for o in observations for ref in o.source_refs)
        assert seqs == sorted(set(seqs)) and seqs  # every block observed exactly once
        assert reader.contiguous_covered_end("s-kill", "1", "1") == turns[-1][-1]["seq"]
        assert client.job_counts() == {"pending": 0, "running": 0, "succeeded": 1, "failed": 0}


def test_workers_read_the_settings_file_when_the_job_runs(names: RuntimeNames, tmp_path: Path) -> None:
    # Jobs name the settings file; the ObserverActor (another process) reads it when the job runs.
    import yaml

    ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    settings_file = tmp_path / "omray.yaml"
    block = _settings(tmp_path, "builtin/extractive")
    settings_file.write_text(yaml.safe_dump({"observational_memory": block}), encoding="utf-8")
    client = OmrayClient(names, settings=block, cwd=tmp_path, settings_file=settings_file)
    turns = demo_session("s-file")
    _write_and_commit(client, "s-file", tmp_path / "events.jsonl", turns[:2])
    assert client.wait_idle(timeout_s=120)
    reader = MemoryReader(tmp_path / "om.sqlite")
    assert reader.contiguous_covered_end("s-file", "1", "1") == turns[1][-1]["seq"]
    assert {o.observer_model for o in reader.all_observations("s-file")} == {"builtin/extractive"}
    assert client.job_counts()["succeeded"] == 2
