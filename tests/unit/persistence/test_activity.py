"""Live activity rows of a memory database (reference §11.1)."""

from __future__ import annotations

from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.jobs import JobEnvelope, ObserveBoundaryJob
from protocol.records import ActivityRecord

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


# --- activity ------------------------------------------------------------------------------


def _activity(job_id: str, stage: str = "observer", session_id: str = "run-1") -> ActivityRecord:
    return ActivityRecord.model_validate(
        {"run_id": session_id, "job_id": job_id, "stage": stage, "current_tokens": 10, "updated_at": T0}
    )


def test_one_activity_row_per_session_newer_job_overwrites(store: Store, reader: MemoryReader) -> None:
    store.upsert_activity(_activity("old"))
    store.upsert_activity(_activity("new", stage="dropper").model_copy(update={"target_tokens": 70}))
    row = reader.activity("run-1")
    assert row is not None and (row.job_id, row.stage, row.target_tokens) == ("new", "dropper", 70)


def test_older_job_cannot_clear_newer_row_and_sessions_are_isolated(
    store: Store, reader: MemoryReader
) -> None:
    store.upsert_activity(_activity("old"))
    store.upsert_activity(_activity("new"))
    store.upsert_activity(_activity("other-job", session_id="run-2"))
    assert store.clear_activity("run-1", "old") is False
    assert reader.activity("run-1") is not None
    assert store.clear_activity("run-1", "new") is True
    assert reader.activity("run-1") is None
    assert reader.activity("run-2") is not None
