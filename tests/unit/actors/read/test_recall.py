"""``recall`` validation and result shapes without SQL or files (reference §13.6)."""

from __future__ import annotations

import pytest

from actors.read.recall import (
    hydrate_events,
    hydration_range,
    observation_recall_result,
    recall_ambiguous,
    recall_not_found,
    recall_source_refs,
    reflection_recall_result,
    refs_for_session,
    validate_recall_arguments,
)
from protocol.read_arguments import INVALID_ID_MESSAGE, INVALID_SESSION_ID_MESSAGE, RecallArguments
from tests.unit.actors.read.factories import hex_id, observation, reflection

CURRENT = "5"


def test_valid_id_is_trimmed_lowercased_and_scoped_to_current_session() -> None:
    request = validate_recall_arguments({"id": "  ABCDEF012345ab "}, CURRENT)
    assert isinstance(request, RecallArguments) and not request.is_full_id
    assert (request.memory_id, request.session_id, request.seq_start) == ("abcdef012345ab", CURRENT, None)
    full = validate_recall_arguments({"id": hex_id("ab")}, CURRENT)
    assert isinstance(full, RecallArguments) and full.is_full_id


def test_explicit_session_is_trimmed() -> None:
    request = validate_recall_arguments({"id": hex_id("ab"), "session_id": " 9 "}, CURRENT)
    assert isinstance(request, RecallArguments)
    assert (request.memory_id, request.session_id) == (hex_id("ab"), "9")


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ({"id": "short"}, "invalid_id"),
        ({"id": 123456789012}, "invalid_id"),
        ({}, "invalid_id"),
        ({"id": "abcdef01234"}, "invalid_id"),  # 11 characters
        ({"id": "g" * 12}, "invalid_id"),
        ({"id": "a" * 65}, "invalid_id"),
        ({"id": "abcdef012345", "session_id": 5}, "invalid_session_id"),
        ({"id": "abcdef012345", "session_id": "   "}, "invalid_session_id"),
        ({"id": 1, "session_id": 5}, "invalid_id"),
        ({"id": "short", "session_id": 5}, "invalid_session_id"),  # handler type checks come first
    ],
)
def test_invalid_recall_arguments(arguments: dict[str, object], code: str) -> None:
    result = validate_recall_arguments(arguments, CURRENT)
    assert isinstance(result, dict)
    expected = INVALID_ID_MESSAGE if code == "invalid_id" else INVALID_SESSION_ID_MESSAGE
    assert result == {"ok": False, "error": code, "message": expected}


def test_error_answers_name_the_session() -> None:
    ambiguous = recall_ambiguous("observation", "5")
    assert ambiguous["error"] == "ambiguous_id"
    assert "observations" in str(ambiguous["message"]) and "'5'" in str(ambiguous["message"])
    assert "reflections" in str(recall_ambiguous("reflection", "5")["message"])
    missing = recall_not_found("abcdef012345", "5")
    assert missing["error"] == "not_found" and missing["ok"] is False
    assert "'5'" in str(missing["message"]) and "'abcdef012345'" in str(missing["message"])


def test_refs_for_session_accepts_legacy_keys_and_drops_foreign_refs() -> None:
    refs: list[dict[str, object]] = [
        {"run_id": "5", "seq": 3},
        {"runId": "5", "seq": "4"},
        {"run_id": 5, "seq": 6.0},
        {"run_id": "6", "seq": 1},
        {"run_id": "5", "seq": 0},
        {"run_id": "5", "seq": "x"},
        {"run_id": "5", "seq": True},
        {"seq": 2},
    ]
    assert refs_for_session(refs, "5") == [
        {"run_id": "5", "seq": 3},
        {"run_id": "5", "seq": 4},
        {"run_id": "5", "seq": 6},
    ]


def test_hydration_range() -> None:
    assert hydration_range([{"run_id": "5", "seq": 9}, {"run_id": "5", "seq": 2}]) == (2, 9)
    assert hydration_range([]) is None
    assert hydration_range([{"run_id": "5", "seq": 0}]) is None


def _event(session_id: str, seq: int, type_: str = "llm_step_completed") -> dict[str, object]:
    return {
        "run_id": session_id,
        "seq": seq,
        "type": type_,
        "ts": f"2026-07-26T12:00:{seq:02d}+00:00",
        "payload": {"n": seq},
    }


def test_hydrate_events_filters_and_sorts() -> None:
    refs = [{"run_id": "5", "seq": 4}, {"run_id": "5", "seq": 2}, {"run_id": "6", "seq": 3}]
    events = [
        _event("5", 4),
        _event("5", 3),
        _event("6", 2),
        _event("5", 2, "run_started"),
        {"runId": "5", "seq": 4},
    ]
    hydrated = hydrate_events(events, refs, "5")
    assert [item["seq"] for item in hydrated] == [2, 4, 4]
    assert hydrated[0] == {
        "run_id": "5",
        "seq": 2,
        "type": "run_started",
        "created_at": "2026-07-26T12:00:02+00:00",
        "payload": {"n": 2},
    }
    assert hydrate_events(events, [{"run_id": "6", "seq": 2}], "5") == []


def test_observation_recall_result_never_leaks_foreign_refs() -> None:
    record = observation(
        "b1", " raw  content ", timestamp="2026-07-26 12:00", relevance="high", refs=(("5", 2), ("9", 2))
    )
    refs = recall_source_refs(record, "5")
    assert refs == [{"run_id": "5", "seq": 2}]
    assert hydration_range(refs) == (2, 2)
    result = observation_recall_result(record, "5", [_event("5", 2), _event("9", 2), _event("5", 1)])
    assert result == {
        "ok": True,
        "kind": "observation",
        "session_id": "5",
        "id": hex_id("b1"),
        "content": " raw  content ",
        "timestamp": "2026-07-26 12:00",
        "importance": "high",
        "source_refs": [{"run_id": "5", "seq": 2}],
        "events": [
            {
                "run_id": "5",
                "seq": 2,
                "type": "llm_step_completed",
                "created_at": "2026-07-26T12:00:02+00:00",
                "payload": {"n": 2},
            }
        ],
    }


def test_reflection_recall_result_unions_supporting_refs() -> None:
    supported = [
        observation("b1", refs=(("5", 7), ("5", 3), ("8", 1))),
        observation("b2", refs=(("5", 3), ("5", 5))),
        observation("b3", session_id="8", refs=(("8", 2),)),  # same id space, other session: hidden
    ]
    record = reflection("a1", "Raw  text", supports=(hex_id("b2"), hex_id("b1"), hex_id("b3"), hex_id("ff")))
    refs = recall_source_refs(supported[:2], "5")
    assert refs == [{"run_id": "5", "seq": 3}, {"run_id": "5", "seq": 5}, {"run_id": "5", "seq": 7}]
    assert hydration_range(refs) == (3, 7)
    events = [_event("5", seq) for seq in range(7, 2, -1)] + [_event("8", 1)]
    result = reflection_recall_result(record, "5", supported, events)
    assert result["kind"] == "reflection" and result["content"] == "Raw  text"
    assert result["supporting_observation_ids"] == [hex_id("b2"), hex_id("b1")]
    assert result["source_refs"] == refs
    assert [item["seq"] for item in result["events"]] == [3, 5, 7]  # type: ignore[attr-defined]
    assert "timestamp" not in result and "importance" not in result


def test_session_id_with_a_lone_surrogate_is_invalid() -> None:
    result = validate_recall_arguments({"id": "abcdef012345", "session_id": "s\ud83d"}, CURRENT)
    assert result == {"ok": False, "error": "invalid_session_id", "message": INVALID_SESSION_ID_MESSAGE}


def test_a_seq_past_the_largest_is_a_typed_error_not_an_overflow() -> None:
    from actors.read.recall import validate_recall_arguments

    for arguments in (
        {"seq_start": 2**63},
        {"seq_start": 2**63 - 5, "seq_end": 2**63 + 1},
        {"seq_start": 10**30},
    ):
        answer = validate_recall_arguments(arguments, "s1")
        assert isinstance(answer, dict) and answer["error"] == "invalid_seq_range", arguments
