"""Hybrid retrieval on a real Ray cluster: batched indexing, partial answers, rebuilds, visible errors."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session, event_line
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.semantic import VECTOR_FILE
from protocol.events import AfterTurnCommit, EventSummary
from testkit.scripted_server import ScriptedServer, hash_vector, http_error

pytestmark = pytest.mark.integration


def _settings(tmp_path: Path, server: ScriptedServer) -> dict[str, Any]:
    return {
        "model": "builtin/extractive",
        "observer": {"observe_after_tokens": 0},  # every turn end observes
        "storage": {"database": str(tmp_path / "om.sqlite")},
        "semantic": {
            "embedding_api": {"base_url": server.base_url, "model_id": "hash-embedder", "batch_size": 2},
        },
    }


def _observe_demo(client: OmrayClient, tmp_path: Path, session_id: str) -> None:
    events_path = tmp_path / "events.jsonl"
    for turn in demo_session(session_id):
        client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)


def _slow_embedding(text: str) -> list[float]:
    # An index job embeds many batches at once (``JOB_BATCHES``): a slow endpoint keeps the index
    # behind the committed memories long enough for searches to see it partial.
    time.sleep(0.05)
    return list(hash_vector(text))


def test_indexing_in_batches_partial_until_complete_and_rebuild(names: RuntimeNames, tmp_path: Path) -> None:
    with ScriptedServer(embed=_slow_embedding) as server:
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            retry_base_delay_s=0.1,
        )
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        client.session_started("s-hybrid")
        _observe_demo(client, tmp_path, "s-hybrid")
        assert client.wait_idle(timeout_s=120)
        # A second session's memories while the (slow) endpoint indexes them: the index lags.
        second = tmp_path / "second"
        second.mkdir()
        _observe_demo(client, second, "s-hybrid-2")
        answers: list[dict[str, Any]] = []
        deadline = time.monotonic() + 120
        while not client.queue_is_idle() and time.monotonic() < deadline:
            answers.append(client.memory_search({"query": "billing tests", "limit": 5}))
            time.sleep(0.05)
        assert client.wait_idle(timeout_s=120)
        final = client.memory_search({"query": "billing tests", "limit": 5})
        assert final["ok"] is True and final["partial"] is False and final["count"] > 0
        # While indexing ran, every answer was honest: results (partial while the index lagged the
        # memories committed so far), or "still building"; never another failure.
        assert all(a["ok"] or a["error"] in {"index_building", "index_busy"} for a in answers)
        assert all(
            a.get("mode") != "exact" or a["hybrid_unavailable"] in {"index_building", "index_busy"}
            for a in answers
        )
        assert any(a.get("partial") is True for a in answers), "indexing never observed mid-way"
        embed_batches = [r.body["input"] for r in server.requests_to("/embeddings")]
        assert len(embed_batches) > 3 and max(len(b) for b in embed_batches) <= 2  # bounded batches

        # Deleting the vector file never yields wrong results: the index rebuilds from SQLite.
        (tmp_path / "om.sqlite.semantic" / VECTOR_FILE).unlink()
        broken = client.memory_search({"query": "billing tests", "limit": 5, "mode": "hybrid"})
        assert broken["ok"] is False and broken["error"] == "index_building"
        # mode auto answers with exact search meanwhile, and says so
        fallback = client.memory_search({"query": "billing", "limit": 5})
        assert fallback["ok"] is True and fallback["mode"] == "exact" and fallback["count"] > 0
        assert fallback["hybrid_unavailable"] == "index_building"
        client.session_started("s-hybrid")
        assert client.wait_idle(timeout_s=120)
        rebuilt = client.memory_search({"query": "billing tests", "limit": 5})
        assert rebuilt["ok"] is True and rebuilt["partial"] is False
        assert [r["id"] for r in rebuilt["results"]] == [r["id"] for r in final["results"]]


def test_failing_embeddings_endpoint_is_a_visible_error(names: RuntimeNames, tmp_path: Path) -> None:
    with ScriptedServer() as server:
        ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        _observe_demo(client, tmp_path, "s-fail")
        assert client.wait_idle(timeout_s=120)
        assert client.memory_search({"query": "billing", "limit": 3})["ok"] is True
        server.push_embeddings(http_error(500, should_retry=False))
        answer = client.memory_search({"query": "billing", "limit": 3})
        assert answer == {"ok": False, "error": "embedding_unavailable", "message": answer["message"]}
        assert "results" not in answer  # never replaced by exact results


def test_a_detail_only_in_the_events_is_found_under_its_observation(
    names: RuntimeNames, tmp_path: Path
) -> None:
    with ScriptedServer() as server:
        ensure_runtime(
            names,
            queue_db=str(tmp_path / "queue.sqlite"),
            handler_paths=DEFAULT_HANDLERS,
            retry_base_delay_s=0.1,
        )
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        session = "s-grounded"
        # Longer than the builtin model keeps whole: its observation is cut at 240 characters.
        request = (
            "Please review the quarterly import pipeline notes. " * 50 + "The vault code is walnut-4471."
        )
        events = [
            {"type": "agent_command_applied", "payload": {"text": request}},
            {"type": "agent_end", "payload": {"reason": "completed"}},
        ]
        lines = [
            {
                "schema_version": "1.0",
                "run_id": session,
                "seq": seq,
                "turn_no": 1,
                "ts": "2026-11-30T09:00:00+00:00",
            }
            | event
            for seq, event in enumerate(events, start=1)
        ]
        events_path = client.events_path(session)
        events_path.parent.mkdir(parents=True)
        events_path.write_text("".join(event_line(line) for line in lines), encoding="utf-8")
        client.after_turn_commit(
            AfterTurnCommit(
                session_id=session,
                turn_no=1,
                status="completed",
                events=(EventSummary(seq=2, type="agent_end", payload={"reason": "completed"}),),
            )
        )
        assert client.wait_idle(timeout_s=120)
        answer = client.memory_search({"query": "walnut-4471 vault code", "limit": 3})
        assert answer["ok"] is True
        first = answer["results"][0]
        assert "walnut" not in first["content"]  # the observation dropped it
        assert first["source"]["seq_start"] == first["source"]["seq_end"] == 1
        assert "walnut-4471" in first["source"]["excerpt"]
        recalled = client.recall(session, {"id": first["id"]})
        assert recalled["ok"] is True and [event["seq"] for event in recalled["events"]] == [1]
