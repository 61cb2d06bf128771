"""The default trigger policy on a real Ray cluster: fewer calls, the idle flush, the cost report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.observer_bench import PrefixCachingObserver
from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from testkit.scripted_server import ScriptedServer

pytestmark = pytest.mark.integration


def _settings(tmp_path: Path, server: ScriptedServer, **observer: Any) -> dict[str, Any]:
    return {
        "model": "scripted/observer",
        "providers": {"scripted": {"base_url": server.base_url, "context_window": 16384}},
        "storage": {"database": str(tmp_path / "om.sqlite")},
        "observer": observer,
        "prices": {"models": {"scripted/observer": {"prompt": 1.0, "cached_prompt": 0.1, "completion": 2.0}}},
    }


def test_a_session_is_observed_in_one_call_at_its_end_and_its_cost_is_reported(
    names: RuntimeNames, tmp_path: Path
) -> None:
    model = PrefixCachingObserver()
    with ScriptedServer(chat_default=model) as server:
        ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        turns = demo_session("s-cost")
        events_path = tmp_path / "events.jsonl"
        for number, turn in enumerate(turns, start=1):
            context = commit_turn(events_path, turn, session_end=number == len(turns))
            assert client.after_turn_commit(context, events_path=events_path) is not None
        assert client.wait_idle(timeout_s=120)
        reader = MemoryReader(tmp_path / "om.sqlite")
        assert reader.contiguous_covered_end("s-cost", "1", "1") == turns[-1][-1]["seq"]
        # Small turns wait for the session's end: one request observes them all, no receipt round.
        assert model.requests == 1 and model.source_blocks_seen == len(reader.all_observations("s-cost"))
        _, status = client.memory_status("s-cost")
        usage = status["token_usage"]
        assert isinstance(usage, dict)
        assert usage["total"]["requests"] == 1 and usage["total"]["prompt_tokens"] == model.prompt_tokens
        assert usage["cost"]["currency"] == "USD" and usage["cost"]["total"] > 0


def test_a_deferred_tail_is_observed_by_the_idle_flush(names: RuntimeNames, tmp_path: Path) -> None:
    model = PrefixCachingObserver()
    with ScriptedServer(chat_default=model) as server:
        ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(names, settings=_settings(tmp_path, server, idle_flush_seconds=2), cwd=tmp_path)
        turns = demo_session("s-idle")[:2]
        events_path = tmp_path / "events.jsonl"
        for turn in turns:  # the agent stops without saying the session ended
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
        assert client.wait_idle(timeout_s=120)
        reader = MemoryReader(tmp_path / "om.sqlite")
        assert reader.contiguous_covered_end("s-idle", "1", "1") == turns[-1][-1]["seq"]
        assert model.requests == 1
