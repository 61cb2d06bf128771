"""``WatchSource`` and ``BackgroundQueueReader``: stale lines go away; a busy or missing database
or an unreachable queue becomes a "waiting for …" line, never an error."""

from __future__ import annotations

import io
from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import cluster.commands.watch as watch_module
from cluster.client import OmrayClient
from cluster.commands.watch import BackgroundQueueReader, QueueUnavailableError, WatchSource, watch_runtime
from persistence.writers.store import Store
from protocol.errors import StorageError
from tests.unit.cluster.commands.watch.conftest import NOW, activity

STATUS: dict[str, Any] = {"depth": 2, "in_flight": [], "recent_failures": []}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> datetime:
        return self.now


def _source(client: OmrayClient, clock: Clock, **kw: Any) -> WatchSource:
    fields: dict[str, Any] = {"read_queue": lambda: STATUS, "now": clock}
    fields.update(kw)
    return WatchSource(client, **fields)


def _sessions(source: WatchSource) -> list[str]:
    return [session_id for session_id, _ in source.snapshot().sessions]


def test_cleared_and_stale_lines_disappear(client: OmrayClient, store: Store) -> None:
    clock = Clock()
    source = _source(client, clock)
    store.upsert_activity(activity("s-cleared", job_id="job-c"))
    store.upsert_activity(activity("s-ageing", age_s=200))
    first = source.snapshot()
    assert [session_id for session_id, _ in first.sessions] == ["s-ageing", "s-cleared"]
    assert first.queue_depth == 2 and first.waiting == ()
    store.clear_activity("s-cleared", "job-c")
    assert _sessions(source) == ["s-ageing"]
    clock.now = NOW + timedelta(seconds=100)  # exactly 300 s old: still shown
    assert _sessions(source) == ["s-ageing"]
    clock.now = NOW + timedelta(seconds=101)
    assert _sessions(source) == []


def test_session_filter(client: OmrayClient, store: Store) -> None:
    store.upsert_activity(activity("s-1"))
    store.upsert_activity(activity("s-2"))
    assert _sessions(_source(client, Clock(), session_filter="s-2")) == ["s-2"]


def test_busy_database_is_a_waiting_line(
    client: OmrayClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def busy(*, now: datetime | None = None) -> list[dict[str, Any]]:
        raise StorageError("reading 'om.sqlite' failed (OperationalError)")

    monkeypatch.setattr(client, "activities", busy)
    snapshot = _source(client, Clock()).snapshot()
    assert snapshot.sessions == ()
    assert snapshot.queue_depth == 2  # the queue part still shows
    assert snapshot.waiting == ("waiting for the memory database (busy) …",)


def test_unreadable_database_file_is_a_waiting_line(client: OmrayClient, db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is not an sqlite database" * 200)
    snapshot = _source(client, Clock()).snapshot()
    assert snapshot.waiting == ("waiting for the memory database (busy) …",)


def test_missing_database_is_a_waiting_line(client: OmrayClient, db_path: Path) -> None:
    snapshot = _source(client, Clock()).snapshot()
    assert snapshot.waiting == (f"waiting for the memory database {str(db_path)!r} …",)
    assert not db_path.exists()


def test_unreachable_queue_is_a_waiting_line(client: OmrayClient, store: Store) -> None:
    store.upsert_activity(activity("s-1"))

    def unreachable() -> Mapping[str, Any]:
        raise ConnectionError("no route")

    snapshot = _source(client, Clock(), read_queue=unreachable).snapshot()
    assert snapshot.queue_depth is None
    assert snapshot.waiting == ("waiting for the queue 'unit.queue' …",)
    assert [session_id for session_id, _ in snapshot.sessions] == ["s-1"]


class Monotonic:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_background_reader_keeps_the_latest_answer_and_forgets_failures() -> None:
    answers: list[Any] = [STATUS, RuntimeError("queue restarting"), {"depth": 5}]

    def blocking() -> Mapping[str, Any]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return dict(answer)

    clock = Monotonic()
    reader = BackgroundQueueReader(blocking, max_age_s=5.0, clock=clock)
    with pytest.raises(QueueUnavailableError):
        reader.read()  # nothing answered yet
    reader.poll_once()
    assert reader.read()["depth"] == 2
    reader.poll_once()
    with pytest.raises(QueueUnavailableError):
        reader.read()
    reader.poll_once()
    assert reader.read()["depth"] == 5
    clock.now = 5.1
    with pytest.raises(QueueUnavailableError):
        reader.read()  # an old answer is not shown as current


def test_background_thread_answers() -> None:
    reader = BackgroundQueueReader(lambda: STATUS).start()
    try:
        assert reader.wait_first(10.0)
        assert reader.read()["depth"] == 2
    finally:
        reader.stop()


def test_watch_runtime_once_renders_queue_and_sessions(
    client: OmrayClient, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.upsert_activity(
        activity("s-now", age_s=0).model_copy(update={"updated_at": datetime.now(NOW.tzinfo).isoformat()})
    )
    monkeypatch.setattr(watch_module, "ray_queue_reader", lambda _client, _address: lambda: STATUS)
    out = io.StringIO()
    console = Console(file=out, width=120, color_system=None)
    assert watch_runtime(client, once=True, console=console) == 0
    frame = out.getvalue()
    assert "Queue depth: 2 · in flight: 0" in frame
    assert "  s-now  Observational memory: observer running on ~1,234-token chunk" in frame


def test_the_cost_report_line_shows_the_watched_sessions_usage(client: OmrayClient, store: Store) -> None:
    from cluster.commands.watch import render_watch
    from protocol.records import TokenUsageRecord

    records = [
        TokenUsageRecord(
            usage_id=f"u{index}",
            session_id=session,
            job_kind="observe",
            model="p/m",
            requests=1 + index,
            prompt_tokens=1000,
            cached_prompt_tokens=400,
            completion_tokens=50,
            recorded_at="2026-11-30T10:00:00+00:00",
        )
        for index, session in enumerate(["s-a", "s-b"])
    ]
    assert all(store.record_token_usage(record) for record in records)
    assert not store.record_token_usage(records[0])  # a repeated write of one loop counts once
    source = _source(client, Clock(), session_filter="s-b")
    frame = render_watch(source.snapshot()).plain
    assert "Model usage: 2 model requests, 1,000 prompt (400 cached), 50 completion tokens" in frame
    every = client.token_usage(None)["total"]
    assert every == {
        "requests": 3,
        "prompt_tokens": 2000,
        "cached_prompt_tokens": 800,
        "completion_tokens": 100,
    }
