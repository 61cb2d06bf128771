"""Tool arguments and receipts (§7.7, §9.5, §9.7, §13.1, §13.5)."""

from __future__ import annotations

from typing import Any

import pytest

from protocol.tools import (
    ALL_OBSERVATIONS_REJECTED_MESSAGE,
    InvalidArgumentsReceipt,
    drop_ids,
    drop_receipt,
    invalid_observations_receipt,
    looks_like_secret,
    observation_items,
    observation_receipt,
    parse_observation_draft,
    parse_reflection_draft,
    reflection_items,
    reflection_receipt,
)


def obs(**overrides: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "timestamp": "2026-07-26 10:00",
        "content": "  User prefers feature flags ",
        "relevance": "high",
        "source_refs": [
            {"run_id": "run-1", "seq": 2},
            {"run_id": "run-1", "seq": "1"},
            {"run_id": "run-1", "seq": 2},
        ],
    }
    item.update(overrides)
    return item


def test_observation_draft_trims_and_normalizes() -> None:
    refs = [
        {"run_id": "run-1", "seq": 2, "why": "extra"},
        {"run_id": "run-1", "seq": "1"},
        {"run_id": "run-1", "seq": 2},
    ]
    draft = parse_observation_draft(obs(note="ignored extra key", source_refs=refs))
    assert draft is not None
    assert draft.content == "User prefers feature flags"
    assert [(r.run_id, r.seq) for r in draft.source_refs] == [("run-1", 1), ("run-1", 2)]
    assert draft.cites_only({("run-1", 1), ("run-1", 2)})
    assert not draft.cites_only({("run-1", 1)})


@pytest.mark.parametrize(
    "item",
    [
        "not an object",
        obs(content="   "),
        obs(content="two\nlines"),
        obs(content=5),
        obs(timestamp="2026-07-26T10:00"),
        obs(timestamp="yesterday"),
        obs(relevance="urgent"),
        obs(source_refs=[]),
        obs(source_refs="run-1:1"),
        obs(source_refs=[{"run_id": "", "seq": 1}]),
        obs(source_refs=[{"run_id": "run-1", "seq": "one"}]),
        obs(source_refs=[{"run_id": "run-1"}]),
        {k: v for k, v in obs().items() if k != "relevance"},
    ],
)
def test_invalid_observation_items_are_rejected(item: Any) -> None:
    assert parse_observation_draft(item) is None


def test_observation_timestamp_is_format_only_and_trailing_newline_is_trimmed() -> None:
    draft = parse_observation_draft(obs(timestamp="2026-02-30 25:61", content="fact\n"))
    assert draft is not None and draft.content == "fact"


def test_observation_items() -> None:
    assert observation_items({"observations": []}) == []
    assert observation_items({"observations": {"a": 1}}) is None
    assert observation_items({}) is None


@pytest.mark.parametrize(
    ("counts", "status", "error", "message_start"),
    [
        ((0, 0, 2, 5), "rejected", "all_rejected", ALL_OBSERVATIONS_REJECTED_MESSAGE),
        ((1, 0, 1, 6), "accepted", None, "Some observations were rejected; "),
        ((0, 1, 1, 6), "accepted", None, "Some observations were rejected; "),
        ((2, 1, 0, 8), "accepted", None, "Observations accepted. "),
        ((0, 0, 0, 0), "accepted", None, "Observations accepted. "),
    ],
)
def test_observation_receipt_rules(
    counts: tuple[int, int, int, int], status: str, error: str | None, message_start: str
) -> None:
    receipt = observation_receipt(*counts)
    assert receipt.status == status
    assert receipt.error == error
    assert receipt.message.startswith(message_start)
    result = receipt.to_tool_result()
    assert list(result)[:6] == ["status", "added", "duplicates", "rejected", "total", "message"]
    assert ("error" in result) is (error is not None)
    assert (result["added"], result["duplicates"], result["rejected"], result["total"]) == counts


def test_invalid_observations_receipt() -> None:
    assert invalid_observations_receipt(3).to_tool_result() == {
        "status": "rejected",
        "added": 0,
        "duplicates": 0,
        "rejected": 1,
        "total": 3,
        "message": "record_observations requires observations as a list (array).",
        "error": "invalid_arguments",
    }


def test_reflection_items_invalid_arguments() -> None:
    not_list = reflection_items({"reflections": "x"})
    assert isinstance(not_list, InvalidArgumentsReceipt)
    assert not_list.to_tool_result() == {
        "status": "rejected",
        "error": "invalid_arguments",
        "message": "record_reflections requires reflections as a list (array).",
    }
    empty = reflection_items({"reflections": []})
    assert isinstance(empty, InvalidArgumentsReceipt)
    assert empty.message.startswith("record_reflections requires at least one new ")
    assert reflection_items({"reflections": [{}]}) == [{}]


def test_reflection_draft_accepts_and_trims() -> None:
    draft = parse_reflection_draft(
        {
            "content": " Service uses JWT tokens for API authentication ",
            "supporting_observation_ids": [" 1", "2"],
        }
    )
    assert draft is not None
    assert draft.content == "Service uses JWT tokens for API authentication"
    assert draft.supporting_observation_ids == ("1", "2")


@pytest.mark.parametrize(
    "item",
    [
        {"content": "api_key=sk-live-should-not-be-stored", "supporting_observation_ids": ["1"]},
        {"content": "fact", "supporting_observation_ids": ["1"], "retain_id": "x"},
        {"content": "fact", "supporting_observation_ids": ["1"], "retained_observation_ids": []},
        {"content": "a\rb", "supporting_observation_ids": ["1"]},
        {"content": "a\nb", "supporting_observation_ids": ["1"]},
        {"content": " ", "supporting_observation_ids": ["1"]},
        {"content": "fact", "supporting_observation_ids": []},
        {"content": "fact", "supporting_observation_ids": ["1", "  "]},
        {"content": "fact", "supporting_observation_ids": [1]},
        {"content": "fact", "supporting_observation_ids": "1"},
        {"content": "fact"},
        ["content"],
    ],
)
def test_invalid_reflection_items_are_rejected(item: Any) -> None:
    assert parse_reflection_draft(item) is None


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("-----BEGIN OPENSSH PRIVATE KEY-----", True),
        ("The Password: hunter2", True),
        ("bearer token = abc", True),
        ("password policy requires 12 characters", True),
        ("Service uses JWT tokens for API authentication", False),
        ("apikeys are rotated monthly", False),
    ],
)
def test_secret_heuristics(text: str, secret: bool) -> None:
    assert looks_like_secret(text) is secret


@pytest.mark.parametrize(
    ("counts", "guidance"),
    [
        ((1, 1, 1, 1), "Recorded 1 reflection; 1 duplicate; 1 rejected. Total this run: 1."),
        ((0, 2, 3, 4), "Recorded 0 reflections; 2 duplicates; 3 rejected. Total this run: 4."),
    ],
)
def test_reflection_receipt_is_always_accepted(counts: tuple[int, int, int, int], guidance: str) -> None:
    result = reflection_receipt(*counts).to_tool_result()
    assert result == {
        "status": "accepted",
        "added": counts[0],
        "duplicates": counts[1],
        "rejected": counts[2],
        "total_this_run": counts[3],
        "guidance": guidance,
    }


def test_drop_ids_and_receipt() -> None:
    bad_arguments: list[dict[str, Any]] = [{}, {"ids": []}, {"ids": "1"}]
    for bad in bad_arguments:
        receipt = drop_ids(bad)
        assert isinstance(receipt, InvalidArgumentsReceipt)
        assert receipt.message == "drop_observations requires a non-empty ids list."
    assert drop_ids({"ids": ["1", 2], "reason": "covered"}) == ["1", 2]
    result = drop_receipt(1, 2, 0, 1, 1, 3).to_tool_result()
    assert list(result) == [
        "status",
        "added",
        "missing",
        "duplicate_in_request",
        "duplicate_in_run",
        "total_candidates",
        "max_drops_allowed",
        "guidance",
    ]
    assert result["guidance"] == "Queued 1 drop candidate. Candidates this run: 1. Maximum drops allowed: 3."
    assert drop_receipt(2, 0, 0, 0, 2, 2).guidance.startswith("Queued 2 drop candidates.")
