"""Re-driving given-up jobs (issue 40 item 1): the pure tracker, and the QueueActor shell on a real
QueueStore file with a fake worker pool and a manual clock."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from actors.queue.actor import QueueActor
from actors.queue.redrive import RedriveTracker
from actors.queue.reports import failure_lines, queue_summary_lines
from actors.queue.retry import RetryPolicy
from persistence.writers.queue_store import QueueStore
from protocol.jobs import (
    OBSERVE_BOUNDARY_HANDLER,
    REFLECT_GENERATION_HANDLER,
    SEMANTIC_INDEX_HANDLER,
    JobEnvelope,
)
from protocol.outcomes import REASON_INVALID_PAYLOAD, JobFailed, JobSucceeded
from protocol.queue_rows import StoredJob, WaitingJobs

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


# --- the pure tracker ------------------------------------------------------------------------------

F1, F2, F3 = "1" * 64, "2" * 64, "3" * 64


def test_a_success_of_the_same_database_and_stage_redrives_once() -> None:
    tracker = RedriveTracker()
    tracker.gave_up(DB, OBSERVE_BOUNDARY_HANDLER, "model_unreachable")
    assert tracker.succeeded("/data/other/om.sqlite", OBSERVE_BOUNDARY_HANDLER) is None
    assert tracker.succeeded(DB, SEMANTIC_INDEX_HANDLER) is None  # the index has causes of its own
    due = tracker.succeeded(DB, REFLECT_GENERATION_HANDLER)  # reflect shares the model with observe
    assert due is not None and due.db_path == DB and due.automatic_only
    assert due.handler_ids is not None and OBSERVE_BOUNDARY_HANDLER in due.handler_ids
    assert tracker.succeeded(DB, OBSERVE_BOUNDARY_HANDLER) is None  # one re-drive per proof


def test_a_failure_no_fix_can_remove_is_not_tracked() -> None:
    tracker = RedriveTracker()
    tracker.gave_up(DB, OBSERVE_BOUNDARY_HANDLER, REASON_INVALID_PAYLOAD, F1)
    assert tracker.succeeded(DB, OBSERVE_BOUNDARY_HANDLER) is None
    assert tracker.accepted(DB, F2) is None


def test_a_job_accepted_under_other_settings_redrives_what_ran_under_the_old_ones() -> None:
    tracker = RedriveTracker()
    tracker.gave_up(DB, OBSERVE_BOUNDARY_HANDLER, "model_unreachable", F1)
    assert tracker.accepted(DB, F1) is None  # same settings: nothing changed
    assert tracker.accepted(DB, None) is None  # unknown settings prove nothing
    assert tracker.accepted("/data/other/om.sqlite", F2) is None
    due = tracker.accepted(DB, F2)
    assert due is not None and due.handler_ids is None and due.new_fingerprint == F2
    assert not due.automatic_only  # a settings change re-drives past the automatic cap
    assert tracker.accepted(DB, F2) is None  # once per change
    tracker.gave_up(DB, OBSERVE_BOUNDARY_HANDLER, "model_unreachable", F2)  # the copy failed again
    assert tracker.accepted(DB, F2) is None
    assert tracker.accepted(DB, F3) is not None  # another change


def test_a_restart_restores_what_waits_from_the_durable_counts() -> None:
    tracker = RedriveTracker()
    tracker.restored(
        WaitingJobs(
            db_path=DB, handler_id=OBSERVE_BOUNDARY_HANDLER, settings_fingerprint=F1, automatic=False, jobs=2
        )
    )
    assert tracker.succeeded(DB, OBSERVE_BOUNDARY_HANDLER) is None  # capped: only a change or omray retry
    assert tracker.accepted(DB, F2) is not None
    tracker.restored(
        WaitingJobs(
            db_path=DB, handler_id=OBSERVE_BOUNDARY_HANDLER, settings_fingerprint=None, automatic=True, jobs=1
        )
    )
    assert tracker.succeeded(DB, OBSERVE_BOUNDARY_HANDLER) is not None


# --- the shell: a settings change --------------------------------------------------------------------


def _under(
    job_id: str, session: str, end_seq: int, fingerprint: str, not_before: float | None = None
) -> JobEnvelope:
    job = observe(job_id, session, end_seq, db_path=DB)
    payload = job.payload.model_copy(update={"settings_fingerprint": fingerprint})
    return job.model_copy(update={"payload": payload, "not_before": not_before})


def _fingerprints_run(workers: FingerprintWorkers, job_id: str) -> list[str | None]:
    return [fingerprint for started, fingerprint in workers.fingerprints if started == job_id]


class FingerprintWorkers(FakeWorkers):
    """Also remembers the settings fingerprint each attempt was sent with."""

    def __init__(self, decide: Any) -> None:
        super().__init__(decide)
        self.fingerprints: list[tuple[str, str | None]] = []

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        self.fingerprints.append((envelope["job_id"], envelope["payload"].get("settings_fingerprint")))
        super().start(handler_id, job_seq, envelope, attempt)


def test_a_job_sent_with_fixed_settings_redrives_an_ended_sessions_failed_job(tmp_path: Path) -> None:
    """The fixed settings alone re-drive the ended session, before the new job ran (it is held for its
    idle flush here): no success is needed first, and the copy runs under the new settings."""
    endpoint, clock = Endpoint(), Clock()
    workers = FingerprintWorkers(endpoint)
    queue = _queue(QueueStore(tmp_path / "q.sqlite"), workers, clock)
    queue.dispatch(_under("ended", "s-ended", 3, F1))
    _drain(queue, clock)
    assert _runs(workers, "ended") == [1, 2, 3, 4]
    endpoint.up = True  # the user fixed omray.yaml
    queue.dispatch(_under("new", "s-new", 2, F2, not_before=clock.now + 10_000))
    _drain(queue, clock, steps=5)
    assert _runs(workers, "ended") == [1, 2, 3, 4, 1] and _runs(workers, "new") == []
    assert _fingerprints_run(workers, "ended")[-1] == F2
    assert ("ended", "succeeded") in _states(tmp_path / "q.sqlite")


def test_a_copy_that_fails_under_the_new_settings_waits_for_another_change(tmp_path: Path) -> None:
    endpoint, clock = Endpoint(), Clock()
    workers = FingerprintWorkers(endpoint)
    store = QueueStore(tmp_path / "q.sqlite")
    queue = _queue(store, workers, clock)
    queue.dispatch(_under("ended", "s-ended", 3, F1))
    _drain(queue, clock)
    queue.dispatch(_under("new", "s-new", 2, F2))  # still down under the new settings
    _drain(queue, clock)
    assert _runs(workers, "ended") == [1, 2, 3, 4] * 2
    queue.dispatch(_under("newer", "s-new", 4, F2))  # same settings again: no re-drive
    _drain(queue, clock)
    assert _runs(workers, "ended") == [1, 2, 3, 4] * 2
    queue.stop()
    endpoint.up = True
    queue = _queue(store, workers, clock)  # a restart keeps what the failed jobs were sent with
    queue.dispatch(_under("newest", "s-new", 6, F3, not_before=clock.now + 10_000))
    _drain(queue, clock, steps=5)
    assert _runs(workers, "ended")[-1] == 1 and _fingerprints_run(workers, "ended")[-1] == F3
    status = queue.status()
    assert status["waiting_for_cause"] == sum(p["jobs"] for p in status["waiting_for_cause_by_project"])


# --- what status says ----------------------------------------------------------------------------


def test_status_says_what_of_the_depth_is_delayed_why_and_until_when(tmp_path: Path) -> None:
    endpoint, clock = Endpoint(), Clock()
    workers = FakeWorkers(endpoint)
    queue = _queue(QueueStore(tmp_path / "q.sqlite"), workers, clock)
    queue.dispatch(_under("tail", "s-quiet", 2, F1, not_before=clock.now + 300))  # an idle flush
    queue.dispatch(observe("busy", "s-busy", 2, db_path=DB))
    queue.tick(0)  # its first attempt fails: a retry in backoff
    status = queue.status()
    assert status["depth"] == 2 and status["delayed"] == 2
    assert (status["delayed_idle_flushes"], status["delayed_retries"]) == (1, 1)
    assert 0 < status["delayed_next_in_s"] < status["delayed_last_in_s"] <= 300
    text = "\n".join(queue_summary_lines(status))
    assert "2 of them delayed" in text and "1 idle flushes" in text and "1 retries in backoff" in text
    assert "~5 min" in text


def test_status_names_the_project_of_failed_jobs_waiting_and_how_to_release_them(tmp_path: Path) -> None:
    endpoint, clock = Endpoint(), Clock()
    queue = _queue(QueueStore(tmp_path / "q.sqlite"), FakeWorkers(endpoint), clock)
    for n in range(2):
        queue.dispatch(observe(f"a{n}", f"s{n}", 3, db_path=DB))
    queue.dispatch(observe("b", "s9", 3, db_path="/data/q/om.sqlite"))
    _drain(queue, clock)
    status = queue.status()
    assert status["waiting_for_cause"] == 3
    assert status["waiting_for_cause_by_project"] == [
        {"db_path": DB, "jobs": 2, "automatic": 2},
        {"db_path": "/data/q/om.sqlite", "jobs": 1, "automatic": 1},
    ]
    lines = [line for line in queue_summary_lines(status) if line.startswith("failed jobs waiting")]
    assert len(lines) == 2 and DB in lines[0] and all("omray retry" in line for line in lines)
    failure = {**status["recent_failures"][0], "cause": "c", "fix": "f", "last_failure": "x"}
    assert f"of {DB}:" in failure_lines({"recent_failures": [failure]})[0]
    queue.retry_failed(DB)
    _drain(queue, clock)  # still down: given up again, and waiting again
    assert queue.status()["waiting_for_cause"] == 3


def test_jobs_that_lost_their_data_node_wait_for_it_by_database() -> None:
    from actors.queue.redrive import waiting_for_their_node
    from protocol.outcomes import REASON_DATA_NODE_LOST
    from protocol.queue_rows import StoredJob

    def failed(db: str, reason: str) -> StoredJob:
        envelope = observe(f"job-{db}-{reason}", "s1", 3)
        envelope = envelope.model_copy(
            update={"payload": envelope.payload.model_copy(update={"db_path": db})}
        )
        return StoredJob(
            job_seq=1,
            envelope=envelope,
            handler_id=envelope.handler_id,
            session_id="s1",
            state="failed",
            attempts=4,
            not_before=None,
            accepted_at="2026-01-01T00:00:00+00:00",
            started_at=None,
            finished_at=None,
            failure_reason=reason,
        )

    rows = [failed("/a/om.sqlite", REASON_DATA_NODE_LOST), failed("/b/om.sqlite", "model_unreachable")]
    assert waiting_for_their_node(rows) == {"/a/om.sqlite"}
