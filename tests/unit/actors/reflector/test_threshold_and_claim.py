"""Threshold gate (§9.1), payload validation (§9.2), claim outcomes (§9.3) and re-checks (§9.4)."""

from __future__ import annotations

from typing import Any, get_args

import pytest

from actors.reflector.core import (
    CandidatePool,
    GenerationFailureCode,
    ReflectGeneration,
    ReflectorError,
    ReflectPayloadError,
    claim_conflict_error,
    claim_reaction,
    claim_required_end_seq,
    failure_decision,
    post_model_recheck,
    pre_work_decision,
    recheck_set,
    reflector_activity,
    threshold_check,
    validate_reflect_payload,
)
from protocol.errors import ConflictError, InvalidPayloadError, ModelSettingsError
from protocol.identities import observation_set_hash, threshold_generation_id
from protocol.jobs import ReflectGenerationJob
from tests.unit.actors.reflector.builders import MODEL, NOW, SESSION_ID, observation, settings, words

PRIOR = "7" * 64


def pool_of_tokens(tokens: int, *, end_seq: int = 4) -> CandidatePool:
    """A pool whose content counts exactly ``tokens`` words, split over two observations."""
    first = max(1, tokens // 2)
    return CandidatePool.from_observations(
        SESSION_ID,
        [
            observation(
                "b1", " ".join(["w"] * (tokens - first)), timestamp="2026-07-26 12:05", end_seq=end_seq
            ),
            observation("a1", " ".join(["w"] * first), timestamp="2026-07-26 12:00", end_seq=2),
        ],
        words,
    )


def dispatch(tokens: int = 11, prior: str | None = PRIOR) -> ReflectGeneration:
    payload = threshold_check(pool_of_tokens(tokens), prior, False, settings(threshold=10))
    assert payload is not None
    return payload


# --- active candidate pool ------------------------------------------------------------------------


def test_pool_orders_by_timestamp_then_id_and_sums_tokens() -> None:
    pool = pool_of_tokens(11)
    assert [o.observation_id[:2] for o in pool.observations] == ["a1", "b1"]
    assert pool.observation_ids == tuple(sorted(o.observation_id for o in pool.observations))
    assert pool.observation_set_hash == observation_set_hash(SESSION_ID, pool.observation_ids)
    assert pool.token_count == 11
    assert pool.max_source_end_seq == 4


def test_empty_pool_has_zero_watermark() -> None:
    pool = CandidatePool.from_observations(SESSION_ID, [], words)
    assert (pool.token_count, pool.max_source_end_seq, pool.observation_ids) == (0, 0, ())


# --- threshold gate -------------------------------------------------------------------------------


def test_threshold_equal_is_not_over() -> None:
    assert threshold_check(pool_of_tokens(10), None, False, settings(threshold=10)) is None


def test_threshold_under_does_not_need_a_model() -> None:
    assert threshold_check(pool_of_tokens(10), None, False, settings(threshold=10, model=None)) is None


def test_threshold_over_requires_a_model() -> None:
    with pytest.raises(ModelSettingsError):
        threshold_check(pool_of_tokens(11), None, False, settings(threshold=10, model=None))


def test_threshold_suppressed_when_set_already_has_a_generation() -> None:
    assert threshold_check(pool_of_tokens(11), None, True, settings(threshold=10)) is None


def test_threshold_over_dispatches_deterministic_generation() -> None:
    pool = pool_of_tokens(11)
    payload = threshold_check(pool, PRIOR, False, settings(threshold=10))
    assert payload is not None
    expected_id = threshold_generation_id(SESSION_ID, PRIOR, pool.observation_set_hash, MODEL, "1")
    assert payload.generation_id == expected_id
    assert payload.threshold_idempotency_key == expected_id
    assert payload.model_dump() == {
        "session_id": SESSION_ID,
        "trigger": "threshold",
        "generation_id": expected_id,
        "threshold_idempotency_key": expected_id,
        "observation_set_hash": pool.observation_set_hash,
        "prior_active_generation_id": PRIOR,
        "reflector_model": MODEL,
        "reflector_schema_version": "1",
        "token_count": 11,
        "required_end_seq": 4,
        "required_start_seq": 1,
    }
    assert list(payload.model_dump()) == [  # the reference payload's key order
        "session_id",
        "trigger",
        "generation_id",
        "threshold_idempotency_key",
        "observation_set_hash",
        "prior_active_generation_id",
        "reflector_model",
        "reflector_schema_version",
        "token_count",
        "required_end_seq",
        "required_start_seq",
    ]


def test_dispatch_becomes_a_queue_job() -> None:
    payload = dispatch()
    job = payload.to_job("/tmp/om.sqlite")
    assert isinstance(job, ReflectGenerationJob)
    assert (job.generation_id, job.prior_active_generation_id, job.db_path) == (
        payload.generation_id,
        PRIOR,
        "/tmp/om.sqlite",
    )


# --- payload validation ---------------------------------------------------------------------------


def test_dispatched_payload_validates_as_mapping_and_as_job() -> None:
    payload = dispatch()
    assert validate_reflect_payload(payload.model_dump(), settings()) == payload
    from_job = validate_reflect_payload(payload.to_job("/db"), settings())
    assert from_job.generation_id == payload.generation_id
    assert from_job == payload  # the typed job carries every payload field, watermark included


def test_payload_defaults_and_fallbacks() -> None:
    payload = dispatch(prior=None).model_dump()
    del payload["threshold_idempotency_key"], payload["required_start_seq"]
    payload["model"] = payload.pop("reflector_model")
    payload["prior_active_generation_id"] = ""
    result = validate_reflect_payload(payload, settings())
    assert result.threshold_idempotency_key == result.generation_id
    assert (result.reflector_model, result.prior_active_generation_id, result.required_start_seq) == (
        MODEL,
        None,
        1,
    )


def _error(payload: dict[str, Any], **overrides: Any) -> str:
    with pytest.raises(ReflectPayloadError) as info:
        validate_reflect_payload({**payload, **overrides}, settings())
    assert isinstance(info.value, InvalidPayloadError)
    return str(info.value)


def test_negative_required_end_seq() -> None:
    assert _error(dispatch().model_dump(), required_end_seq=-1) == (
        "reflect_generation required_end_seq must be non-negative."
    )


@pytest.mark.parametrize(
    "field",
    ["session_id", "generation_id", "observation_set_hash", "reflector_model", "reflector_schema_version"],
)
def test_missing_identity_field(field: str) -> None:
    assert (
        _error(dispatch().model_dump(), **{field: ""})
        == "reflect_generation payload missing identity fields."
    )


def test_a_payload_naming_its_session_run_id_still_validates() -> None:
    # Payloads of earlier releases (and the original's) say run_id; the queue's file keeps them.
    payload = dispatch().model_dump()
    legacy = {"run_id": payload.pop("session_id"), **payload}
    assert validate_reflect_payload(legacy, settings()) == dispatch()
    assert _error(legacy, session_id="") == "reflect_generation payload missing identity fields."


def test_a_set_hash_that_is_not_hex_is_a_typed_error() -> None:
    payload = dispatch().model_dump()
    odd_hash = "not-a-hash"
    generation = threshold_generation_id(SESSION_ID, PRIOR, odd_hash, MODEL, "1")
    overrides = {
        "observation_set_hash": odd_hash,
        "generation_id": generation,
        "threshold_idempotency_key": generation,
    }
    assert _error(payload, **overrides) == "reflect_generation payload is malformed."


def test_idempotency_key_must_equal_generation_id() -> None:
    assert _error(dispatch().model_dump(), threshold_idempotency_key="f" * 64) == (
        "threshold generation_id must equal threshold_idempotency_key."
    )


def test_generation_id_must_match_formula() -> None:
    message = "reflect_generation generation_id does not match threshold formula."
    assert _error(dispatch().model_dump(), observation_set_hash="e" * 64) == message
    assert _error(dispatch().model_dump(), prior_active_generation_id=None) == message


def test_model_and_schema_must_match_current_settings() -> None:
    payload = dispatch().model_dump()
    message = "reflect_generation model/schema mismatch with current settings."
    for changed in (settings(model="other/model"), settings(schema="2")):
        with pytest.raises(ReflectPayloadError) as info:
            validate_reflect_payload(payload, changed)
        assert str(info.value) == message


# --- claim ----------------------------------------------------------------------------------------


def test_claim_reactions() -> None:
    assert claim_reaction("claimed") == "work"
    assert claim_reaction("already_running") == "noop"
    assert claim_reaction("already_succeeded") == "noop_schedule_index"  # redelivery: no model call
    assert claim_reaction("conflict") == "conflict"


def test_claim_conflict_error_names_the_generation() -> None:
    error = claim_conflict_error("9" * 64)
    assert isinstance(error, ConflictError)
    assert str(error) == f"Threshold generation claim conflict for {'9' * 64!r}."


def test_claim_required_end_seq_falls_back_to_payload_only_when_pool_has_none() -> None:
    assert claim_required_end_seq(5, 7) == 5
    assert claim_required_end_seq(0, 7) == 7
    assert claim_required_end_seq(0, 0) == 0
    assert claim_required_end_seq(0, None) == 0


def test_claim_required_end_seq_never_falls_below_the_prior_watermark() -> None:
    # A retained set whose newest observations were dropped must not reopen them (§8).
    assert claim_required_end_seq(5, 5, prior_required_end_seq=6) == 6
    assert claim_required_end_seq(9, 9, prior_required_end_seq=6) == 9
    assert claim_required_end_seq(5, 5, prior_required_end_seq=None) == 5


# --- re-checks and failures -----------------------------------------------------------------------


def test_pre_work_noop_when_pool_fell_under_threshold_or_is_empty() -> None:
    payload = dispatch()
    assert pre_work_decision(payload, pool_of_tokens(10), PRIOR, settings(threshold=10)) == "succeed_noop"
    empty = CandidatePool.from_observations(SESSION_ID, [], words)
    assert pre_work_decision(payload, empty, PRIOR, settings(threshold=1)) == "succeed_noop"


def test_pre_work_stale_when_set_or_prior_changed() -> None:
    payload = dispatch()
    grown = CandidatePool.from_observations(
        SESSION_ID, [*pool_of_tokens(11).observations, observation("c1", "new words")], words
    )
    assert pre_work_decision(payload, grown, PRIOR, settings(threshold=10)) == "stale"
    assert pre_work_decision(payload, pool_of_tokens(11), None, settings(threshold=10)) == "stale"
    assert pre_work_decision(payload, pool_of_tokens(11), PRIOR, settings(threshold=10)) == "proceed"


def test_post_model_recheck_ignores_threshold_but_not_set() -> None:
    payload = dispatch()
    assert post_model_recheck(payload, pool_of_tokens(11), PRIOR) == "ok"
    assert post_model_recheck(payload, pool_of_tokens(12), PRIOR) == "ok"  # same ids, more words
    changed = CandidatePool.from_observations(SESSION_ID, [observation("d1", "w " * 20)], words)
    assert post_model_recheck(payload, changed, PRIOR) == "stale"


def test_recheck_set() -> None:
    assert recheck_set("a" * 64, "a" * 64) == "ok"
    assert recheck_set("a" * 64, "b" * 64) == "stale"


def test_failure_codes_and_decisions() -> None:
    assert set(get_args(GenerationFailureCode)) == {
        "stale_observation_set",
        "no_active_memory",
        "transient_runtime",
    }
    terminal = failure_decision(ReflectorError("no_active_memory", "x"))
    assert (terminal.failure_code, terminal.rethrow) == ("no_active_memory", False)
    conflict = failure_decision(ConflictError("x"))
    assert (conflict.failure_code, conflict.rethrow) == (None, True)
    transient = failure_decision(RuntimeError("x"))
    assert (transient.failure_code, transient.rethrow) == ("transient_runtime", True)


def test_reflector_activity_row() -> None:
    row = reflector_activity(SESSION_ID, "job-1", 2500, NOW)
    assert (row.stage, row.current_tokens, row.target_tokens, row.job_id) == (
        "reflector",
        2500,
        None,
        "job-1",
    )
