"""The job queue's own writer (``persistence.writers.queue_store.QueueStore``): durable FIFO and runtime
events."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.writers.queue_store import NotFoundError, QueueStore
from protocol.errors import InvalidPayloadError
from protocol.jobs import JobEnvelope, ObserveBoundaryJob, SemanticIndexJob
from protocol.queue_rows import JobHeldWrite

T0 = "2026-07-23T12:00:00+00:00"


def _envelope(job_id: str, session_id: str = "run-1") -> JobEnvelope:
    payload = ObserveBoundaryJob(
        session_id=session_id,
        terminal_end_seq=3,
        terminal_status="completed",
        renderer_version="r1",
        observer_schema_version="o1",
        db_path="/data/om.sqlite",
        events_path="/data/events.jsonl",
    )
    return JobEnvelope(job_id=job_id, correlation_id=session_id, payload=payload)


@pytest.fixture
def store(db_path: Path) -> Iterator[QueueStore]:
    """The test queue database's writer, closed after the test."""
    opened = QueueStore(db_path)
    yield opened
    opened.close()


def test_jobs_are_listed_in_acceptance_order(store: QueueStore) -> None:
    results = [store.enqueue_job(_envelope(job_id), T0) for job_id in ("c", "a", "b")]
    assert all(r.created for r in results)
    assert results[0].job_seq < results[1].job_seq < results[2].job_seq
    jobs = store.list_unfinished_jobs()
    assert [j.envelope.job_id for j in jobs] == ["c", "a", "b"]
    assert jobs[0].envelope == _envelope("c")
    assert (jobs[0].handler_id, jobs[0].session_id, jobs[0].state, jobs[0].attempts) == (
        "observational_memory.observe_boundary",
        "run-1",
        "pending",
        0,
    )


def test_pending_or_running_job_id_is_not_queued_twice(store: QueueStore) -> None:
    first = store.enqueue_job(_envelope("same"), T0)
    again = store.enqueue_job(_envelope("same"), T0)
    assert (again.created, again.job_seq) == (False, first.job_seq)
    store.mark_job_running(first.job_seq, 1, T0)
    assert store.enqueue_job(_envelope("same"), T0).created is False
    assert len(store.list_unfinished_jobs()) == 1


def test_finished_job_id_may_be_queued_again(store: QueueStore) -> None:
    first = store.enqueue_job(_envelope("same"), T0)
    store.mark_job_running(first.job_seq, 1, T0)
    store.finish_job(first.job_seq, "succeeded", T0)
    again = store.enqueue_job(_envelope("same"), T0)
    assert again.created and again.job_seq > first.job_seq


def test_retry_and_finish_lifecycle(store: QueueStore) -> None:
    seq = store.enqueue_job(_envelope("j"), T0).job_seq
    store.mark_job_running(seq, 1, T0)
    store.mark_job_retry(seq, "2026-07-23T12:00:05+00:00", "transient_runtime")
    [job] = store.list_unfinished_jobs()
    assert (job.state, job.attempts, job.not_before, job.failure_reason) == (
        "pending",
        1,
        "2026-07-23T12:00:05+00:00",
        "transient_runtime",
    )
    store.mark_job_running(seq, 2, "2026-07-23T12:00:06+00:00")
    [job] = store.list_unfinished_jobs()
    assert (job.state, job.attempts, job.started_at, job.not_before) == (
        "running",
        2,
        "2026-07-23T12:00:06+00:00",
        None,
    )
    store.finish_job(seq, "failed", "2026-07-23T12:01:00+00:00", failure_reason="retries_exhausted")
    assert store.list_unfinished_jobs() == []
    counts = store.job_counts()
    assert (counts.pending, counts.running, counts.succeeded, counts.failed) == (0, 0, 0, 1)
    with pytest.raises(NotFoundError):
        store.finish_job(seq, "succeeded", T0)
    with pytest.raises(NotFoundError):
        store.mark_job_retry(seq, T0, "transient_runtime")


def test_a_run_held_by_the_daily_budget_goes_back_to_pending_with_its_held_runs(store: QueueStore) -> None:
    seq = store.enqueue_job(_envelope("j"), T0).job_seq
    store.mark_job_running(seq, 1, T0)
    held = JobHeldWrite(
        job_seq=seq, held_attempts=1, not_before="2026-07-23T12:01:00+00:00", failure_reason="budget_tokens"
    )
    assert store.apply_job_writes([held]) == 1
    assert store.apply_job_writes([held]) == 1  # repeated after a lost reply: the same row
    [job] = store.list_unfinished_jobs()
    assert (job.state, job.attempts, job.held_attempts, job.not_before, job.failure_reason) == (
        "pending",
        1,
        1,
        "2026-07-23T12:01:00+00:00",
        "budget_tokens",
    )
    store.mark_job_running(seq, 2, T0)
    [job] = store.list_unfinished_jobs()
    assert (job.state, job.attempts, job.held_attempts, job.not_before) == ("running", 2, 1, None)
    store.finish_job(seq, "succeeded", T0)
    with pytest.raises(NotFoundError):
        store.apply_job_writes([held])
    with pytest.raises(InvalidPayloadError):
        store.apply_job_writes([held.model_copy(update={"failure_reason": "Budget: secret text"})])


def test_failure_reason_must_be_a_category_code(store: QueueStore) -> None:
    seq = store.enqueue_job(_envelope("j"), T0).job_seq
    store.mark_job_running(seq, 1, T0)
    with pytest.raises(InvalidPayloadError):
        store.mark_job_retry(seq, T0, "ValueError: user said something private")


def test_queue_survives_reopening(db_path: Path) -> None:
    with QueueStore(db_path) as first:
        first.enqueue_job(_envelope("a"), T0)
        index_job = JobEnvelope(
            job_id="f" * 32,
            correlation_id="run-2",
            payload=SemanticIndexJob(session_id="run-2", db_path="/d"),
        )
        first.enqueue_job(index_job, T0)
    with QueueStore(db_path) as second:
        jobs = second.list_unfinished_jobs()
        assert [j.envelope.job_id for j in jobs] == ["a", "f" * 32]
        assert jobs[1].envelope == index_job
        assert second.job_counts().pending == 2


def test_runtime_events_are_per_session_and_ordered(store: QueueStore) -> None:
    first = store.record_runtime_event(
        "run-1", "extension_agent.job_failed", {"job_id": "j1", "attempts": 4}, T0
    )
    store.record_runtime_event("run-2", "extension_agent.job_failed", {"job_id": "j2"}, T0)
    second = store.record_runtime_event("run-1", "extension_agent.job_failed", {"job_id": "j3"}, T0)
    events = store.runtime_events("run-1")
    assert [e.event_seq for e in events] == [first, second]
    assert events[0].payload == {"job_id": "j1", "attempts": 4}
    assert [e.payload["job_id"] for e in store.runtime_events("run-1", after_seq=first)] == ["j3"]


def test_queue_writes_repeated_after_a_lost_reply_are_no_ops(store: QueueStore) -> None:
    # StoreProxy(durable=True) repeats a call whose reply was lost (StoreActor restarted, timeout).
    seq = store.enqueue_job(_envelope("j"), T0).job_seq
    store.mark_job_running(seq, 1, T0)
    store.mark_job_retry(seq, "2026-07-23T12:00:05+00:00", "transient_runtime")
    store.mark_job_retry(seq, "2026-07-23T12:00:05+00:00", "transient_runtime")
    [job] = store.list_unfinished_jobs()
    assert (job.state, job.attempts, job.not_before) == ("pending", 1, "2026-07-23T12:00:05+00:00")
    with pytest.raises(NotFoundError):  # a pending row is not "retried" again with other values
        store.mark_job_retry(seq, "2026-07-23T12:09:00+00:00", "transient_runtime")
    payload = {"job_id": "j", "attempts": 4}
    first = store.record_runtime_event("run-1", "extension_agent.job_failed", payload, T0)
    again = store.record_runtime_event("run-1", "extension_agent.job_failed", payload, T0)
    assert again == first and len(store.runtime_events("run-1")) == 1
    later = store.record_runtime_event(
        "run-1", "extension_agent.job_failed", payload, "2026-07-24T00:00:00+00:00"
    )
    assert later > first  # the same job failing again another time is a new event


def test_giving_up_and_its_event_are_one_transaction(store: QueueStore) -> None:
    seq = store.enqueue_job(_envelope("job-x"), "2026-11-30T00:00:00+00:00").job_seq
    store.mark_job_running(seq, 4, "2026-11-30T00:00:01+00:00")
    payload = {"job_id": "job-x", "attempts": 4, "reason": "retry_exhausted"}
    first = store.give_up_job(
        seq, "2026-11-30T00:00:02+00:00", "transient_runtime", "run-1", "extension_agent.job_failed", payload
    )
    again = store.give_up_job(
        seq, "2026-11-30T00:00:02+00:00", "transient_runtime", "run-1", "extension_agent.job_failed", payload
    )
    assert first == again  # a replay records nothing more
    assert [e.payload for e in store.runtime_events("run-1")] == [payload]
    assert store.job_counts().failed == 1 and store.list_unfinished_jobs() == []
    # A failing event write rolls the give-up back: the job is still unfinished, nothing half done.
    other = store.enqueue_job(_envelope("job-y"), "2026-11-30T00:01:00+00:00").job_seq
    with pytest.raises(TypeError):
        store.give_up_job(
            other, "2026-11-30T00:01:02+00:00", "transient_runtime", "run-1", "e", {"bad": {1, 2}}
        )  # type: ignore[dict-item]
    assert [row.envelope.job_id for row in store.list_unfinished_jobs()] == ["job-y"]
    with pytest.raises(NotFoundError):
        store.give_up_job(999, "2026-11-30T00:02:00+00:00", "transient_runtime", "run-1", "e", {})


def test_job_counts_read_a_snapshot_while_a_writer_holds_the_lock(store: QueueStore) -> None:
    """``omray status`` and ``watch`` poll the counts while the queue commits: the poll must neither
    wait for the write lock (every ``atomic()`` begins IMMEDIATE) nor see an uncommitted write."""
    import sqlite3

    store.enqueue_job(_envelope("a"), T0)
    writer = sqlite3.connect(store.db_path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another writer mid-transaction, holding the lock
        writer.execute("UPDATE omray_job SET state = 'succeeded'")
        counts = store.job_counts()  # a lock wait would end in StorageError after the busy timeout
        assert (counts.pending, counts.succeeded) == (1, 0)  # the committed snapshot only
        writer.execute("COMMIT")
    finally:
        writer.close()
    assert store.job_counts().succeeded == 1


def test_job_counts_inside_a_transaction_see_its_writes(store: QueueStore) -> None:
    with store.atomic():
        store.enqueue_job(_envelope("a"), T0)
        assert store.job_counts().pending == 1  # the open transaction's own write
    assert store.job_counts().pending == 1


def test_runtime_events_of_one_session_id_are_per_database(store: QueueStore) -> None:
    """Issue 33: two projects with the same session id saw each other's failures, unnamed."""
    mine = store.record_runtime_event(
        "run-1", "extension_agent.job_failed", {"job_id": "j1"}, T0, "/a/om.sqlite"
    )
    store.record_runtime_event("run-1", "extension_agent.job_failed", {"job_id": "j2"}, T0, "/b/om.sqlite")
    events = store.runtime_events("run-1", db_path="/a/om.sqlite")
    assert [(e.event_seq, e.payload["job_id"], e.db_path) for e in events] == [(mine, "j1", "/a/om.sqlite")]
    assert [e.payload["job_id"] for e in store.runtime_events("run-1", db_path="/b/om.sqlite")] == ["j2"]
    assert store.runtime_events("run-1", db_path="/c/om.sqlite") == []
    assert len(store.runtime_events("run-1")) == 2  # no database given: every one, each naming its own
    # the same event for another database is another event, not a repeat of the first
    again = store.record_runtime_event(
        "run-1", "extension_agent.job_failed", {"job_id": "j1"}, T0, "/b/om.sqlite"
    )
    assert again != mine


def test_migration_13_names_the_database_of_older_events(tmp_path: Path) -> None:
    import sqlite3

    from persistence.database import migrations

    db_path = tmp_path / "q.sqlite"
    with QueueStore(db_path) as store:
        store.enqueue_job(_envelope("j1"), T0)
        [job] = store.list_unfinished_jobs()
        store.give_up_job(
            job.job_seq, T0, "retry_exhausted", "run-1", "extension_agent.job_failed", {"job_id": "j1"}
        )
        store.record_runtime_event("run-1", "extension_agent.job_failed", {"job_id": "gone"}, T0)
    step = next(m for m in migrations.OMRAY_MIGRATIONS if m.version == "omray_013_runtime_events_database")
    conn = sqlite3.connect(db_path)
    with conn:  # back to the shape before omray_013
        conn.execute("DROP INDEX idx_omray_runtime_event_db_run_seq")
        conn.execute("ALTER TABLE omray_runtime_event DROP COLUMN db_path")
        conn.execute("DELETE FROM om_schema_version WHERE version = ?", (step.version,))
    conn.close()
    with QueueStore(db_path) as store:  # migrates
        events = store.runtime_events("run-1")
        assert [(e.payload["job_id"], e.db_path) for e in events] == [("j1", "/data/om.sqlite"), ("gone", "")]
        assert [e.payload["job_id"] for e in store.runtime_events("run-1", db_path="/data/om.sqlite")] == [
            "j1"
        ]
