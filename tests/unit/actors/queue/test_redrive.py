"""Re-driving given-up jobs (issue 40 item 1): the pure tracker, and the QueueActor shell on a real
QueueStore file with a fake worker pool and a manual clock."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

from actors.queue.actor import QueueActor
from actors.queue.retry import RetryPolicy
from persistence.queue_store import QueueStore
from protocol.outcomes import JobFailed, JobSucceeded
from protocol.queue_rows import StoredJob

from .helpers import observe
from .test_queue_actor import Clock, FakeWorkers

DB = "/data/p/om.sqlite"


class Endpoint:
    """A model endpoint that is down until :attr:`up`; every answer is an outage while down."""

    def __init__(self) -> None:
        self.up = False

    def __call__(self, job_id: str, attempt: int) -> dict[str, Any]:
        if self.up:
            return JobSucceeded(job_id=job_id).model_dump()
        return JobFailed(job_id=job_id, retryable=True, reason="model_unreachable").model_dump()


class StaleReads(QueueStore):
    """A store whose failed-job reads can answer what an earlier read saw: two re-drives that read
    the same failed row before either copy was written (``omray retry`` beside a success)."""

    stale: list[StoredJob] | None = None

    def failed_to_redrive(self, *args: Any, **kwargs: Any) -> list[StoredJob]:
        fresh = super().failed_to_redrive(*args, **kwargs)
        return list(self.stale) if self.stale is not None else fresh


def _drain(queue: QueueActor, clock: Clock, steps: int = 40) -> None:
    for _ in range(steps):
        queue.tick(0)
        clock.now += 30


def _runs(workers: FakeWorkers, job_id: str) -> list[int]:
    return [attempt for started, attempt in workers.started if started == job_id]


def _states(path: Path) -> list[tuple[str, str]]:
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as conn:
        rows = conn.execute("SELECT job_id, state FROM omray_job ORDER BY job_seq").fetchall()
    return [(str(job_id), str(state)) for job_id, state in rows]


def _queue(store: QueueStore, workers: FakeWorkers, clock: Clock) -> QueueActor:
    return QueueActor(store, workers, clock=clock, policy=RetryPolicy(base_delay_s=1.0), start_loop=False)


def test_a_failed_row_read_by_two_redrives_is_queued_again_once(tmp_path: Path) -> None:
    endpoint, clock = Endpoint(), Clock()
    store = StaleReads(tmp_path / "q.sqlite")
    workers = FakeWorkers(endpoint)
    queue = _queue(store, workers, clock)
    queue.dispatch(observe("a1", "ended", 3, db_path=DB))
    _drain(queue, clock)
    assert _runs(workers, "a1") == [1, 2, 3, 4]  # given up during the outage
    endpoint.up = True
    store.stale = list(store.failed_to_redrive(DB))  # what a second reader saw before the first wrote
    assert queue.retry_failed(DB)["requeued"] == 1
    _drain(queue, clock)  # the copy ran and left the queue
    assert queue.retry_failed(DB)["requeued"] == 0  # the stale read queues no second copy
    _drain(queue, clock)
    assert _runs(workers, "a1") == [1, 2, 3, 4, 1]
    assert _states(tmp_path / "q.sqlite") == [("a1", "failed"), ("a1", "succeeded")]
