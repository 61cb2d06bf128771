"""The numbers status, watch and the gauges share, and the model usage read from a job's detail."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from actors.models.usage import with_cost
from actors.queue.figures import (
    USAGE_KINDS,
    QueueFigures,
    figures_from_status,
    queue_figures,
    usage_of,
)
from cluster.watch import render_watch, snapshot_from, utc_now
from protocol.jobs import OBSERVE_BOUNDARY_HANDLER, REFLECT_GENERATION_HANDLER, SEMANTIC_INDEX_HANDLER
from protocol.settings import ModelPrice, PriceTable


def test_slots_are_the_limit_or_the_pools_slots_if_fewer() -> None:
    common = {"depth": 0, "in_flight": 0, "lanes": 0, "busy_lanes": 0}
    assert queue_figures(max_in_flight=8, capacity={"a": 2, "b": 3}, **common).slots == 5
    assert queue_figures(max_in_flight=4, capacity={"a": 2, "b": 3}, **common).slots == 4
    assert queue_figures(max_in_flight=4, capacity={}, **common).slots == 4


def test_watch_shows_the_figures_the_gauges_report() -> None:
    figures = QueueFigures(depth=7, in_flight=3, slots=6, lanes=9, busy_lanes=3)
    # The in-flight list can lag the state machine by a commit: the count shown is the figures'.
    status = {"figures": figures.as_dict(), "depth": 99, "in_flight": [], "max_in_flight": 1}
    snapshot = snapshot_from(taken_at=utc_now(), queue_name="q", queue_status=status, activity_rows=())
    assert (snapshot.queue_depth, snapshot.runs_in_flight, snapshot.slots) == (7, 3, 6)
    assert "Queue depth: 7 · in flight: 3/6 · lanes: 9 (3 running)" in render_watch(snapshot).plain


def test_an_older_queue_without_figures_still_shows() -> None:
    status = {"depth": 2, "in_flight": [{"job_id": "j", "handler_id": "h", "attempt": 1}], "max_in_flight": 4}
    assert figures_from_status(status) is None
    snapshot = snapshot_from(taken_at=utc_now(), queue_name="q", queue_status=status, activity_rows=())
    assert "Queue depth: 2 · in flight: 1/4" in render_watch(snapshot).plain
    assert figures_from_status({"figures": {"depth": "x"}}) is None


def test_usage_by_stage_and_cost() -> None:
    detail = {
        "model": "local/qwen",
        "prompt_tokens": 30,
        "completion_tokens": 15,
        "usage_by_kind": {
            "reflect": {"prompt_tokens": 20, "cached_prompt_tokens": 4, "completion_tokens": 10},
            "drop": {"prompt_tokens": 10, "completion_tokens": 5},
        },
        "cost": {"currency": "EUR", "by_kind": {"reflect": 0.5, "drop": 0.25}},
    }
    usage = {u.kind: u for u in usage_of(REFLECT_GENERATION_HANDLER, detail)}
    assert dict(usage["reflect"].tokens) == {"prompt": 20, "cached_prompt": 4, "completion": 10}
    assert dict(usage["drop"].tokens) == {"prompt": 10, "cached_prompt": 0, "completion": 5}
    assert (usage["reflect"].cost, usage["reflect"].currency) == (0.5, "EUR")
    [observe] = usage_of(OBSERVE_BOUNDARY_HANDLER, {"prompt_tokens": 3, "completion_tokens": 1})
    assert (observe.kind, observe.model, observe.cost) == ("observe", "unknown", None)
    assert usage_of(SEMANTIC_INDEX_HANDLER, {}) == []


def test_with_cost_prices_each_stage_of_a_priced_model_only() -> None:
    prices = PriceTable(
        currency="USD", models={"p/m": ModelPrice(prompt=1.0, cached_prompt=0.5, completion=2.0)}
    )
    detail: dict[str, Any] = {
        "model": "p/m",
        "usage_by_kind": {
            "reflect": {"prompt_tokens": 1_000_000, "cached_prompt_tokens": 0, "completion_tokens": 0},
            "drop": {"prompt_tokens": 0, "cached_prompt_tokens": 0, "completion_tokens": 1_000_000},
        },
    }
    assert with_cost(detail, prices, "reflect")["cost"] == {
        "currency": "USD",
        "by_kind": {"reflect": 1.0, "drop": 2.0},
    }
    totals = {
        "model": "p/m",
        "prompt_tokens": 2_000_000,
        "cached_prompt_tokens": 1_000_000,
        "completion_tokens": 0,
    }
    assert with_cost(totals, prices, "observe")["cost"] == {"currency": "USD", "by_kind": {"observe": 1.5}}
    assert "cost" not in with_cost({**totals, "model": "other/m"}, prices, "observe")
    assert "cost" not in with_cost(totals, None, "observe")


scalars = st.none() | st.booleans() | st.integers(-5, 10**15) | st.floats() | st.text(max_size=5)
kinds = st.sampled_from(["observe", "reflect", "drop"]) | st.text(max_size=8)
counts = st.dictionaries(
    st.sampled_from(["prompt_tokens", "cached_prompt_tokens", "completion_tokens", "other"]),
    scalars,
    max_size=4,
)
details = st.fixed_dictionaries(
    {},
    optional={
        "model": st.text(max_size=250) | scalars,
        "prompt_tokens": scalars,
        "cached_prompt_tokens": scalars,
        "completion_tokens": scalars,
        "usage_by_kind": st.dictionaries(kinds, counts | scalars, max_size=4) | scalars,
        "cost": st.fixed_dictionaries(
            {
                "currency": st.text(max_size=250) | scalars,
                "by_kind": st.dictionaries(kinds, scalars, max_size=4),
            }
        )
        | scalars,
    },
)


@given(details, st.sampled_from([OBSERVE_BOUNDARY_HANDLER, REFLECT_GENERATION_HANDLER, "x"]))
def test_any_detail_gives_bounded_labels_and_sane_counts(detail: dict[str, Any], handler_id: str) -> None:
    """A worker's detail is not trusted: whatever it holds, labels stay in their bounded sets (or
    are a settings-length string) and counts are non-negative integers; nothing raises."""
    for usage in usage_of(handler_id, detail):
        assert usage.kind in USAGE_KINDS | {"unknown"}
        assert isinstance(usage.model, str) and 0 < len(usage.model) <= 200
        assert all(isinstance(n, int) and n >= 0 for n in usage.tokens.values())
        assert usage.tokens["cached_prompt"] <= usage.tokens["prompt"]
        assert usage.cost is None or usage.cost >= 0
