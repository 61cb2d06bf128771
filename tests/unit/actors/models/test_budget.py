"""The daily budget (pure) and the per-call prompt cap of the tool loop."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.models.budget import BudgetGate, budget_hold, budget_report, day_spend, format_budget, utc_day
from actors.models.chat import (
    PROMPT_FRAMING_TOKENS,
    ChatRequest,
    ChatResponse,
    PromptCap,
    TokenUsage,
    ToolCall,
    run_tool_loop,
)
from persistence.settings.parse import settings_from_mapping
from protocol.errors import BudgetReachedError, PromptOverCapError
from protocol.records import ModelDaySpend
from protocol.settings import BudgetSettings, ModelPrice, PriceTable

NOON = 1_767_355_200.0  # 2026-01-02 12:00:00 UTC
PRICES = PriceTable(models={"local/m": ModelPrice(prompt=1.0, completion=5.0)})


def row(
    model: str, prompt: int, completion: int, *, usd: float = 0.0, unreported: bool = True
) -> ModelDaySpend:
    return ModelDaySpend(
        model=model,
        requests=1,
        prompt_tokens=prompt,
        completion_tokens=completion,
        reported_usd=usd,
        unreported_prompt_tokens=prompt if unreported else 0,
        unreported_completion_tokens=completion if unreported else 0,
        unreported_requests=1 if unreported else 0,
    )


def test_the_day_is_the_utc_day() -> None:
    assert utc_day(NOON) == ("2026-01-02", "2026-01-02T00:00:00+00:00", NOON + 12 * 3600)
    assert utc_day(NOON + 12 * 3600)[0] == "2026-01-03"  # midnight opens the next day


def test_spend_counts_reported_money_then_prices_and_never_the_builtin_model() -> None:
    rows = [
        row("claude-code/haiku", 1000, 100, usd=0.25, unreported=False),  # the CLI reported its cost
        row("local/m", 1_000_000, 200_000),  # priced: 1.0 + 1.0
        row("other/x", 10, 10),  # neither: tokens only
        row("builtin/extractive", 10**9, 10**9),  # free, not counted
    ]
    spend = day_spend(rows, PRICES)
    assert spend.tokens == 1100 + 1_200_000 + 20 and spend.requests == 3
    assert spend.usd == pytest.approx(2.25) and spend.unpriced_models == ("other/x",)
    euros = PriceTable(currency="EUR", models=PRICES.models)
    assert day_spend(rows, euros).usd == pytest.approx(0.25)  # never converts a currency


def test_a_cap_is_reached_at_it_tokens_first() -> None:
    spend = day_spend([row("local/m", 600, 400)], PRICES)
    assert budget_hold(spend, BudgetSettings(daily_tokens=1001), NOON) is None
    held = budget_hold(spend, BudgetSettings(daily_tokens=1000, daily_usd=0.0001), NOON)
    assert isinstance(held, BudgetReachedError)
    assert (held.reason, held.spent, held.cap, held.until) == ("budget_tokens", 1000.0, 1000.0, NOON + 43200)
    money = budget_hold(spend, BudgetSettings(daily_tokens=None, daily_usd=0.0026), NOON)
    assert money is not None and money.reason == "budget_usd" and money.spent == pytest.approx(0.0026)
    assert "budget.daily_usd" in str(money) and "local/m" not in str(money)
    assert budget_hold(spend, BudgetSettings(daily_tokens=None, daily_usd=None), NOON) is None


def test_the_gate_reads_the_day_and_lets_the_free_model_through() -> None:
    asked: list[str] = []

    def spend_since(since: str) -> list[ModelDaySpend]:
        asked.append(since)
        return [row("local/m", 900, 100)]

    settings = settings_from_mapping({"budget": {"daily_tokens": 1000}})
    gate = BudgetGate(settings, spend_since, lambda: NOON)
    with pytest.raises(BudgetReachedError):
        gate.check("local/m")
    assert gate.reached("claude-code/haiku") and asked == ["2026-01-02T00:00:00+00:00"] * 2
    gate.check("builtin/extractive")  # never capped, not even read
    assert len(asked) == 2
    off = settings_from_mapping({"budget": {"daily_tokens": None}})
    BudgetGate(off, spend_since, lambda: NOON).check("local/m")
    assert len(asked) == 2


def test_the_report_says_what_was_spent_against_which_cap() -> None:
    spend = day_spend([row("local/m", 1500, 500), row("other/x", 1, 1)], PRICES)
    report = budget_report(spend, BudgetSettings(daily_tokens=2000, daily_usd=5.0), NOON)
    assert report["reached"] == "budget_tokens" and report["resets_at"] == "2026-01-03T00:00:00+00:00"
    assert json.loads(json.dumps(report)) == report
    line = format_budget(report)
    assert line.startswith("2026-01-02 (UTC): 2,002 tokens of 2,000, 0.0040 USD of 5.00")
    assert "other/x" in line and "paused until 2026-01-03 00:00 UTC" in line


class Recorder:
    """A chat model that answers every request with one tool call and records what it was sent."""

    def __init__(self, cost: float | None = None) -> None:
        self.requests: list[list[dict[str, Any]]] = []
        self.cost = cost

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append([dict(m) for m in request.messages])
        call = ToolCall(call_id=f"c{len(self.requests)}", name="t", arguments='{"x": "' + "y" * 50 + '"}')
        return ChatResponse(tool_calls=(call,), usage=TokenUsage(prompt_tokens=10, cost_usd=self.cost))


SPEC = {"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}


def count(text: str) -> int:
    return len(text)  # one "token" per character: easy to reason about


def loop(model: Recorder, cap: int | None, input_text: str = "x" * 100) -> Any:
    return run_tool_loop(
        model,
        model="local/m",
        instructions="i" * 10,
        input_text=input_text,
        tools=[(SPEC, lambda args: {"status": "rejected"})],  # never accepted: a correction round follows
        max_tool_calls=5,
        max_duration_s=30,
        prompt_cap=None if cap is None else PromptCap(cap, count),
    )


def test_a_first_request_over_the_cap_is_never_sent() -> None:
    first = PROMPT_FRAMING_TOKENS + len('{"type":"object"}') + 10 + 100
    model = Recorder()
    with pytest.raises(PromptOverCapError) as info:
        loop(model, first - 1)
    assert model.requests == [] and (info.value.prompt_tokens, info.value.cap) == (first, first - 1)
    assert "100" not in str(info.value).replace(str(first), "")  # counts only, never the prompt


def test_a_correction_round_over_the_cap_is_not_sent_and_the_loop_stops() -> None:
    first = PROMPT_FRAMING_TOKENS + len('{"type":"object"}') + 10 + 100
    model = Recorder(cost=0.5)
    result = loop(model, first + 5)  # room for the first request only
    assert len(model.requests) == 1 and result.stop_reason == "prompt_cap" and result.rounds == 1
    assert result.cost_usd == 0.5
    unlimited = loop(Recorder(), None)
    assert unlimited.rounds == 5 and unlimited.cost_usd is None


def test_a_reported_cost_feeds_the_cost_metric_when_no_price_covers_the_model() -> None:
    from actors.models.usage import with_cost
    from actors.queue.figures import usage_of

    observe = {"model": "claude-code/haiku", "prompt_tokens": 10, "completion_tokens": 2, "cost_usd": 0.004}
    [usage] = usage_of("observational_memory.observe_boundary", with_cost(observe, None, "observe"))
    assert (usage.kind, usage.cost, usage.currency) == ("observe", 0.004, "USD")
    split = {
        "model": "claude-code/haiku",
        "usage_by_kind": {
            "reflect": {"prompt_tokens": 5, "completion_tokens": 1, "cost_usd": 0.01},
            "drop": {"prompt_tokens": 3, "completion_tokens": 1},
        },
    }
    found = {u.kind: (u.cost, u.currency) for u in usage_of("x", with_cost(split, PRICES, "reflect"))}
    assert found == {"reflect": (0.01, "USD"), "drop": (None, "")}
    # What a provider reports wins over the price table (as in the daily budget); the table prices the rest.
    both = {"model": "local/m", "prompt_tokens": 1_000_000, "completion_tokens": 0, "cost_usd": 9.0}
    assert with_cost(both, PRICES, "observe")["cost"] == {"currency": "USD", "by_kind": {"observe": 9.0}}
    priced = {"model": "local/m", "prompt_tokens": 1_000_000, "completion_tokens": 0}
    assert with_cost(priced, PRICES, "observe")["cost"] == {"currency": "USD", "by_kind": {"observe": 1.0}}
