"""One id name in the public API: ``session_id``. The names of earlier releases (``run_id``, and
``correlation_id`` for the envelope) still load, and no id derived from a session changes."""

from __future__ import annotations

from typing import Any

import pytest

from actors.observer.pipeline import observe_plan_key
from protocol.events import AfterTurnCommit, BeforeCompactionContext
from protocol.identities import observe_job_id, signalled_observe_job_id, threshold_generation_id
from protocol.jobs import (
    JOB_PAYLOAD_ADAPTER,
    ForgetJob,
    JobEnvelope,
    ObserveBoundaryJob,
    ReflectGenerationJob,
    SemanticIndexJob,
)
from protocol.queue_rows import RuntimeEvent

# Payloads exactly as the queue's file stored them before the rename (JOB_PAYLOAD_ADAPTER.dump_json).
LEGACY_PAYLOADS: dict[type, str] = {
    ObserveBoundaryJob: (
        '{"kind":"observe_boundary","run_id":"run-1","terminal_end_seq":3,"terminal_status":"completed",'
        '"renderer_version":"1","observer_schema_version":"1","db_path":"/data/om.sqlite",'
        '"events_path":"/data/run-1/events.jsonl","settings_file":"/data/omray.yaml","settings":{},'
        '"signal":"turn_end","context_fill":null}'
    ),
    ReflectGenerationJob: (
        '{"kind":"reflect_generation","run_id":"run-1","generation_id":"' + "a" * 64 + '",'
        '"prior_active_generation_id":null,"observation_set_hash":"' + "b" * 64 + '",'
        '"reflector_model":"builtin/extractive","reflector_schema_version":"1","db_path":"/data/om.sqlite",'
        '"trigger":"threshold","threshold_idempotency_key":"' + "a" * 64 + '","token_count":12,'
        '"required_end_seq":3,"required_start_seq":1,"settings_file":null,"settings":{}}'
    ),
    SemanticIndexJob: (
        '{"kind":"semantic_index","run_id":"run-1","db_path":"/data/om.sqlite","settings":{},'
        '"events_root":null}'
    ),
    ForgetJob: (
        '{"kind":"forget","run_id":"run-1","db_path":"/data/om.sqlite","memory_ids":[],"event_ranges":[],'
        '"whole_session":true,"settings":{}}'
    ),
}


@pytest.mark.parametrize("kind", list(LEGACY_PAYLOADS), ids=lambda kind: kind.__name__)
def test_a_payload_stored_under_run_id_loads_and_says_session_id(kind: type) -> None:
    payload = JOB_PAYLOAD_ADAPTER.validate_json(LEGACY_PAYLOADS[kind])
    assert isinstance(payload, kind) and payload.session_id == "run-1"
    dumped = JOB_PAYLOAD_ADAPTER.dump_python(payload)
    assert dumped["session_id"] == "run-1" and "run_id" not in dumped
    # What is stored now loads back to the same payload.
    assert JOB_PAYLOAD_ADAPTER.validate_json(JOB_PAYLOAD_ADAPTER.dump_json(payload)) == payload


@pytest.mark.parametrize("name", ["session_id", "run_id"])
def test_hook_contexts_take_either_name(name: str) -> None:
    after = AfterTurnCommit.model_validate({name: "7", "turn_no": 1, "status": "completed"})
    before = BeforeCompactionContext.model_validate({name: "7", "turn_no": 1, "trigger": "compact_run"})
    assert after.session_id == before.session_id == "7"
    assert after.model_dump()["session_id"] == "7" and "run_id" not in after.model_dump()
    keywords: dict[str, Any] = {name: "7"}
    assert AfterTurnCommit(turn_no=1, status="completed", **keywords) == after


def test_a_hook_context_with_both_names_is_refused() -> None:
    with pytest.raises(ValueError, match="run_id"):  # which one is meant? Nothing is guessed.
        AfterTurnCommit.model_validate({"session_id": "a", "run_id": "b", "turn_no": 1, "status": "x"})


def test_a_missing_session_is_still_an_error() -> None:
    with pytest.raises(ValueError, match="session_id"):
        AfterTurnCommit.model_validate({"turn_no": 1, "status": "completed"})
    with pytest.raises(ValueError):
        AfterTurnCommit.model_validate({"run_id": "", "turn_no": 1, "status": "completed"})


@pytest.mark.parametrize("name", ["session_id", "correlation_id"])
def test_the_envelope_takes_its_session_under_either_name(name: str) -> None:
    data = {"job_id": "j", name: "run-1", "payload": LEGACY_PAYLOADS[SemanticIndexJob]}
    data["payload"] = JOB_PAYLOAD_ADAPTER.validate_json(data["payload"]).model_dump()
    envelope = JobEnvelope.model_validate(data)
    assert envelope.session_id == "run-1"
    assert "correlation_id" not in envelope.model_dump()
    assert JobEnvelope.model_validate(envelope.model_dump()) == envelope


def test_runtime_event_rows_say_session_id() -> None:
    row = RuntimeEvent(event_seq=1, session_id="run-1", event_type="t", payload={}, created_at="now")
    assert row.session_id == "run-1" and row.model_dump()["session_id"] == "run-1"
    assert "run_id" not in row.model_dump()


def test_ids_derived_from_a_session_are_those_of_before_the_rename() -> None:
    # Values computed with the code before the rename: the hashes take the session's value, never a
    # payload's key, so queued jobs keep their ids and a redelivery still finds its rows.
    observe = "318cbf88662ee431923345b7dfd0bbe338322ba42a0dd2bab0991cca47ae65f3"
    assert observe_job_id("42", 17, "completed", "1", "1") == observe
    assert signalled_observe_job_id(observe, "idle_flush") == (
        "8f5c59b6a4b11afe768ba2ff0698dbb7f3957b238cd484e21eab404b2a669065"
    )
    assert threshold_generation_id("42", None, "b" * 64, "builtin/extractive", "1") == (
        "3f53a9a67e46e5ddb570dbfebd73a83fe2826212255872e76a94ce13257c71b0"
    )
    for name in ("session_id", "run_id"):
        job = ObserveBoundaryJob.model_validate(
            {
                name: "42",
                "terminal_end_seq": 17,
                "terminal_status": "completed",
                "renderer_version": "1",
                "observer_schema_version": "1",
                "db_path": "/abs/om.sqlite",
                "events_path": "/abs/events.jsonl",
            }
        )
        assert observe_plan_key(job) == "54e9b010b4adbf1ef646f83914ec12769518508355ffc8901a8d6ded5fea5197"
