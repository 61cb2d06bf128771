"""Events travel, paths do not (issue 43 item 1), on the shared cluster.

Two projects observe the same sessions with the scripted model: one names its events files in the
jobs (path mode, an agent on the data node), the other ships its events to the StoreActor's
node-local log (``ship_events=True``; its agent's folder is not the database's). The memory must be
the same, the log must hold the agent's events once each, and the jobs must have read the log: the
agent's file is removed as soon as each turn's events and job are accepted, before the job runs (the
agent's next turn starts a new file, whose seqs go on).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from persistence.files.events_reader import iter_unredacted_events
from protocol.shipping import shipped_events_path
from testkit.memory_snapshot import compare_memory, memory_snapshot
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServer

pytestmark = pytest.mark.integration

SESSIONS = ("ship-a", "ship-b")


def _settings(db: Path, server: ScriptedServer) -> dict[str, Any]:
    return {
        "model": "scripted/memory",
        "observer": {"observe_after_tokens": 0},
        "providers": {"scripted": {"base_url": server.base_url, "context_window": 16384}},
        "storage": {"database": str(db)},
        "reflector": {"reflect_after_observation_tokens": 150},
        "pools": {"observations_max_tokens": 100},
        "semantic": {"embedding_api": {"base_url": server.base_url, "model_id": "hash-embedder"}},
    }


def _drive(client: OmrayClient, *, remove_sources: bool = False) -> None:
    for session_id in SESSIONS:
        client.session_started(session_id)
        events_path = client.events_path(session_id)
        turns = demo_session(session_id)
        for turn in turns:
            client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
            assert client.outbox.wait_empty(60)
            if remove_sources:  # shipped and its job accepted: the job cannot read the agent's file
                events_path.unlink()
            assert client.wait_idle(timeout_s=90), "the queue did not drain"
    for session_id in SESSIONS:  # a last index batch after the final observations
        client.session_started(session_id)
    assert client.wait_idle(timeout_s=90), "the queue did not drain"


def test_shipped_events_give_the_same_memory_as_named_files(names: RuntimeNames, tmp_path: Path) -> None:
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=DEFAULT_HANDLERS,
        retry_base_delay_s=0.1,
        pools=PoolSizes(observers=1, reflectors=1, indexers=1),
    )
    with ScriptedServer(chat_default=ScriptedMemoryModel()) as server:
        path_db = tmp_path / "named" / "om.sqlite"
        named = OmrayClient(names, settings=_settings(path_db, server), cwd=tmp_path / "named")
        _drive(named)
        ship_db = tmp_path / "data" / "om.sqlite"
        shipping = OmrayClient(
            names, settings=_settings(ship_db, server), cwd=tmp_path / "agent", ship_events=True
        )
        agent_events = {  # the same sessions, as the first agent's files hold them
            session: [
                e.model_dump(mode="json")
                for e in iter_unredacted_events(named.events_path(session), 1, 10**6)
            ]
            for session in SESSIONS
        }
        _drive(shipping, remove_sources=True)
        assert shipping.job_counts()["failed"] == 0
    for session_id in SESSIONS:
        log = shipped_events_path(str(ship_db.resolve()), session_id)
        logged = [e.model_dump(mode="json") for e in iter_unredacted_events(log, 1, 10**6)]
        assert logged == agent_events[session_id]  # each event once, in order
    shipped, reference = memory_snapshot(ship_db), memory_snapshot(path_db)
    assert shipped.count("observations") > 0 and shipped.count("reflections") > 0
    diff = compare_memory(shipped, reference)
    assert diff.identical, diff
