"""Rows the queue's file holds from before the rename to ``session_id`` still load after a restart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from persistence.writers.queue_store import QueueStore
from protocol.jobs import ForgetJob, ObserveBoundaryJob, ReflectGenerationJob, SemanticIndexJob
from tests.unit.protocol.test_session_id_names import LEGACY_PAYLOADS

T0 = "2026-07-23T12:00:00+00:00"
HANDLERS = {
    ObserveBoundaryJob: "observational_memory.observe_boundary",
    ReflectGenerationJob: "observational_memory.reflect_generation",
    SemanticIndexJob: "observational_memory.semantic_index",
    ForgetJob: "observational_memory.reflect_generation",  # as an older omray queued it
}


def test_jobs_and_events_stored_under_run_id_load_with_session_id(db_path: Path) -> None:
    QueueStore(db_path).close()  # creates the file and its schema
    with sqlite3.connect(db_path) as conn:
        for seq, (kind, payload_json) in enumerate(LEGACY_PAYLOADS.items(), start=1):
            conn.execute(
                "INSERT INTO omray_job (job_seq, job_id, handler_id, correlation_id, run_id, db_path,"
                " payload_json, state, attempts, accepted_at) VALUES (?, ?, ?, 'run-1', 'run-1',"
                " '/data/om.sqlite', ?, 'pending', 0, ?)",
                (seq, f"job-{seq}", HANDLERS[kind], payload_json, T0),
            )
        conn.execute(
            "INSERT INTO omray_runtime_event (run_id, event_type, payload_json, created_at, db_path)"
            " VALUES ('run-1', 'extension_agent.job_failed', ?, ?, '/data/om.sqlite')",
            ('{"job_id": "job-1"}', T0),
        )
    store = QueueStore(db_path)
    try:
        jobs = store.list_unfinished_jobs()
        assert [type(job.envelope.payload) for job in jobs] == list(LEGACY_PAYLOADS)
        assert all(job.envelope.session_id == job.envelope.payload.session_id == "run-1" for job in jobs)
        events = store.runtime_events("run-1")
        assert [(event.session_id, event.payload) for event in events] == [("run-1", {"job_id": "job-1"})]
        assert events[0].model_dump()["session_id"] == "run-1"
    finally:
        store.close()
