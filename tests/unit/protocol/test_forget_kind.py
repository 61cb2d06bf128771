"""Forget jobs: their own handler id (run on the reflector pool), one typed payload, one argument check."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from persistence.writers.queue_store import QueueStore
from protocol.errors import InvalidPayloadError
from protocol.forget import ForgetArgumentsError, ForgetRequest, forget_arguments
from protocol.jobs import (
    FORGET_HANDLER,
    JOB_PAYLOAD_ADAPTER,
    REFLECT_GENERATION_HANDLER,
    ForgetJob,
    JobEnvelope,
    pool_of,
)

ID = "ab" * 32


def test_a_forget_job_has_its_own_handler_id_and_runs_on_the_reflector_pool() -> None:
    job = ForgetJob(session_id="s1", memory_ids=(ID,), db_path="/data/om.sqlite")
    envelope = JobEnvelope(job_id="j1", session_id="s1", payload=job)
    assert job.handler_id == envelope.handler_id == FORGET_HANDLER != REFLECT_GENERATION_HANDLER
    assert pool_of(FORGET_HANDLER) == REFLECT_GENERATION_HANDLER
    assert pool_of(REFLECT_GENERATION_HANDLER) == REFLECT_GENERATION_HANDLER


def test_the_payload_round_trips_and_its_request_is_typed() -> None:
    job = ForgetJob(session_id="s1", event_ranges=((2, 3),), db_path="/data/om.sqlite")
    again = JOB_PAYLOAD_ADAPTER.validate_json(JOB_PAYLOAD_ADAPTER.dump_json(job))
    assert again == job
    request = job.request()
    assert type(request) is ForgetRequest
    assert request == ForgetRequest(session_id="s1", event_ranges=((2, 3),))


@pytest.mark.parametrize(
    "payload",
    [
        {"session_id": "s1", "memory_ids": ["xyz"]},
        {"session_id": "s1", "event_ranges": [[3, 2]]},
        {"session_id": "s1", "event_ranges": [[0, 2]]},
        {"session_id": "", "whole_session": True},
        {"session_id": "s1", "surprise": 1},
    ],
)
def test_a_malformed_request_is_refused(payload: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        ForgetRequest.model_validate(payload)


def test_arguments_are_normalized() -> None:
    checked = forget_arguments({"ids": [" ABCDEFABCDEF ", "abcdefabcdef"]})
    assert checked.ids == ("abcdefabcdef",)
    ranges = forget_arguments({"session_id": "s1", "event_ranges": ["4", "2-3", [5, 6]]})
    assert ranges.event_ranges == ((4, 4), (2, 3), (5, 6))


@pytest.mark.parametrize(
    "given",
    [
        {},
        {"ids": []},
        {"ids": "abcdefabcdef"},
        {"ids": ["abc"]},
        {"ids": ["abcdefabcdef"], "session_id": "s1"},
        {"event_ranges": [[1, 2]]},
        {"session_id": "s1", "event_ranges": ["x-2"]},
        {"session_id": "s1", "event_ranges": [[3, 2]]},
        {"session_id": 5},
        {"ids": ["abcdefabcdef"], "session": "s1"},
        "not an object",
    ],
)
def test_bad_arguments_are_one_typed_error_without_the_values(given: object) -> None:
    with pytest.raises(ForgetArgumentsError) as raised:
        forget_arguments(given)  # type: ignore[arg-type]
    assert isinstance(raised.value, InvalidPayloadError)
    assert "abcdefabcdef" not in str(raised.value) and "x-2" not in str(raised.value)


def test_a_forget_job_queued_under_the_reflect_handler_id_still_runs_as_forget(tmp_path: Path) -> None:
    db = tmp_path / "queue.sqlite"
    QueueStore(db).close()
    payload = ForgetJob(session_id="s1", memory_ids=(ID,), db_path="/data/om.sqlite")
    with sqlite3.connect(db) as conn:  # a row as an older omray wrote it
        conn.execute("DELETE FROM om_schema_version WHERE version = 'omray_016_forget_handler'")
        conn.execute(
            "INSERT INTO omray_job (job_seq, job_id, handler_id, correlation_id, run_id, db_path,"
            " payload_json, state, attempts, accepted_at) VALUES (1, 'old', ?, 's1', 's1',"
            " '/data/om.sqlite', ?, 'pending', 0, '2026-07-23T12:00:00+00:00')",
            (REFLECT_GENERATION_HANDLER, JOB_PAYLOAD_ADAPTER.dump_json(payload).decode()),
        )
    store = QueueStore(db)  # opening migrates the row
    try:
        (row,) = store.list_unfinished_jobs()
        assert isinstance(row.envelope.payload, ForgetJob)
        assert row.envelope.handler_id == FORGET_HANDLER
    finally:
        store.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT handler_id FROM omray_job").fetchall() == [(FORGET_HANDLER,)]
