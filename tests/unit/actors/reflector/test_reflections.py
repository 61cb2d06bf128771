"""Request-local ids (§9.6), Reflector input and record_reflections (§9.5, §19.6–7), promotion (§9.8)."""

from __future__ import annotations

import pytest

from actors.reflector.core import (
    AcceptedReflection,
    RecordReflectionsHandler,
    ReflectorError,
    RequestLocalIdMap,
    build_reflector_input,
    promotion_plan,
    threshold_check,
)
from actors.reflector.core import CandidatePool as Pool
from protocol.identities import reflection_id
from protocol.tools import InvalidArgumentsReceipt, ReflectionReceipt, looks_like_secret
from tests.unit.actors.reflector.builders import (
    NOW,
    SESSION_ID,
    active_reflection,
    hex_id,
    observation,
    settings,
    words,
)

OBS_A = observation("a", "user prefers tabs", timestamp="2026-01-01 09:00", relevance="critical")
OBS_B = observation("b", "tests passed", timestamp="2026-01-02 09:00", relevance="low")
OBS_C = observation("c", "switched to uv", timestamp="2026-01-02 09:00", relevance="high")
PRIOR_1 = active_reflection("f1", "Prior fact one", (OBS_A.observation_id, OBS_B.observation_id), 1)
PRIOR_0 = active_reflection("f2", "Prior fact zero", (OBS_A.observation_id,), 0)


# --- request-local ids ----------------------------------------------------------------------------


def test_local_ids_follow_timestamp_order() -> None:
    obs_b = observation("b", timestamp="2026-01-02 00:00")
    obs_a = observation("a", timestamp="2026-01-01 00:00")
    id_map = RequestLocalIdMap.for_observations([obs_b, obs_a])
    assert id_map.local_id(obs_a.observation_id) == "1"
    assert id_map.local_id(obs_b.observation_id) == "2"
    assert id_map.canonical_id("2") == obs_b.observation_id
    assert id_map.canonical_id("999") is None
    assert id_map.local_id(hex_id("dd")) is None


def test_local_ids_skip_duplicates_and_break_timestamp_ties_by_id() -> None:
    id_map = RequestLocalIdMap.for_observations([OBS_C, OBS_B, OBS_A, OBS_B])
    assert len(id_map) == 3
    assert [id_map.canonical_id(str(n)) for n in (1, 2, 3)] == [
        OBS_A.observation_id,
        OBS_B.observation_id,
        OBS_C.observation_id,
    ]


# --- Reflector input ------------------------------------------------------------------------------


def test_reflector_input_text() -> None:
    built = build_reflector_input([PRIOR_1, PRIOR_0], [OBS_C, OBS_B, OBS_A])
    assert built.user_message == "\n".join(
        [
            "CURRENT REFLECTIONS:",
            f"[{PRIOR_0.reflection_id}] Prior fact zero",
            f"[{PRIOR_1.reflection_id}] Prior fact one",
            "",
            "CURRENT OBSERVATIONS:",
            "[1] 2026-01-01 09:00 [critical] [coverage: strong] user prefers tabs",
            "[2] 2026-01-02 09:00 [low] [coverage: partial] tests passed",
            "[3] 2026-01-02 09:00 [high] [coverage: none] switched to uv",
            "",
            "Crystallize any missing durable facts or patterns into new reflections. "
            "If nothing is stable enough, do not call the tool.",
        ]
    )
    assert full_ids_absent(built.user_message)


def full_ids_absent(text: str) -> bool:
    return all(o.observation_id not in text for o in (OBS_A, OBS_B, OBS_C))


def test_reflector_input_placeholders() -> None:
    only_obs = build_reflector_input([], [OBS_A]).user_message.split("\n")
    assert only_obs[:2] == ["CURRENT REFLECTIONS:", "(none yet)"]
    only_refl = build_reflector_input([PRIOR_0], []).user_message.split("\n")
    assert only_refl[3:5] == ["CURRENT OBSERVATIONS:", "(none yet)"]


def test_empty_memory_is_a_terminal_failure() -> None:
    with pytest.raises(ReflectorError) as info:
        build_reflector_input([], [])
    assert info.value.failure_code == "no_active_memory"
    assert str(info.value) == "Reflector invoked with empty active memory."


# --- record_reflections ---------------------------------------------------------------------------


def handler(prior: tuple[str, ...] = ()) -> RecordReflectionsHandler:
    built = build_reflector_input([], [OBS_A, OBS_B, OBS_C])
    return RecordReflectionsHandler(SESSION_ID, "1", built.id_map, prior, words)


def item(content: str, *ids: str) -> dict[str, object]:
    return {"content": content, "supporting_observation_ids": list(ids)}


def test_invalid_top_level_arguments() -> None:
    h = handler()
    not_list = h.handle({"reflections": "x"})
    assert isinstance(not_list, InvalidArgumentsReceipt)
    assert not_list.to_tool_result() == {
        "status": "rejected",
        "error": "invalid_arguments",
        "message": "record_reflections requires reflections as a list (array).",
    }
    empty = h.handle({"reflections": []})
    assert isinstance(empty, InvalidArgumentsReceipt)
    assert empty.message.startswith("record_reflections requires at least one new")
    assert isinstance(h.handle(["not", "a", "mapping"]), InvalidArgumentsReceipt)
    assert h.accepted == ()


def test_accepted_reflection_maps_local_ids_to_sorted_canonical_ids() -> None:
    h = handler()
    receipt = h.handle({"reflections": [item("  Tabs are the house style  ", " 3", "1", "3")]})
    assert isinstance(receipt, ReflectionReceipt)
    assert receipt.to_tool_result() == {
        "status": "accepted",
        "added": 1,
        "duplicates": 0,
        "rejected": 0,
        "total_this_run": 1,
        "guidance": "Recorded 1 reflection; 0 duplicates; 0 rejected. Total this run: 1.",
    }
    (accepted,) = h.accepted
    canonical = (OBS_A.observation_id, OBS_C.observation_id)
    assert accepted.supporting_observation_ids == canonical
    assert accepted.reflection_id == reflection_id(SESSION_ID, "1", "Tabs are the house style", canonical)
    assert accepted.content == "Tabs are the house style"
    assert accepted.token_count == 5
    assert accepted.supporting_observation_ids_json == f'["{canonical[0]}","{canonical[1]}"]'


@pytest.mark.parametrize(
    "bad",
    [
        "not an object",
        {"content": "ok", "supporting_observation_ids": ["1"], "retain_id": "1"},
        {"content": "ok", "supporting_observation_ids": ["1"], "retained_observation_ids": ["1"]},
        item("   ", "1"),
        item("two\nlines", "1"),
        item("carriage\rreturn", "1"),
        item("no support"),
        item("blank support", " "),
        item("unknown support", "1", "999"),
        item("canonical ids are not local ids", OBS_A.observation_id),
        {"content": 7, "supporting_observation_ids": ["1"]},
        {"content": "ids not strings", "supporting_observation_ids": [1]},
        item("api_key=sk-live-should-not-be-stored", "1"),
    ],
)
def test_each_bad_item_is_rejected_without_failing_the_call(bad: object) -> None:
    h = handler()
    receipt = h.handle({"reflections": [bad, item("A durable fact", "2")]})
    assert isinstance(receipt, ReflectionReceipt)
    assert (receipt.status, receipt.added, receipt.rejected) == ("accepted", 1, 1)
    assert [r.content for r in h.accepted] == ["A durable fact"]


def test_receipt_is_accepted_even_when_everything_is_rejected() -> None:
    receipt = handler().handle({"reflections": [item("x", "999"), item("y\nz", "1")]})
    assert isinstance(receipt, ReflectionReceipt)
    assert receipt.status == "accepted"
    assert receipt.guidance == "Recorded 0 reflections; 0 duplicates; 2 rejected. Total this run: 0."


def test_duplicates_of_prior_and_of_this_run() -> None:
    prior_id = reflection_id(SESSION_ID, "1", "Already known", [OBS_B.observation_id])
    h = handler(prior=(prior_id,))
    first = h.handle(
        {"reflections": [item("Already known", "2"), item("New one", "1"), item("New one", "1")]}
    )
    assert isinstance(first, ReflectionReceipt)
    assert (first.added, first.duplicates, first.total_this_run) == (1, 2, 1)
    second = h.handle({"reflections": [item("New one", "1"), item("Second", "3"), item("Third", "2")]})
    assert isinstance(second, ReflectionReceipt)
    assert second.guidance == "Recorded 2 reflections; 1 duplicate; 0 rejected. Total this run: 3."
    assert [r.content for r in h.accepted] == ["New one", "Second", "Third"]


def test_handler_budget() -> None:
    assert handler().max_tool_calls == 16


@pytest.mark.parametrize(
    "text",
    [
        "api_key=sk-live-should-not-be-stored",
        "The API-KEY: abc",
        "-----BEGIN RSA PRIVATE KEY-----",
        "begin openssh private key",
        "Bearer token = x",
        "Client_Secret: y",
        "password policy requires twelve characters",  # known false positive of pattern 3
        "the access_token 'abc'",
    ],
)
def test_secret_guard_rejects(text: str) -> None:
    assert looks_like_secret(text)
    receipt = handler().handle({"reflections": [item(text, "1")]})
    assert isinstance(receipt, ReflectionReceipt)
    assert receipt.rejected == 1


@pytest.mark.parametrize(
    "text", ["Service uses JWT tokens for API authentication", "Passwords are hashed with argon2id"]
)
def test_secret_guard_accepts_benign_prose(text: str) -> None:
    assert not looks_like_secret(text)


# --- promotion plan -------------------------------------------------------------------------------


def test_zero_new_reflections_still_promotes_everything() -> None:
    pool = Pool.from_observations(SESSION_ID, [OBS_C, OBS_A, OBS_B], words)
    payload = threshold_check(pool, None, False, settings(threshold=1))
    assert payload is not None
    plan = promotion_plan(payload, [PRIOR_1, PRIOR_0], [], pool.observations, [], 1, NOW)
    assert [r.reflection_id for r in plan.reflections] == [PRIOR_0.reflection_id, PRIOR_1.reflection_id]
    assert plan.new_reflection_count == 0
    assert plan.retained_observation_ids == (OBS_A.observation_id, OBS_B.observation_id, OBS_C.observation_id)
    assert plan.dropped_observation_ids == ()
    assert plan.generation_id == payload.generation_id


def test_promotion_appends_new_reflections_and_applies_drops() -> None:
    later = observation("e", "committed after claim", timestamp="2025-12-31 00:00", end_seq=9)
    pool = Pool.from_observations(SESSION_ID, [OBS_A, OBS_B, OBS_C, later], words)
    payload = threshold_check(pool, None, False, settings(threshold=1))
    assert payload is not None
    new = AcceptedReflection(
        reflection_id=hex_id("ab"),
        content="Fresh",
        supporting_observation_ids=(OBS_B.observation_id,),
        token_count=1,
    )
    duplicate_of_prior = AcceptedReflection(
        reflection_id=PRIOR_0.reflection_id,
        content="Prior fact zero",
        supporting_observation_ids=(OBS_A.observation_id,),
        token_count=3,
    )
    drops = [OBS_B.observation_id, later.observation_id, hex_id("ff")]
    plan = promotion_plan(payload, [PRIOR_0], [duplicate_of_prior, new], pool.observations, drops, 5, NOW)
    assert [r.reflection_id for r in plan.reflections] == [PRIOR_0.reflection_id, new.reflection_id]
    assert plan.new_reflection_count == 1
    assert plan.dropped_observation_ids == (OBS_B.observation_id,)
    # Observations past the watermark stay active whatever was proposed.
    assert plan.retained_observation_ids == (later.observation_id, OBS_A.observation_id, OBS_C.observation_id)
    assert plan.required_end_seq == 5
    record = plan.reflections[1]
    assert (record.session_id, record.observation_set_hash, record.created_at) == (
        SESSION_ID,
        payload.observation_set_hash,
        NOW,
    )
    assert (record.reflector_model, record.compaction_request_id, record.compression_level) == (
        payload.reflector_model,
        "",
        "0",
    )
