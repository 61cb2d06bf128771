"""The QueueActor shell without Ray: a real QueueStore file, a fake worker pool, a manual clock."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from actors.queue.actor import QueueActor
from actors.queue.figures import ModelUsage, QueueFigures
from actors.queue.retry import RetryPolicy
from persistence.writers.queue_store import QueueStore
from protocol.errors import InvalidPayloadError
from protocol.jobs import SEMANTIC_INDEX_HANDLER, JobEnvelope, SemanticIndexJob
from protocol.outcomes import JobFailed, JobSucceeded
from protocol.queue_rows import JobAccepted

from .helpers import reflect


class FakeWorkers:
    """Runs attempts on demand; outcomes are decided by a function of (job_id, attempt)."""

    def __init__(self, decide: Any) -> None:
        self.decide = decide
        self.started: list[tuple[str, int]] = []
        self._pending: list[tuple[int, dict[str, Any] | None]] = []

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        self.started.append((envelope["job_id"], attempt))
        self._pending.append((job_seq, self.decide(envelope["job_id"], attempt)))

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        done, self._pending = self._pending, []
        return done


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class ExplodingMetrics:
    def queue_figures(self, *args: Any) -> None:
        raise RuntimeError("exporter down")

    attempt_finished = job_failed = model_usage = queue_figures


def _job(n: int, db_path: str | None = None) -> JobEnvelope:
    """An index job; each ``n`` has a database (so a lane) of its own unless ``db_path`` is given."""
    payload = SemanticIndexJob(session_id="s", db_path=db_path or f"/x/{n}")
    return JobEnvelope(job_id=f"j{n}", correlation_id="s", payload=payload)


def _ok(job_id: str, attempt: int) -> dict[str, Any]:
    return JobSucceeded(job_id=job_id, detail={"prompt_tokens": 3, "completion_tokens": 1}).model_dump()


def _drain(queue: QueueActor, clock: Clock, steps: int = 50) -> None:
    for _ in range(steps):
        queue.tick(0)
        clock.now += 10


def test_dispatch_is_durable_before_it_returns(tmp_path: Path) -> None:
    store = QueueStore(tmp_path / "q.sqlite")
    queue = QueueActor(store, FakeWorkers(_ok), start_loop=False)
    assert queue.dispatch(_job(1)) == "j1"
    assert [row.envelope.job_id for row in store.list_unfinished_jobs()] == ["j1"]


def test_jobs_run_in_order_and_finish_once_even_with_failing_metrics(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    workers = FakeWorkers(_ok)
    queue = QueueActor(store, workers, clock=clock, start_loop=False, metrics=ExplodingMetrics())  # type: ignore[arg-type]
    for n in range(5):
        queue.dispatch(_job(n))
    _drain(queue, clock)
    assert workers.started == [(f"j{n}", 1) for n in range(5)]
    assert store.job_counts().succeeded == 5 and queue.is_idle()


class RecordingMetrics:
    def __init__(self) -> None:
        self.usage: list[tuple[str, ModelUsage]] = []
        self.figures: list[QueueFigures] = []

    def queue_figures(self, figures: QueueFigures) -> None:
        self.figures.append(figures)

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        """Ignore."""

    def job_failed(self, handler_id: str, reason: str) -> None:
        """Ignore."""

    def model_usage(self, handler_id: str, usage: ModelUsage) -> None:
        self.usage.append((handler_id, usage))


def test_token_metrics_carry_the_model_a_job_reports(tmp_path: Path) -> None:
    store, clock, metrics = QueueStore(tmp_path / "q.sqlite"), Clock(), RecordingMetrics()

    def with_model(job_id: str, attempt: int) -> dict[str, Any]:
        detail = {
            "prompt_tokens": 9,
            "cached_prompt_tokens": 4,
            "completion_tokens": 2,
            "model": "local/qwen",
        }
        return JobSucceeded(job_id=job_id, detail=detail).model_dump()

    queue = QueueActor(store, FakeWorkers(with_model), clock=clock, start_loop=False, metrics=metrics)
    queue.dispatch(_job(1))
    _drain(queue, clock)
    [(_, usage)] = metrics.usage
    assert usage.model == "local/qwen"
    assert dict(usage.tokens) == {"prompt": 9, "cached_prompt": 4, "completion": 2}


class HoldingWorkers(FakeWorkers):
    """Attempts start and never end: a steady load."""

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        return []


def test_the_gauges_report_what_status_shows(tmp_path: Path) -> None:
    store, clock, metrics = QueueStore(tmp_path / "q.sqlite"), Clock(), RecordingMetrics()
    queue = QueueActor(
        store,
        HoldingWorkers(_ok),
        clock=clock,
        start_loop=False,
        metrics=metrics,
        max_in_flight=3,
        capacity={SEMANTIC_INDEX_HANDLER: 2},
    )
    for n in range(5):
        queue.dispatch(_job(n))
    queue.tick(0)
    status = queue.status()
    assert metrics.figures[-1].as_dict() == status["figures"]
    # Five lanes, two running (the pool's two slots, below the limit of three), three waiting.
    assert status["figures"] == {
        "depth": 3,
        "in_flight": 2,
        "slots": 2,
        "lanes": 5,
        "busy_lanes": 2,
        "held_projects": 0,
    }


def test_restart_resumes_the_job_that_was_running(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    first = FakeWorkers(lambda job_id, attempt: None)  # never collected: the "actor" dies
    queue = QueueActor(store, first, clock=clock, start_loop=False)
    queue.dispatch(_job(1))  # durable and started at once (a free slot); then the process dies
    queue.dispatch(_job(2))
    assert first.started == [("j1", 1)]
    second = FakeWorkers(_ok)
    restarted = QueueActor(QueueStore(tmp_path / "q.sqlite"), second, clock=clock, start_loop=False)
    _drain(restarted, clock)
    assert second.started == [("j1", 2), ("j2", 1)]  # the interrupted attempt counted
    assert store.job_counts().succeeded == 2


def test_always_failing_job_gets_four_attempts_and_one_event(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()

    def fail(job_id: str, attempt: int) -> dict[str, Any]:
        return JobFailed(job_id=job_id, retryable=True, reason="transient_runtime").model_dump()

    workers = FakeWorkers(fail)
    queue = QueueActor(store, workers, clock=clock, policy=RetryPolicy(base_delay_s=1.0), start_loop=False)
    queue.dispatch(_job(9))
    _drain(queue, clock)
    assert [attempt for _, attempt in workers.started] == [1, 2, 3, 4]
    events = queue.runtime_events("s")
    assert len(events) == 1 and events[0]["payload"]["attempts"] == 4
    assert queue.status()["recent_failures"][0]["job_id"] == "j9"


def test_failures_of_one_session_id_in_two_databases_stay_apart(tmp_path: Path) -> None:
    """Issue 33: ``runtime_events(session)`` listed another project's failures, naming no database."""
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()

    def fail(job_id: str, attempt: int) -> dict[str, Any]:
        return JobFailed(job_id=job_id, retryable=False, reason="invalid_payload").model_dump()

    queue = QueueActor(store, FakeWorkers(fail), clock=clock, start_loop=False)
    queue.dispatch(_job(1, db_path="/project-a/om.sqlite"))
    queue.dispatch(_job(2, db_path="/project-b/om.sqlite"))
    _drain(queue, clock)
    mine = queue.runtime_events("s", 0, "/project-a/om.sqlite")
    assert [(event["payload"]["job_id"], event["db_path"]) for event in mine] == [
        ("j1", "/project-a/om.sqlite")
    ]
    theirs = queue.runtime_events("s", 0, "/project-b/om.sqlite")
    assert [event["payload"]["job_id"] for event in theirs] == ["j2"]
    assert {event["db_path"] for event in queue.runtime_events("s")} == {
        "/project-a/om.sqlite",
        "/project-b/om.sqlite",
    }


class FlakyStore:
    """A QueueStore whose named methods fail a set number of times (a StoreActor down, a timeout)."""

    def __init__(self, store: QueueStore, fail: dict[str, int], *, after_commit: bool = False) -> None:
        self._store = store
        self.fail = fail
        self._after_commit = after_commit

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._store, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.fail.get(name, 0) > 0:
                self.fail[name] -= 1
                if self._after_commit:  # the write landed, the reply was lost
                    method(*args, **kwargs)
                raise TimeoutError(f"{name} did not answer")
            return method(*args, **kwargs)

        return call


def test_a_dispatch_whose_commit_failed_is_written_by_the_next_commit(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    flaky = FlakyStore(store, {"apply_job_writes": 1})
    workers = FakeWorkers(_ok)
    queue = QueueActor(flaky, workers, clock=clock, start_loop=False)
    with contextlib.suppress(TimeoutError):
        queue.dispatch(_job(1))  # the caller sees the error; the job stays queued, not started
    assert workers.started == [] and store.job_counts().pending == 0
    assert queue.dispatch(_job(1)) == "j1"  # dispatching it again is safe: one job, now durable
    _drain(queue, clock)
    assert workers.started == [("j1", 1)]
    assert store.job_counts().model_dump() == {"pending": 0, "running": 0, "succeeded": 1, "failed": 0}


def _drain_through_errors(queue: QueueActor, clock: Clock, steps: int = 50) -> None:
    for _ in range(steps):
        with contextlib.suppress(Exception):  # the loop logs a failed step and goes on
            queue.tick(0)
        clock.now += 10


def test_a_failed_start_write_does_not_leave_the_job_stuck_running(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    flaky = FlakyStore(store, {})
    workers = FakeWorkers(_ok)
    queue = QueueActor(flaky, workers, clock=clock, start_loop=False)
    queue.dispatch(_job(1))
    queue.dispatch(_job(2))
    flaky.fail["apply_job_writes"] = 1  # the batch recording j1's outcome and j2's start
    _drain_through_errors(queue, clock)
    assert workers.started == [("j1", 1), ("j2", 1)]
    assert store.job_counts().model_dump() == {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}
    assert queue.is_idle()


def test_a_failed_outcome_write_loses_no_other_outcome(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    flaky = FlakyStore(store, {})
    workers = FakeWorkers(_ok)
    queue = QueueActor(flaky, workers, clock=clock, start_loop=False, max_in_flight=2)
    queue.dispatch(_job(1))
    queue.dispatch(_job(2))
    flaky.fail["apply_job_writes"] = 2  # both outcomes' batch fails twice
    _drain_through_errors(queue, clock)
    assert workers.started == [("j1", 1), ("j2", 1)]
    assert store.job_counts().model_dump() == {"pending": 0, "running": 0, "succeeded": 2, "failed": 0}
    assert queue.is_idle()


def test_retried_writes_whose_reply_was_lost_are_idempotent(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    flaky = FlakyStore(store, {}, after_commit=True)

    def fail(job_id: str, attempt: int) -> dict[str, Any]:
        return JobFailed(job_id=job_id, retryable=True, reason="transient_runtime").model_dump()

    workers = FakeWorkers(fail)
    queue = QueueActor(flaky, workers, clock=clock, policy=RetryPolicy(base_delay_s=1.0), start_loop=False)
    queue.dispatch(_job(9))
    flaky.fail["apply_job_writes"] = 3
    _drain_through_errors(queue, clock)
    assert [attempt for _, attempt in workers.started] == [1, 2, 3, 4]
    assert len(queue.runtime_events("s")) == 1  # one job_failed event, not one per delivery
    assert store.job_counts().model_dump() == {"pending": 0, "running": 0, "succeeded": 0, "failed": 1}
    assert queue.is_idle()


def test_a_worker_that_cannot_be_reached_costs_one_attempt(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()

    class Unreachable(FakeWorkers):
        def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
            if attempt == 1:
                raise RuntimeError("actor handle gone")
            super().start(handler_id, job_seq, envelope, attempt)

    workers = Unreachable(_ok)
    queue = QueueActor(store, workers, clock=clock, policy=RetryPolicy(base_delay_s=1.0), start_loop=False)
    queue.dispatch(_job(1))
    _drain_through_errors(queue, clock)
    assert workers.started == [("j1", 2)]
    assert store.job_counts().succeeded == 1 and queue.is_idle()


def test_a_malformed_worker_outcome_costs_one_attempt(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()

    def decide(job_id: str, attempt: int) -> dict[str, Any]:
        return {"kind": "bogus"} if attempt == 1 else _ok(job_id, attempt)

    workers = FakeWorkers(decide)
    queue = QueueActor(store, workers, clock=clock, policy=RetryPolicy(base_delay_s=1.0), start_loop=False)
    queue.dispatch(_job(1))
    _drain_through_errors(queue, clock)
    assert workers.started == [("j1", 1), ("j1", 2)]
    assert store.job_counts().succeeded == 1 and queue.is_idle()


def test_concurrent_dispatches_are_group_committed_and_all_durable(tmp_path: Path) -> None:
    import threading

    store = QueueStore(tmp_path / "q.sqlite")
    first_write_started, release = threading.Event(), threading.Event()
    accepts_per_commit: list[int] = []

    class SlowFirstCommit:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def apply_job_writes(self, writes: Any) -> Any:
            accepts_per_commit.append(sum(1 for w in writes if isinstance(w, JobAccepted)))
            if len(accepts_per_commit) == 1:
                first_write_started.set()
                release.wait(5)
            return store.apply_job_writes(writes)

    queue = QueueActor(SlowFirstCommit(), FakeWorkers(_ok), max_in_flight=1)  # type: ignore[arg-type]
    try:
        returned: list[str] = []
        first = threading.Thread(target=lambda: returned.append(queue.dispatch(_job(0))))
        first.start()
        assert first_write_started.wait(5)
        others = [
            threading.Thread(target=lambda n=n: returned.append(queue.dispatch(_job(n)))) for n in range(1, 6)
        ]
        for thread in others:
            thread.start()
        # The five queue up while the committer is in the first transaction; none has returned.
        while queue.status()["unwritten"] < 5:
            threading.Event().wait(0.01)
        assert returned == []
        release.set()
        for thread in [first, *others]:
            thread.join(5)
        assert accepts_per_commit[:2] == [1, 5]
        assert sorted(returned) == [f"j{n}" for n in range(6)]
        # Every dispatch was timed from accept to durable: all six waited on a held commit.
        figures = queue.status()["commits"]
        assert figures["dispatch_ms_p95"] >= figures["dispatch_ms_p50"] > 0
        assert figures["commit_ms_max"] >= figures["commit_ms_p95"] > 0  # the held first commit
    finally:
        queue.stop()
    assert {row.envelope.job_id for row in store.list_unfinished_jobs()} <= {f"j{n}" for n in range(6)}


def test_jobs_of_two_databases_with_one_id_are_two_jobs(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    workers = FakeWorkers(_ok)
    queue = QueueActor(store, workers, clock=clock, start_loop=False, max_in_flight=2)
    one = JobEnvelope(job_id="same", payload=SemanticIndexJob(session_id="s", db_path="/project-a/om.sqlite"))
    two = JobEnvelope(job_id="same", payload=SemanticIndexJob(session_id="s", db_path="/project-b/om.sqlite"))
    queue.dispatch(one)
    queue.dispatch(two)
    queue.dispatch(one)  # truly the same job: not queued twice
    _drain(queue, clock)
    assert store.job_counts().succeeded == 2 and workers.started == [("same", 1), ("same", 1)]


class ThreadedWorkers:
    """Attempts finish on their own threads after a short random hold, like real workers."""

    def __init__(self) -> None:
        import random
        import threading

        self._random = random.Random(7)
        self._changed = threading.Condition()
        self._finished: list[tuple[int, dict[str, Any] | None]] = []
        self.running_lanes: set[str] = set()
        self.overlaps = 0
        self.starts: list[tuple[str, str]] = []  # (lane, job_id) in start order
        self.ready: Any = lambda: None  # what to call once an outcome is ready (see ReadyWorkers)

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        import threading

        lane = envelope["payload"]["session_id"]
        with self._changed:
            self.overlaps += lane in self.running_lanes
            self.running_lanes.add(lane)
            self.starts.append((lane, envelope["job_id"]))
        hold = self._random.uniform(0, 0.003)

        def finish() -> None:
            threading.Event().wait(hold)
            with self._changed:
                self.running_lanes.discard(lane)
                self._finished.append((job_seq, _ok(envelope["job_id"], attempt)))
                self._changed.notify_all()
            self.ready()

        threading.Thread(target=finish, daemon=True).start()

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        with self._changed:
            if not self._finished and timeout_s > 0:
                self._changed.wait(timeout_s)
            done, self._finished = self._finished, []
        return done


class ReadyWorkers(ThreadedWorkers):
    """Threaded workers that tell the queue when outcomes are ready, as the Ray pool does: the
    queue's loop thread then collects them itself, with no collector thread."""

    def on_ready(self, callback: Any) -> None:
        self.ready = callback

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        assert timeout_s == 0, "the loop collects what is ready; nothing waits in poll"
        return super().poll(timeout_s)


THREADED_POOLS = pytest.mark.parametrize("pool", [ThreadedWorkers, ReadyWorkers], ids=["collector", "loop"])
"""The queue's threaded paths: a collector thread waits for outcomes, or the pool wakes the loop."""


@THREADED_POOLS
def test_many_callers_with_the_committer_lose_nothing_and_keep_lane_order(
    tmp_path: Path, pool: type[ThreadedWorkers]
) -> None:
    import threading
    import time

    store = QueueStore(tmp_path / "q.sqlite", synchronous="NORMAL")
    workers = pool()
    queue = QueueActor(store, workers, max_in_flight=6)
    returned: dict[str, list[str]] = {}

    def agent(lane: int) -> None:
        session = f"s{lane}"
        for n in range(25):
            job = JobEnvelope(job_id=f"{session}-{n:03d}", payload=reflect(f"x{n}", session).payload)
            returned.setdefault(session, []).append(queue.dispatch(job))

    try:
        agents = [threading.Thread(target=agent, args=(lane,)) for lane in range(12)]
        for thread in agents:
            thread.start()
        for thread in agents:
            thread.join(30)
        deadline = time.monotonic() + 30
        while not queue.is_idle() and time.monotonic() < deadline:
            time.sleep(0.01)
        completed = queue.status()["completed_since_start"]  # idle: its counters are up to date too
        collector = any(thread.name == "omray-queue-collect" for thread in threading.enumerate())
    finally:
        queue.stop()
    counts = store.job_counts()
    assert counts.model_dump() == {"pending": 0, "running": 0, "succeeded": 300, "failed": 0}
    assert completed == 300
    assert collector is (pool is ThreadedWorkers)  # a pool that wakes the loop needs no collector
    assert workers.overlaps == 0
    for session, job_ids in returned.items():
        assert [job_id for lane, job_id in workers.starts if lane == session] == job_ids


def test_dispatch_many_accepts_every_job_in_order_in_one_commit(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    workers = FakeWorkers(_ok)
    queue = QueueActor(store, workers, clock=clock, start_loop=False)
    before = queue.status()["commits"]["transactions"]
    jobs = [_job(1), _job(2).model_dump(mode="json"), _job(1), _job(3)]  # a repeated id is one job
    assert queue.dispatch_many(jobs) == ["j1", "j2", "j1", "j3"]
    assert queue.status()["commits"]["transactions"] == before + 1
    assert [row.envelope.job_id for row in store.list_unfinished_jobs()] == ["j1", "j2", "j3"]
    assert queue.dispatch_many([_job(2), _job(4)]) == ["j2", "j4"]  # j2 still pending: not queued twice
    _drain(queue, clock)
    assert sorted(job_id for job_id, _ in workers.started) == ["j1", "j2", "j3", "j4"]


def test_dispatch_many_with_one_bad_envelope_accepts_none(tmp_path: Path) -> None:
    store = QueueStore(tmp_path / "q.sqlite")
    queue = QueueActor(store, FakeWorkers(_ok), start_loop=False)
    bad = {**_job(2).model_dump(mode="json"), "payload": {"kind": "no_such_kind"}}
    for envelopes in ([_job(1), bad], _job(1).model_dump(mode="json"), "j1", [_job(n) for n in range(300)]):
        with contextlib.suppress(InvalidPayloadError):
            queue.dispatch_many(envelopes)  # type: ignore[arg-type]
            raise AssertionError("accepted a bad batch")
    assert store.list_unfinished_jobs() == []
    assert queue.status()["depth"] == 0


class BatchingWorkers(FakeWorkers):
    """A pool with ``start_many``: records each call's jobs; refuses the job ids in ``refuse`` once."""

    def __init__(self, decide: Any, refuse: set[str]) -> None:
        super().__init__(decide)
        self.calls: list[list[str]] = []
        self.refuse = refuse

    def start_many(self, starts: list[tuple[str, int, Mapping[str, Any], int]]) -> list[int]:
        self.calls.append([envelope["job_id"] for _, _, envelope, _ in starts])
        failed = []
        for handler_id, job_seq, envelope, attempt in starts:
            if envelope["job_id"] in self.refuse:
                self.refuse.discard(envelope["job_id"])
                failed.append(job_seq)
            else:
                self.start(handler_id, job_seq, envelope, attempt)
        return failed


def test_the_starts_of_one_commit_go_out_together_and_a_refused_one_is_retried(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    workers = BatchingWorkers(_ok, refuse={"j2"})
    queue = QueueActor(store, workers, clock=clock, start_loop=False, max_in_flight=8)
    queue.dispatch_many([_job(1), _job(2), _job(3)])
    assert workers.calls[0] == ["j1", "j2", "j3"]  # one commit, one call
    _drain(queue, clock)
    assert queue.job_counts()["succeeded"] == 3
    assert sorted(workers.started) == [("j1", 1), ("j2", 2), ("j3", 1)]  # the refused start cost one attempt


@THREADED_POOLS
def test_one_agents_finishes_ride_with_its_next_job_and_the_last_is_still_written(
    tmp_path: Path, pool: type[ThreadedWorkers]
) -> None:
    import time

    store = QueueStore(tmp_path / "q.sqlite", synchronous="NORMAL")
    queue = QueueActor(store, pool(), max_in_flight=2)
    try:
        for n in range(40):
            queue.dispatch(JobEnvelope(job_id=f"a-{n:03d}", payload=reflect(f"x{n}", "a").payload))
            time.sleep(0.004)  # the job finishes before the next one arrives, within the linger
        deadline = time.monotonic() + 30
        while not queue.is_idle() and time.monotonic() < deadline:
            time.sleep(0.01)
        transactions = queue.status()["commits"]["transactions"]
    finally:
        queue.stop()
    assert store.job_counts().model_dump() == {"pending": 0, "running": 0, "succeeded": 40, "failed": 0}
    # Without sharing: an accept-and-start and a finish per job, about 80.
    assert transactions <= 60


class _SlowFinishStore:
    """A real QueueStore whose commits carrying a success record wait until released."""

    def __init__(self, store: QueueStore) -> None:
        import threading

        self._store = store
        self.in_commit = threading.Event()
        self.release = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def apply_job_writes(self, writes: Any) -> int:
        from protocol.queue_rows import JobFinished

        if any(isinstance(write, JobFinished) for write in writes):
            self.in_commit.set()
            self.release.wait(5)
        return self._store.apply_job_writes(writes)


@THREADED_POOLS
def test_the_queue_is_idle_only_once_its_last_writes_are_durable(
    tmp_path: Path, pool: type[ThreadedWorkers]
) -> None:
    store = QueueStore(tmp_path / "q.sqlite")
    slow = _SlowFinishStore(store)
    queue = QueueActor(slow, pool())
    try:
        queue.dispatch(_job(1))
        assert slow.in_commit.wait(5)  # the success record is out of the queue, in its commit
        idle_during_commit, running = queue.is_idle(), store.job_counts().running
        slow.release.set()
        import time

        deadline = time.monotonic() + 10
        while not queue.is_idle() and time.monotonic() < deadline:
            time.sleep(0.005)
        idle_after = queue.is_idle()
    finally:
        slow.release.set()
        queue.stop()
    assert running == 1 and not idle_during_commit
    assert idle_after and store.job_counts().succeeded == 1


def test_a_batch_whose_writes_cannot_be_built_is_put_back_and_written_later(tmp_path: Path) -> None:
    from unittest import mock

    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    queue = QueueActor(store, FakeWorkers(_ok), clock=clock, start_loop=False)
    import actors.queue.committer as actor_module

    original = actor_module.writes_for
    with mock.patch.object(actor_module, "writes_for", side_effect=RuntimeError("boom")):
        with contextlib.suppress(RuntimeError):
            queue.dispatch(_job(1))  # its own commit fails before any store call
        assert not queue.is_idle() and store.job_counts().pending == 0
    assert actor_module.writes_for is original
    _drain(queue, clock)
    assert store.job_counts().succeeded == 1 and queue.is_idle()


def test_an_outcome_naming_another_job_is_a_lost_attempt_not_a_stuck_lane(tmp_path: Path) -> None:
    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()

    def decide(job_id: str, attempt: int) -> dict[str, Any]:
        return _ok("someone-else" if attempt == 1 else job_id, attempt)

    workers = FakeWorkers(decide)
    queue = QueueActor(store, workers, clock=clock, start_loop=False, policy=RetryPolicy(base_delay_s=0.0))
    queue.dispatch(_job(1))
    queue.dispatch(_job(2))
    _drain(queue, clock)
    assert store.job_counts().succeeded == 2 and queue.is_idle()
    assert sorted(workers.started) == [("j1", 1), ("j1", 2), ("j2", 1), ("j2", 2)]  # each retried once


class _BlockingFailureMetrics:
    """Metrics whose job-failed report waits until released (the last effect of a give-up)."""

    def __init__(self) -> None:
        import threading

        self.reporting = threading.Event()
        self.release = threading.Event()

    def queue_figures(self, figures: QueueFigures) -> None:
        """Ignore."""

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        """Ignore."""

    def model_usage(self, *args: Any) -> None:
        """Ignore."""

    def job_failed(self, handler_id: str, reason: str) -> None:
        self.reporting.set()
        self.release.wait(5)


class _FailingReadyWorkers(ReadyWorkers):
    """Every attempt fails, not retryable (a policy that gives up on those stops at once), and the
    pool wakes the loop."""

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        from protocol.outcomes import JobFailed

        failed = JobFailed(job_id=envelope["job_id"], retryable=False, reason="invalid_payload")
        with self._changed:
            self._finished.append((job_seq, failed.model_dump()))
        self.ready()


def test_the_queue_is_not_idle_while_a_durable_batch_is_still_being_carried_out(tmp_path: Path) -> None:
    import time

    store = QueueStore(tmp_path / "q.sqlite")
    metrics = _BlockingFailureMetrics()
    policy = RetryPolicy(give_up_on_non_retryable=True)
    queue = QueueActor(store, _FailingReadyWorkers(), policy=policy, metrics=metrics)  # type: ignore[arg-type]
    try:
        queue.dispatch(_job(1))
        assert metrics.reporting.wait(5)  # the give-up is durable; its effects are being carried out
        durable_failed, idle_meanwhile = store.job_counts().failed, queue.is_idle()
        metrics.release.set()
        deadline = time.monotonic() + 10
        while not queue.is_idle() and time.monotonic() < deadline:
            time.sleep(0.005)
        failures = queue.status()["recent_failures"]
    finally:
        metrics.release.set()
        queue.stop()
    assert durable_failed == 1 and not idle_meanwhile
    assert [failure["job_id"] for failure in failures] == ["j1"]  # idle: the report is in


def test_a_held_job_waits_durably_and_omray_retry_rechecks_the_budget_at_once(tmp_path: Path) -> None:
    from protocol.outcomes import JOB_HELD_EVENT_TYPE, JobHeld

    from .helpers import observe

    store, clock = QueueStore(tmp_path / "q.sqlite"), Clock()
    budget = {"left": False}

    def decide(job_id: str, attempt: int) -> dict[str, Any]:
        if not budget["left"]:
            until = clock.now + 3600
            return JobHeld(job_id=job_id, reason="budget_usd", until=until, spent=5.2, cap=5.0).model_dump()
        return _ok(job_id, attempt)

    workers = FakeWorkers(decide)
    queue = QueueActor(store, workers, clock=clock, start_loop=False)
    queue.dispatch(observe("o1", "s1", 3, db_path="/p/om.sqlite"))
    queue.dispatch(observe("o2", "s2", 3, db_path="/p/om.sqlite"))
    queue.tick(0)
    queue.tick(0)
    status = queue.status()
    [held] = status["held_by_project"]
    assert (held["db_path"], held["jobs"], held["reason"], status["held"]) == (
        "/p/om.sqlite",
        2,
        "budget_usd",
        2,
    )
    assert status["figures"]["held_projects"] == 1 and not queue.is_idle()
    rows = store.list_unfinished_jobs()
    assert [(r.state, r.attempts, r.held_attempts, r.failure_reason) for r in rows] == [
        ("pending", 1, 1, "budget_usd"),  # o1 ran and found the budget used up
        ("pending", 0, 0, None),  # o2, of another session of the project, never started
    ]
    [event] = queue.runtime_events("s1")
    assert event["event_type"] == JOB_HELD_EVENT_TYPE and event["payload"]["reason"] == "budget_usd"
    queue.tick(0)
    assert workers.started == [("o1", 1)]  # nothing starts before the re-check

    budget["left"] = True  # the user raised the cap; `omray retry` re-checks at once
    assert queue.retry_failed("/p/om.sqlite") == {"requeued": 0, "rechecked": 1}
    _drain(queue, clock, steps=5)
    assert workers.started == [("o1", 1), ("o1", 2), ("o2", 1)]
    assert store.job_counts().succeeded == 2 and queue.is_idle()
    assert queue.status()["held_by_project"] == []
