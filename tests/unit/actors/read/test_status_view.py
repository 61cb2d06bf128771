"""``/om-status``, ``/om-view`` and the live activity line (reference §11, §12)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from actors.read.status_view import (
    StatusInputs,
    UnknownActivityStageError,
    condense,
    format_activity,
    format_status,
    format_view,
    fresh_activity,
    percent_of,
    status_json,
    view_json,
)
from protocol.records import ActivityRecord
from tests.unit.actors.read.factories import active_reflection, hex_id, observation

ONE_OBSERVATION = StatusInputs(
    recorded_observations=1,
    active_observations=1,
    visible_observations=0,
    recorded_reflections=0,
    visible_reflections=0,
    reflection_tokens=0,
    coverage_end=None,
    active_tokens=15,
    reflect_after_tokens=40_000,
    observations_max_tokens=20_000,
)


def _lines(inputs: StatusInputs) -> list[str]:
    return format_status(inputs).split("\n")


def test_status_layout_for_one_observation() -> None:
    lines = _lines(ONE_OBSERVATION)
    assert lines[:6] == [
        "## Observational memory",
        "",
        "### Memory",
        "- **Observations:** 1 recorded / 0 dropped / 1 active / 0 visible",
        "- **Reflections:** 0 recorded / 0 visible (~0 tokens)",
        "- **Coverage:** no events covered yet",
    ]
    assert lines[6:10] == [
        "",
        "### Activity",
        "- **Next reflection:** ~15 / 40,000 tokens (0%)",
        "- **Active observation pool:** ~15 / 20,000 max tokens (0%)",
    ]
    assert lines[10].startswith("- **Pipeline:** ")
    assert lines[11].startswith("- **Compaction:** ")
    assert lines[12] == ""
    assert lines[13].startswith("> ")
    assert len(lines) == 14
    text = format_status(ONE_OBSERVATION)
    assert "max_retries" not in text and "extension_agent" not in text


def test_status_thousands_separators_dropped_and_coverage() -> None:
    inputs = StatusInputs(
        recorded_observations=1_234,
        active_observations=234,
        visible_observations=1_001,
        recorded_reflections=2_000,
        visible_reflections=1_500,
        reflection_tokens=1_234_567,
        coverage_end=12_345,
        active_tokens=30_000,
        reflect_after_tokens=40_000,
        observations_max_tokens=20_000,
    )
    lines = _lines(inputs)
    assert lines[3] == "- **Observations:** 1,234 recorded / 1,000 dropped / 234 active / 1,001 visible"
    assert lines[4] == "- **Reflections:** 2,000 recorded / 1,500 visible (~1,234,567 tokens)"
    assert lines[5] == "- **Coverage:** through event 12,345"
    assert lines[8] == "- **Next reflection:** ~30,000 / 40,000 tokens (75%)"
    assert lines[9] == "- **Active observation pool:** ~30,000 / 20,000 max tokens (150%)"


def test_status_dropped_never_negative_and_zero_coverage() -> None:
    inputs = replace(ONE_OBSERVATION, recorded_observations=1, active_observations=3, coverage_end=0)
    lines = _lines(inputs)
    assert lines[3] == "- **Observations:** 1 recorded / 0 dropped / 3 active / 0 visible"
    assert lines[5] == "- **Coverage:** no events covered yet"
    assert _lines(replace(ONE_OBSERVATION, coverage_end=1))[5] == "- **Coverage:** through event 1"


def test_status_percent_rounds_half_up_and_zero_denominator() -> None:
    assert percent_of(1, 200) == 1  # 0.5% rounds away from zero, not to even
    assert percent_of(5, 200) == 3  # 2.5%
    assert percent_of(149, 10_000) == 1
    assert percent_of(10, 0) == 0
    lines = _lines(replace(ONE_OBSERVATION, reflect_after_tokens=0, observations_max_tokens=-1))
    assert lines[8] == "- **Next reflection:** ~15 / 0 tokens (0%)"
    assert lines[9] == "- **Active observation pool:** ~15 / -1 max tokens (0%)"


def test_status_json_has_the_same_numbers() -> None:
    data = status_json(replace(ONE_OBSERVATION, recorded_observations=4, active_tokens=20_000))
    assert data["dropped_observations"] == 3
    assert data["next_reflection_percent"] == 50
    assert data["active_pool_percent"] == 100
    assert data["coverage_end"] is None
    assert data["reflect_after_tokens"] == 40_000


# --------------------------------------------------------------------------------------------- view

SESSION = "5"


def test_view_layout_with_reflections_and_observations() -> None:
    known = {hex_id("b1"), hex_id("b2")}
    reflections = [
        active_reflection(
            "a1", "  Stable\n fact ", position=1, supports=(hex_id("b2"), hex_id("b1"), hex_id("b2"))
        ),
        active_reflection("a2", "Orphan", position=2, supports=(hex_id("ff"),)),
    ]
    observations = [
        observation(
            "b2", "Later\tone", timestamp="2026-07-26 13:00", relevance="high", refs=(("5", 3), ("5", 4))
        ),
        observation("b1", "Earlier", timestamp="2026-07-26 12:00", refs=(("5", 2), ("9", 1))),
        observation("b3", "No refs", timestamp="2026-07-26 14:00", refs=(("9", 7),)),
    ]
    assert format_view(reflections, observations, SESSION, known) == "\n".join(
        [
            "## Reflections",
            "",
            "`[a10000000000]` Stable fact",
            "> Supports observations `[b20000000000]`, `[b10000000000]`",
            "",
            "`[a20000000000]` Orphan",
            "> Supports observations *(none)*",
            "",
            "## Observations",
            "",
            # Source order: citing only another session's event, b3 sits at its part's start (1).
            "`[b30000000000]` 2026-07-26 14:00 **[medium]** No refs",
            "> Sources: *(none)*",
            "",
            "`[b10000000000]` 2026-07-26 12:00 **[medium]** Earlier",
            "> Sources: event `2`",
            "",
            "`[b20000000000]` 2026-07-26 13:00 **[high]** Later one",
            "> Sources: events `3`, `4`",
        ]
    )


def test_view_empty_memory() -> None:
    assert format_view([], [], SESSION, set()) == (
        "## Reflections\n\n*No reflections yet.*\n## Observations\n\n*No observations yet.*"
    )


def test_view_no_reflections_has_no_blank_line_before_observations() -> None:
    text = format_view([], [observation("b1", "x", refs=(("5", 1),))], SESSION, set())
    assert "*No reflections yet.*\n## Observations\n\n`[b10000000000]`" in text
    assert text.endswith("> Sources: event `1`")


def test_view_json_mirrors_view() -> None:
    data = view_json(
        [active_reflection("a1", " r  x ", supports=(hex_id("b1"), hex_id("zz")))],
        [observation("b1", "o", refs=(("5", 2), ("6", 3)))],
        SESSION,
        {hex_id("b1")},
    )
    assert data["reflections"] == [
        {
            "id": hex_id("a1"),
            "display_id": "a10000000000",
            "content": "r x",
            "supporting_observation_ids": [hex_id("b1")],
        }
    ]
    observations = data["observations"]
    assert isinstance(observations, list)
    assert observations[0]["source_seqs"] == [2]


def test_condense() -> None:
    assert condense("  a \n\t b\u00a0\u2003c  ") == "a b c"
    assert condense("") == ""


# ----------------------------------------------------------------------------------------- activity


@pytest.mark.parametrize(
    ("stage", "current", "target", "expected"),
    [
        ("observer", 1_234, None, "Observational memory: observer running on ~1,234-token chunk"),
        ("reflector", 2_500, None, "Observational memory: reflector running (~2,500 tokens)"),
    ],
)
def test_activity_text(stage: str, current: int, target: int | None, expected: str) -> None:
    assert format_activity(stage, current, target) == expected


def test_dropper_activity_text() -> None:
    text = format_activity("dropper", 25_000, 20_000)
    assert text.startswith("Observational memory: dropper running \u2014 ")
    assert "25,000" in text and "20,000" in text and "(125%)" in text
    no_target = format_activity("dropper", 1_500, None)
    assert "1,500" in no_target and "(0%)" in no_target and " 0 " in no_target
    assert "(1%)" in format_activity("dropper", 1, 200)


def test_unknown_stage_raises_typed_error() -> None:
    with pytest.raises(UnknownActivityStageError, match="'indexer'"):
        format_activity("indexer", 1, None)


NOW = datetime(2026, 7, 26, 12, 0, 0, 500_000, tzinfo=UTC)


def _activity(updated_at: str) -> ActivityRecord:
    return ActivityRecord(
        session_id="5", job_id="j", stage="observer", current_tokens=1, updated_at=updated_at
    )


@pytest.mark.parametrize(("age", "fresh"), [(0, True), (299, True), (300, True), (301, False), (-30, True)])
def test_activity_freshness_window(age: int, fresh: bool) -> None:
    updated = (NOW.replace(microsecond=0) - timedelta(seconds=age)).isoformat()
    assert fresh_activity(_activity(updated), NOW) is fresh


def test_activity_freshness_other_offsets_and_garbage() -> None:
    assert fresh_activity(_activity("2026-07-26T12:56:00+01:00"), NOW) is True  # 11:56 UTC
    assert fresh_activity(_activity("2026-07-26T12:54:59+01:00"), NOW) is False  # 11:54:59 UTC
    assert fresh_activity(_activity("2026-07-26T11:55:00Z"), NOW) is True
    assert fresh_activity(_activity("not a time"), NOW) is False
    assert fresh_activity(_activity(""), NOW) is False


def test_cost_report_sums_usage_and_prices_only_known_models() -> None:
    from actors.read.status_view import format_usage, usage_json
    from persistence.settings.parse import settings_from_mapping
    from protocol.records import TokenUsageTotal

    rows = [
        TokenUsageTotal(
            session_id="s",
            job_kind="observe",
            model="p/a",
            requests=3,
            prompt_tokens=2_000_000,
            cached_prompt_tokens=1_000_000,
            completion_tokens=100_000,
        ),
        TokenUsageTotal(
            session_id="s",
            job_kind="reflect",
            model="p/b",
            requests=1,
            prompt_tokens=10,
            cached_prompt_tokens=0,
            completion_tokens=5,
        ),
    ]
    assert "cost" not in usage_json(rows, None)
    prices = settings_from_mapping(
        {
            "prices": {
                "currency": "EUR",
                "models": {"p/a": {"prompt": 1.0, "cached_prompt": 0.1, "completion": 4.0}},
            }
        }
    ).prices
    report = usage_json(rows, prices)
    # 1M uncached at 1.0 + 1M cached at 0.1 + 0.1M completion at 4.0 per million.
    assert report["cost"] == {"currency": "EUR", "total": 1.5, "unpriced_models": ["p/b"]}
    assert report["total"] == {
        "requests": 4,
        "prompt_tokens": 2_000_010,
        "cached_prompt_tokens": 1_000_000,
        "completion_tokens": 100_005,
    }
    assert format_usage(report) == (
        "4 model requests, 2,000,010 prompt (1,000,000 cached), 100,005 completion tokens, 1.5000 EUR"
    )
