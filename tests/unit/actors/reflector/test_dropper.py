"""Dropper gates, cap, input, tool handler and server-side selection (§9.4, §9.7)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.reflector.core import AcceptedReflection, RequestLocalIdMap
from actors.reflector.dropper import (
    DROPPER_THINKING_LEVEL,
    DropObservationsHandler,
    build_dropper_input,
    dropper_activity,
    max_drop_count,
    pool_token_count,
    select_drop_candidates,
    should_run_dropper,
    timestamp_rank,
)
from protocol.tools import DropReceipt, InvalidArgumentsReceipt
from tests.unit.actors.reflector.builders import (
    NOW,
    SESSION_ID,
    active_reflection,
    hex_id,
    observation,
    words,
)

# --- gates and cap --------------------------------------------------------------------------------


def test_dropper_gate_is_strict_and_needs_a_new_reflection() -> None:
    assert should_run_dropper(1, 301, 300)
    assert not should_run_dropper(1, 300, 300)
    assert not should_run_dropper(0, 10_000, 300)


@pytest.mark.parametrize(
    ("active", "pool", "target", "expected"),
    [
        (4, 400, 300, 1),
        (4, 550, 300, 2),
        (4, 700, 300, 3),
        (4, 300, 300, 0),
        (0, 100, 50, 0),
        (4, 10_000, 0, 4),  # capped at the active count
        (4, 400, -1, 0),
        (4, 0, 0, 0),
        (3, 301, 300, 1),  # at least one once over target
    ],
)
def test_max_drop_count_examples(active: int, pool: int, target: int, expected: int) -> None:
    assert max_drop_count(active, pool, target) == expected


@given(st.integers(-5, 200), st.integers(-5, 100_000), st.integers(-5, 100_000))
def test_max_drop_count_bounds(active: int, pool: int, target: int) -> None:
    result = max_drop_count(active, pool, target)
    assert 0 <= result <= max(0, active)
    assert (result >= 1) == (active > 0 and target >= 0 and pool > target and pool > 0)


def test_pool_tokens_and_activity() -> None:
    assert pool_token_count([observation("a", "one two"), observation("b", "three")], words) == 3
    row = dropper_activity(SESSION_ID, "job-1", 35_000, 30_000, NOW)
    assert (row.stage, row.current_tokens, row.target_tokens) == ("dropper", 35_000, 30_000)
    assert DROPPER_THINKING_LEVEL == "off"


# --- prompt input ---------------------------------------------------------------------------------


def test_dropper_input_text() -> None:
    obs_a = observation("a", "user prefers tabs", timestamp="2026-01-01 09:00", relevance="critical")
    obs_b = observation("b", "tests passed", timestamp="2026-01-02 09:00", relevance="low")
    prior = active_reflection("f1", "Tabs everywhere", (obs_a.observation_id,), 0)
    new = AcceptedReflection(
        reflection_id=hex_id("f2"),
        content="Tabs confirmed",
        supporting_observation_ids=(obs_a.observation_id,),
        token_count=2,
    )
    id_map = RequestLocalIdMap.for_observations([obs_b, obs_a])
    text = build_dropper_input([prior, new], [obs_a, obs_b], id_map, 31_235, 30_000, 1)
    assert text == "\n".join(
        [
            "CURRENT REFLECTIONS:",
            f"[{prior.reflection_id}] Tabs everywhere",
            f"[{new.reflection_id}] Tabs confirmed",
            "",
            "CURRENT OBSERVATIONS:",
            "[1] 2026-01-01 09:00 [critical] [coverage: strong] user prefers tabs",
            "[2] 2026-01-02 09:00 [low] [coverage: none] tests passed",
            "",
            "Active observation pool: ~31,235 tokens; target: ~30,000 tokens; "
            "fullness against target: ~104%; over target by ~1,235 tokens.",
            "Maximum drops allowed this run: 1 observation. This maximum is sized to move the active pool "
            "toward the target if every proposed drop is clearly safe.",
            "This maximum is a hard upper bound, not a target. Drop fewer or none if fewer observations are "
            "clearly safe.",
        ]
    )


def test_dropper_input_rounds_half_up_and_pluralises() -> None:
    id_map = RequestLocalIdMap.for_observations([])
    text = build_dropper_input([], [], id_map, 1_005, 200, 3)
    assert "fullness against target: ~503%" in text  # 502.5 rounds away from zero, as PHP does
    assert "Maximum drops allowed this run: 3 observations." in text
    assert text.split("\n")[:2] == ["CURRENT REFLECTIONS:", "(none yet)"]


# --- tool handler ---------------------------------------------------------------------------------


def dropper_handler(max_drops: int = 2) -> tuple[DropObservationsHandler, list[str]]:
    observations = [observation(p, timestamp=f"2026-01-0{n} 00:00") for n, p in enumerate("abc", start=1)]
    handler = DropObservationsHandler(RequestLocalIdMap.for_observations(observations), max_drops)
    return handler, [o.observation_id for o in observations]


def test_drop_handler_rejects_unusable_ids() -> None:
    handler, _ = dropper_handler()
    unusable: tuple[object, ...] = ({"ids": []}, {"ids": "1"}, {}, ["1"])
    for arguments in unusable:
        receipt = handler.handle(arguments)
        assert isinstance(receipt, InvalidArgumentsReceipt)
        assert receipt.to_tool_result() == {
            "status": "rejected",
            "error": "invalid_arguments",
            "message": "drop_observations requires a non-empty ids list.",
        }


def test_drop_handler_counts_and_queues_canonical_ids() -> None:
    handler, canonical = dropper_handler(max_drops=2)
    first = handler.handle({"ids": ["2", " 2 ", "999", "", 3, "1"], "reason": "redundant"})
    assert isinstance(first, DropReceipt)
    assert first.to_tool_result() == {
        "status": "accepted",
        "added": 2,
        "missing": 3,
        "duplicate_in_request": 1,
        "duplicate_in_run": 0,
        "total_candidates": 2,
        "max_drops_allowed": 2,
        "guidance": "Queued 2 drop candidates. Candidates this run: 2. Maximum drops allowed: 2.",
    }
    second = handler.handle({"ids": ["1", "3", "1"]})
    assert isinstance(second, DropReceipt)
    assert (second.added, second.duplicate_in_run, second.duplicate_in_request) == (1, 1, 1)
    assert second.guidance == "Queued 1 drop candidate. Candidates this run: 3. Maximum drops allowed: 2."
    assert handler.proposals == (canonical[1], canonical[0], canonical[2])
    assert handler.max_tool_calls == 16


# --- server-side selection ------------------------------------------------------------------------


def test_selection_order_worked_example() -> None:
    none_critical_old = observation("a1", timestamp="2026-01-01 08:00", relevance="critical")
    none_low = observation("a2", timestamp="2026-01-03 08:00", relevance="low")
    partial_medium = observation("a3", timestamp="2026-01-03 08:00", relevance="medium")
    strong_low_new = observation("a4", timestamp="2026-01-05 08:00", relevance="low")
    strong_low_old = observation("a5", timestamp="2026-01-02 08:00", relevance="low")
    strong = (strong_low_new.observation_id, strong_low_old.observation_id)
    reflections = [
        active_reflection("f1", "r1", (*strong, partial_medium.observation_id), 0),
        active_reflection("f2", "r2", strong, 1),
    ]
    observations = [none_critical_old, none_low, partial_medium, strong_low_new, strong_low_old]
    proposed = [
        none_critical_old.observation_id,
        none_low.observation_id,
        partial_medium.observation_id,
        strong_low_new.observation_id,
        strong_low_old.observation_id,
        hex_id("ee"),
        strong_low_old.observation_id,
    ]
    selected = select_drop_candidates(proposed, observations, reflections, 3)
    assert selected == (
        strong_low_old.observation_id,
        strong_low_new.observation_id,
        partial_medium.observation_id,
    )
    assert select_drop_candidates(proposed, observations, reflections, 0) == ()
    everything = select_drop_candidates(proposed, observations, reflections, 10)
    assert everything[-2:] == (none_low.observation_id, none_critical_old.observation_id)


def test_selection_ties_fall_back_to_proposal_order_and_bad_timestamps_rank_last() -> None:
    first = observation("b1", timestamp="2026-01-01 08:00")
    second = observation("b2", timestamp="2026-01-01 08:00")
    proposed = [second.observation_id, first.observation_id]
    assert select_drop_candidates(proposed, [first, second], [], 2) == tuple(proposed)
    assert timestamp_rank("2026-01-01 08:00") < timestamp_rank("2026-01-01 08:01")
    assert timestamp_rank("2026-02-30 08:00") == math.inf
    assert timestamp_rank("yesterday") == math.inf
