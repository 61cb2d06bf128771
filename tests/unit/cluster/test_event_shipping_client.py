"""The client ships a turn's events ahead of its observe job (no cluster: a link over a real log).

The link answers like the runtime would: ``events_tail`` and ``ship_events`` through a real
:class:`persistence.files.events_log.EventLog`, and ``dispatch`` by recording the job, so the order of
what arrives is visible. Shipping may fail for a while; the hook still returns by its deadline.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from actors.store.events_log import append_shipped
from cluster.client import OmrayClient
from cluster.commands.demo_session import commit_turn, demo_session
from cluster.runtime_connection import RuntimeUnavailableError
from persistence.files.events_log import EventLog
from persistence.files.events_reader import iter_unredacted_events
from protocol.jobs import ObserveBoundaryJob
from protocol.shipping import shipped_events_path, shipped_events_root

DEADLINE_S = 0.5


class ShippingLink:
    """A runtime whose data node keeps a real log; the first ``failures`` shipments time out."""

    def __init__(self, db_path: Path, failures: int = 0) -> None:
        self.log = EventLog(shipped_events_root(str(db_path)))
        self.failures = failures
        self.arrivals: list[tuple[str, int]] = []  # ("events", last seq) / ("job", terminal seq)
        self.job_events_paths: list[str] = []
        self.lock = threading.Lock()

    def call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        with self.lock:
            if method == "events_tail":
                return self.log.tail(args[1])
            if method == "ship_events":
                if self.failures > 0:
                    self.failures -= 1
                    raise RuntimeUnavailableError("the data node did not answer")
                result = append_shipped(self.log, args[1], args[2])
                self.arrivals.append(("events", result.last_seq))
                return result.as_dict()
            envelopes = args[0] if method == "dispatch_many" else [args[0]]
            for envelope in envelopes:
                payload = envelope.payload
                assert isinstance(payload, ObserveBoundaryJob)
                self.arrivals.append(("job", payload.terminal_end_seq))
                self.job_events_paths.append(payload.events_path)
            ids = [envelope.job_id for envelope in envelopes]
            return ids if method == "dispatch_many" else ids[0]

    def close(self) -> None:
        pass


def _client(tmp_path: Path, link: ShippingLink) -> OmrayClient:
    return OmrayClient(
        settings={
            "model": "builtin/extractive",
            "storage": {"database": str(tmp_path / "data" / "om.sqlite")},
        },
        cwd=tmp_path / "agent",
        link=link,
        hook_timeout_s=DEADLINE_S,
        call_timeout_s=DEADLINE_S,
        ship_events=True,
    )


def test_each_job_arrives_after_the_events_it_observes_and_names_the_log(tmp_path: Path) -> None:
    link = ShippingLink(tmp_path / "data" / "om.sqlite")
    client = _client(tmp_path, link)
    events_path = client.events_path("s1")
    turns = demo_session("s1")
    for turn in turns:
        client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
    assert client.outbox.wait_empty(10)
    logged = [
        event.model_dump(mode="json") for event in iter_unredacted_events(link.log.path("s1"), 1, 10**6)
    ]
    agent = [event.model_dump(mode="json") for event in iter_unredacted_events(events_path, 1, 10**6)]
    assert logged == agent  # every event once, in order
    shipped_through = 0
    for kind, seq in link.arrivals:
        if kind == "events":
            shipped_through = seq
        else:
            assert seq <= shipped_through, "a job arrived before the events it observes"
    jobs = [seq for kind, seq in link.arrivals if kind == "job"]
    assert len(jobs) == len(turns)
    # Built naming the agent's file; sent naming the log beside the database.
    assert set(link.job_events_paths) == {shipped_events_path(str(client.db_path.resolve()), "s1")}


def test_the_hook_returns_by_its_deadline_while_the_data_node_does_not_answer(tmp_path: Path) -> None:
    link = ShippingLink(tmp_path / "data" / "om.sqlite", failures=3)
    client = _client(tmp_path, link)
    events_path = client.events_path("s1")
    turn = demo_session("s1")[0]
    started = time.monotonic()
    answer = client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
    assert time.monotonic() - started < DEADLINE_S + 2.0
    assert answer is None  # not accepted yet: the events go first
    assert client.outbox.wait_empty(20)  # then everything arrives, once
    assert [kind for kind, _ in link.arrivals] == ["events", "job"]


def test_a_client_that_restarts_ships_only_what_the_log_lacks(tmp_path: Path) -> None:
    link = ShippingLink(tmp_path / "data" / "om.sqlite")
    first = _client(tmp_path, link)
    events_path = first.events_path("s1")
    turns = demo_session("s1")
    first.after_turn_commit(commit_turn(events_path, turns[0]), events_path=events_path)
    assert first.outbox.wait_empty(10)
    second = _client(tmp_path, link)  # a new agent process: it asks the log how far it goes
    second.after_turn_commit(commit_turn(events_path, turns[1]), events_path=events_path)
    assert second.outbox.wait_empty(10)
    assert second.shipper.batches_sent == 1
    logged = list(iter_unredacted_events(link.log.path("s1"), 1, 10**6))
    assert [event.seq for event in logged] == list(range(1, len(logged) + 1))


def test_what_leaves_the_agents_machine_is_redacted(tmp_path: Path) -> None:
    link = ShippingLink(tmp_path / "data" / "om.sqlite")
    client = _client(tmp_path, link)
    events_path = client.events_path("s1")
    secret = "sk-ant-" + "a1B2c3D4e5F6g7H8i9J0"
    common = {"schema_version": "1.0", "run_id": "s1", "turn_no": 1, "ts": "2026-01-01T00:00:00+00:00"}
    turn = [
        {
            **common,
            "seq": 1,
            "type": "agent_command_applied",
            "payload": {"text": f"use {secret} <private>my notes</private>"},
        },
        {**common, "seq": 2, "type": "agent_end", "payload": {"reason": "completed"}},
    ]
    client.after_turn_commit(commit_turn(events_path, turn), events_path=events_path)
    assert client.outbox.wait_empty(10)
    shipped = link.log.path("s1").read_text(encoding="utf-8")
    assert secret in events_path.read_text(encoding="utf-8")  # the agent's own file keeps its text
    assert secret not in shipped and "my notes" not in shipped
    assert "[redacted:api-key]" in shipped and "[private]" in shipped


class RemoteDataLink:
    """A runtime whose database lives on another node; its ReaderActor answers read tools."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[str, str]] = []

    def call(self, method: str, args: tuple[Any, ...], timeout_s: float) -> Any:
        if method == "locate_database":
            return {"placement": {"node": "a"}, "local": False}
        if method == "read_tool":
            if self.fail:
                raise RuntimeUnavailableError("the data node did not answer")
            _db_path, operation, kwargs = args
            self.calls.append((operation, str(sorted(kwargs))))
            return {"ok": True, "answered_on": "a", "operation": operation}
        raise AssertionError(method)

    def close(self) -> None:
        pass


def test_reads_of_a_database_elsewhere_go_to_its_reader(tmp_path: Path) -> None:
    link = RemoteDataLink()
    client = OmrayClient(settings={"semantic": None}, cwd=tmp_path, link=link)
    assert client.memory_search({"query": "x"}, session_id="s1")["answered_on"] == "a"
    assert client.recall("s1", {"id": "a" * 12})["operation"] == "recall"
    assert client.call_tool("memory_search", '{"query": "x"}', "s1")["operation"] == "call_tool"
    assert [operation for operation, _ in link.calls] == ["memory_search", "recall", "call_tool"]
    assert all("settings_block" in kwargs for _, kwargs in link.calls)


def test_a_reader_that_does_not_answer_is_a_storage_unavailable_answer(tmp_path: Path) -> None:
    client = OmrayClient(settings={"semantic": None}, cwd=tmp_path, link=RemoteDataLink(fail=True))
    answer = client.memory_search({"query": "x"})
    assert answer["ok"] is False and answer["error"] == "storage_unavailable"
