"""Forget and redact through the real runtime (issue 33 item 5): a real Ray cluster, the real queue,
workers and StoreActor, real SQLite files and the real ``openai`` embedding client against the
scripted server."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster.client import OmrayClient
from cluster.commands.demo_session import event_line
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.semantic import MANIFEST_FILE
from protocol.events import AfterTurnCommit, EventSummary
from testkit.scripted_server import ScriptedServer

pytestmark = pytest.mark.integration

PRIVATE_CANARY = "CANARY-PRIV-7731"
API_KEY = "sk-ant-api03-" + "Zq9" * 12
CUSTOM_SECRET = "ACME-884213"


def _settings(tmp_path: Path, server: ScriptedServer) -> dict[str, Any]:
    return {
        "model": "builtin/extractive",
        "observer": {"observe_after_tokens": 0},  # every turn end observes
        "storage": {"database": str(tmp_path / "om.sqlite")},
        "semantic": {"embedding_api": {"base_url": server.base_url, "model_id": "hash-embedder"}},
        "privacy": {"redact_patterns": ["ACME-[0-9]{6}"]},
    }


def _write_turns(client: OmrayClient, session: str, texts: list[str]) -> None:
    """One turn per text (a user message then the turn's end), observed through the runtime."""
    path = client.events_path(session)
    path.parent.mkdir(parents=True, exist_ok=True)
    seq = 0
    for turn, text in enumerate(texts, start=1):
        for event in (
            {"type": "agent_command_applied", "payload": {"text": text}},
            {"type": "agent_end", "payload": {"reason": "completed"}},
        ):
            seq += 1
            line = {
                "schema_version": "1.0",
                "run_id": session,
                "seq": seq,
                "turn_no": turn,
                "ts": "2026-11-30T09:00:00+00:00",
            } | event
            with path.open("a", encoding="utf-8") as handle:
                handle.write(event_line(line))
        end = EventSummary(seq=seq, type="agent_end", payload={"reason": "completed"})
        client.after_turn_commit(
            AfterTurnCommit(session_id=session, turn_no=turn, status="completed", events=(end,))
        )


def _index(client: OmrayClient, session: str) -> None:
    assert client.wait_idle(timeout_s=120)
    client.session_started(session)
    assert client.wait_idle(timeout_s=120)


def _files_holding(root: Path, needles: list[bytes]) -> list[str]:
    found = []
    for path in root.rglob("*"):
        if path.is_file() and path.name != "events.jsonl":  # the agent's own log keeps the raw text
            data = path.read_bytes()
            found += [f"{path}: {needle!r}" for needle in needles if needle in data]
    return found


def test_private_text_and_secrets_never_reach_memory_index_projection_search_or_logs(
    names: RuntimeNames, tmp_path: Path
) -> None:
    with ScriptedServer() as server:
        ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        session = "s-private"
        _write_turns(
            client,
            session,
            [
                f"Deploy the billing service. <private>my code is {PRIVATE_CANARY}</private> Use the key "
                f"{API_KEY} and ticket {CUSTOM_SECRET} for the release notes.",
                "Then run the billing tests again.",
            ],
        )
        _index(client, session)

        needles = [PRIVATE_CANARY.encode(), API_KEY.encode(), CUSTOM_SECRET.encode(), b"Zq9Zq9Zq9"]
        # What the index job sent the embedding endpoint (the searches below embed their own queries).
        indexing_requests = list(server.requests)
        assert indexing_requests
        answers = [
            client.memory_search({"query": query, "mode": mode, "limit": 50})
            for query in (PRIVATE_CANARY, "Zq9Zq9", CUSTOM_SECRET, "billing service")
            for mode in ("exact", "hybrid")
        ]
        assert all(answer["ok"] is True for answer in answers), answers
        assert any(answer["count"] for answer in answers)  # "billing service" finds the turn
        recalled = client.recall(session, {"seq_start": 1, "seq_end": 2})
        # Each answer echoes its query: the results are what must not hold the text.
        texts = [
            repr([answer["results"] for answer in answers]),
            repr(recalled),
            client.project(session),
            repr(client.memory_view(session)),
        ]
        assert not [needle for needle in needles for text in texts if needle.decode() in text]
        assert "[private]" in repr(recalled) and "[redacted:api-key]" in repr(recalled)
        assert "[redacted:custom]" in repr(recalled)
        # Memory and the index files (bytes), the embedding requests and every log of the cluster.
        assert (tmp_path / "om.sqlite.semantic").is_dir()
        assert not _files_holding(tmp_path, needles)  # om.sqlite (+ WAL), every index file, the queue
        logs = Path(ray._private.worker._global_node.get_logs_dir_path())
        assert not _files_holding(logs, needles)
        assert not [
            request for request in indexing_requests if any(n in repr(request.body).encode() for n in needles)
        ]


def _ids(answer: dict[str, Any]) -> set[str]:
    assert answer["ok"] is True, answer
    return {str(item["id"]) for item in answer["results"]}


def _manifest_id(db_path: Path) -> str:
    """The id of the hybrid index's manifest (a rebuild makes a new one)."""
    with closing(sqlite3.connect(f"{db_path}.semantic/{MANIFEST_FILE}")) as conn:
        return str(conn.execute("SELECT value FROM meta WHERE key = 'manifest_id'").fetchone()[0])


def _semantic_bytes(db_path: Path) -> bytes:
    folder = Path(f"{db_path}.semantic")
    return b"".join(path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file())


def test_forget_through_the_runtime_removes_memory_from_every_read_path_at_once(
    names: RuntimeNames, tmp_path: Path
) -> None:
    with ScriptedServer() as server:
        ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        client = OmrayClient(names, settings=_settings(tmp_path, server), cwd=tmp_path)
        session, other = "s-forget", "s-keep"
        _write_turns(client, session, ["Rotate the walnut ledger keys.", "Archive the copper invoices."])
        _write_turns(client, other, ["Rotate the walnut ledger keys."])
        _index(client, session)
        walnut = client.memory_search({"query": "walnut ledger", "mode": "exact"})
        mine = {
            item["id"]
            for item in walnut["results"]
            if item["session_id"] == session and item["kind"] == "observation"
        }
        kept = {item["id"] for item in walnut["results"] if item["session_id"] == other}
        assert (
            mine and kept and mine <= _ids(client.memory_search({"query": "walnut ledger", "mode": "hybrid"}))
        )

        manifest_before = _manifest_id(client.db_path)
        report = client.forget([memory_id[:12] for memory_id in mine] + ["ab" * 8])
        assert report["complete"] is True and set(report["forgotten"]["observations"]) == mine
        assert report["unknown"] == ["ab" * 8]
        # Before the index job the forget queued, or while it rebuilds the index (index_building):
        # never the forgotten memory. Auto mode falls back to exact search meanwhile.
        hybrid = client.memory_search({"query": "walnut ledger", "mode": "hybrid", "limit": 50})
        if hybrid["ok"] is False:
            assert hybrid["error"] == "index_building" and "results" not in hybrid
        else:
            assert not _ids(hybrid) & mine and kept <= _ids(hybrid)
        auto = client.memory_search({"query": "walnut ledger", "limit": 50})
        assert not _ids(auto) & mine and kept <= _ids(auto)
        assert client.wait_idle(timeout_s=120)
        hybrid = client.memory_search({"query": "walnut ledger", "mode": "hybrid", "limit": 50})
        assert not _ids(hybrid) & mine and kept <= _ids(hybrid)  # after the index job removed it
        # Removed in place, not rebuilt (a rebuild starts a new manifest), and no trace of the
        # forgotten session's own words stays in the derived files.
        assert _manifest_id(client.db_path) == manifest_before
        assert b"copper" in _semantic_bytes(client.db_path)  # the other memory of the session stays
        assert not _ids(client.memory_search({"query": "walnut", "mode": "exact", "limit": 50})) & mine
        assert not any(memory_id[:12] in client.project(session) for memory_id in mine)
        again = client.forget(sorted(mine))
        assert again["complete"] is True and sorted(again["already_forgotten"]) == sorted(mine)

        whole = client.forget(session_id=session)
        assert whole["complete"] is True and whole["forgotten"]["transcript_events"] >= 2
        assert client.wait_idle(timeout_s=120)  # the index job removes the forgotten rows
        assert _manifest_id(client.db_path) == manifest_before
        assert b"copper" not in _semantic_bytes(client.db_path)
        for mode in ("exact", "hybrid"):
            found = client.memory_search({"query": "copper invoices", "mode": mode, "limit": 50})
            assert not [item for item in found["results"] if item["session_id"] == session]
            assert kept <= _ids(client.memory_search({"query": "walnut ledger", "mode": mode, "limit": 50}))
        assert client.project(session) == ""
        # Coverage stays: a later turn of the session is observed from where coverage ended.
        status, data = client.memory_status(session)
        assert data, status
