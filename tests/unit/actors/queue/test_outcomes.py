"""Worker outcomes and the job-failed event payload."""

from __future__ import annotations

import pydantic
import pytest

from protocol.outcomes import (
    JOB_FAILED_EVENT_TYPE,
    JOB_OUTCOME_ADAPTER,
    JobFailed,
    JobFailedEvent,
    JobSucceeded,
)


def test_outcome_union_round_trips_by_kind() -> None:
    ok = JobSucceeded(job_id="j1", detail={"parts_committed": 2})
    bad = JobFailed(job_id="j2", retryable=False, reason="invalid_payload", error_class="InvalidPayloadError")
    for outcome in (ok, bad):
        assert JOB_OUTCOME_ADAPTER.validate_json(JOB_OUTCOME_ADAPTER.dump_json(outcome)) == outcome
    assert isinstance(JOB_OUTCOME_ADAPTER.validate_python({"kind": "succeeded", "job_id": "j"}), JobSucceeded)


@pytest.mark.parametrize("reason", ["Boom: secret text", "", "transient runtime", "x" * 65])
def test_failure_reason_must_be_a_short_code(reason: str) -> None:
    with pytest.raises(pydantic.ValidationError):
        JobFailed(job_id="j", retryable=True, reason=reason)


def test_error_class_rejects_exception_text() -> None:
    with pytest.raises(pydantic.ValidationError):
        JobFailed(job_id="j", retryable=True, reason="conflict", error_class="ValueError: the user said x")


def test_from_exception_keeps_only_the_class_name() -> None:
    failure = JobFailed.from_exception("j", RuntimeError("private memory text"), reason="transient_runtime")
    assert failure.error_class == "RuntimeError"
    assert "private" not in failure.model_dump_json()
    assert failure.retryable is True


def test_outcomes_are_frozen_and_strict() -> None:
    with pytest.raises(pydantic.ValidationError):
        JobSucceeded(job_id="j", extra_field=1)  # type: ignore[call-arg]
    ok = JobSucceeded(job_id="j")
    with pytest.raises(pydantic.ValidationError):
        ok.job_id = "other"  # type: ignore[misc]


def test_job_failed_event_payload_has_exactly_the_reference_keys() -> None:
    event = JobFailedEvent.for_job(
        job_id="j1",
        handler_id="observational_memory.observe_boundary",
        attempts=4,
        event_reason="retry_exhausted",
        last_failure="transient_runtime",
    )
    payload = event.model_dump()
    assert set(payload) == {"message", "reason", "handler_id", "job_id", "retry_count", "attempts"}
    assert payload["retry_count"] == 3 and payload["attempts"] == 4
    assert payload["reason"] == "retry_exhausted"
    assert "transient_runtime" in payload["message"]
    assert JobFailedEvent.event_type == JOB_FAILED_EVENT_TYPE == "extension_agent.job_failed"


def test_job_failed_event_message_never_carries_free_text() -> None:
    event = JobFailedEvent.for_job(
        job_id="j1", handler_id="h", attempts=1, event_reason="conflict", last_failure="Secret: text!"
    )
    assert "Secret" not in event.message
    assert "unknown" in event.message


def test_failures_that_stop_memory_get_a_category_with_a_cause_and_a_fix() -> None:
    # What an observe job raises when the settings or the model are wrong: each gets its own
    # category, which the hooks and `omray status` explain (never the exception's text).
    from actors.models.chat import MissingApiKeyError, ModelCallError
    from actors.worker import failure_reason
    from protocol.errors import ModelSettingsError, SettingsError
    from protocol.outcomes import FAILURE_HELP, JobFailedEvent, explain_failure, last_failure

    cases = {
        ModelCallError("bad_response", 401): "model_auth",
        ModelCallError("bad_response", 403): "model_auth",
        ModelCallError("bad_response", 404): "model_not_found",
        ModelCallError("connection"): "model_unreachable",
        ModelCallError("timeout"): "model_unreachable",
        ModelCallError("server_error", 503): "transient_runtime",
        MissingApiKeyError("environment variable 'X' is not set."): "model_api_key_missing",
        ModelSettingsError("no model"): "settings",
        SettingsError("bad file"): "settings",
        RuntimeError("boom"): "transient_runtime",
    }
    for error, category in cases.items():
        assert failure_reason(error) == (category, True)
    for category in (
        "model_auth",
        "model_api_key_missing",
        "model_unreachable",
        "model_not_found",
        "settings",
    ):
        cause, fix = explain_failure(category)
        assert (cause, fix) == FAILURE_HELP[category] and cause and fix
    event = JobFailedEvent.for_job(
        job_id="j", handler_id="h", attempts=4, event_reason="retry_exhausted", last_failure="model_auth"
    )
    assert last_failure(event.model_dump()) == "model_auth"
    assert last_failure({"reason": "conflict"}) == "conflict"
    assert "conflict" in explain_failure("conflict")[0]


def test_the_key_categories_name_the_variable_when_it_is_known() -> None:
    from protocol.outcomes import explain_failure

    for category in ("model_api_key_missing", "model_auth"):
        cause, fix = explain_failure(category, "ACME_LLM_KEY")
        assert "ACME_LLM_KEY" in cause and "ACME_LLM_KEY" in fix
    # Other categories are not about the key: the variable changes nothing.
    assert explain_failure("model_unreachable", "ACME_LLM_KEY") == explain_failure("model_unreachable")
