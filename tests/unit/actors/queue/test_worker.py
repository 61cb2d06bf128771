"""The worker actor shell without Ray: attempts of one job never overlap in one worker."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from actors.worker import WorkerActor
from protocol.jobs import JobEnvelope

from .helpers import envelope


class _Recorder:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[str, int] = {}
        self.overlap: dict[str, int] = {}
        self.first_entered = threading.Event()
        self.release = threading.Event()

    def handler(self, job: JobEnvelope, attempt: int, context: Any) -> dict[str, Any]:
        with self.lock:
            self.running[job.job_id] = self.running.get(job.job_id, 0) + 1
            self.overlap[job.job_id] = max(self.overlap.get(job.job_id, 0), self.running[job.job_id])
        if job.job_id == "a" and attempt == 1:
            self.first_entered.set()
            self.release.wait(5)
        with self.lock:
            self.running[job.job_id] -= 1
        return {}


def test_a_redelivered_attempt_waits_for_the_running_attempt_of_the_same_job() -> None:
    # A restarted QueueActor re-dispatches the job whose attempt it lost track of, while that
    # attempt may still run in this (live) worker: the two must not run the handler at once.
    recorder = _Recorder()
    worker = WorkerActor("h", recorder.handler, context=None)  # type: ignore[arg-type]
    results: list[dict[str, Any]] = []
    first = threading.Thread(target=lambda: results.append(worker.handle(envelope("a").model_dump(), 1)))
    first.start()
    assert recorder.first_entered.wait(5)
    second = threading.Thread(target=lambda: results.append(worker.handle(envelope("a").model_dump(), 2)))
    second.start()
    other = worker.handle(envelope("b").model_dump(), 1)  # another job is not held up
    assert other["kind"] == "succeeded"
    time.sleep(0.2)
    recorder.release.set()
    first.join(5)
    second.join(5)
    assert [r["kind"] for r in results] == ["succeeded", "succeeded"]
    assert recorder.overlap["a"] == 1


def test_shutdown_closes_the_process_clients_before_a_kill() -> None:
    from actors.models.clients import worker_clients

    closed: list[str] = []

    class Client:
        def close(self) -> None:
            closed.append("x")

    pool = worker_clients()
    pool.close()
    pool.get(("test", "endpoint"), Client)
    worker = WorkerActor("h", lambda envelope, attempt, context: None, context=None)  # type: ignore[arg-type]
    assert worker.shutdown() == 1
    assert closed == ["x"] and len(pool) == 0


def _priority_in_child(niceness: int) -> tuple[bool, bool, int]:
    from actors.worker import lower_priority

    first = lower_priority(niceness)
    again = lower_priority(niceness)
    lower = lower_priority(niceness - 5)  # never gives back what the process has
    return first and not again, lower, os.getpriority(os.PRIO_PROCESS, 0)


def test_lower_priority_sets_the_niceness_once_and_never_lowers_it() -> None:
    import multiprocessing

    # In a child: the test process keeps its own priority.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        once, lowered, niceness = pool.apply(_priority_in_child, (os.getpriority(os.PRIO_PROCESS, 0) + 3,))
    assert once and not lowered
    assert niceness == os.getpriority(os.PRIO_PROCESS, 0) + 3


def test_a_role_worker_leaves_its_process_priority_alone_unless_asked() -> None:
    from actors.indexer.actor import IndexerActor

    before = os.getpriority(os.PRIO_PROCESS, 0)
    IndexerActor(context=None, handler="testkit.handlers:noop")  # type: ignore[arg-type]
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def _warm_in_child() -> tuple[bool, dict[str, Any], bool]:
    import sys

    from actors.indexer.actor import IndexerActor

    worker = IndexerActor(context=None, handler="testkit.handlers:noop")  # type: ignore[arg-type]
    before = "openai.types.chat" in sys.modules
    return before, worker.warm(), "openai.types.chat" in sys.modules


def test_warm_loads_the_model_client_and_tokenizer_ahead_of_the_first_job() -> None:
    import multiprocessing

    from protocol.jobs import SEMANTIC_INDEX_HANDLER

    # In a fresh process: a worker does not load the client at start, and does once warmed.
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        before, answer, after = pool.apply(_warm_in_child)
    assert not before and after
    assert answer["handler_id"] == SEMANTIC_INDEX_HANDLER and answer["warm_ms"] >= 0


def test_handle_many_runs_every_item_in_order_and_a_malformed_one_fails_alone() -> None:
    ran: list[str] = []
    worker = WorkerActor("h", lambda job, attempt, context: ran.append(job.job_id) or {}, context=None)  # type: ignore[arg-type]
    items: list[Any] = [
        (envelope("a").model_dump(), 1),
        ("not a pair",),
        (envelope("b").model_dump(), True),
        (envelope("c").model_dump(), 2),
    ]
    outcomes = worker.handle_many(items)
    assert [o["kind"] for o in outcomes] == ["succeeded", "failed", "failed", "succeeded"]
    assert [o["job_id"] for o in outcomes] == ["a", "unknown", "b", "c"]
    assert ran == ["a", "c"]


def test_a_job_at_its_daily_budget_is_held_not_failed() -> None:
    from actors.models.budget import held_under
    from protocol.errors import BudgetReachedError
    from protocol.jobs import settings_fingerprint
    from protocol.outcomes import JOB_OUTCOME_ADAPTER, JobHeld

    block = {"model": "claude-code/haiku", "budget": {"daily_tokens": 1000}}

    def handler(job: JobEnvelope, attempt: int, context: Any) -> None:
        with held_under(block):
            raise BudgetReachedError("budget_tokens", 86_400.0, 1200.0, 1000.0)

    worker = WorkerActor("h", handler, context=None)  # type: ignore[arg-type]
    outcome = JOB_OUTCOME_ADAPTER.validate_python(worker.handle(envelope("j").model_dump(), 1))
    assert outcome == JobHeld(
        job_id="j",
        reason="budget_tokens",
        until=86_400.0,
        spent=1200.0,
        cap=1000.0,
        settings_fingerprint=settings_fingerprint(block),
    )
