"""The ``budget`` settings block: defaults, ``null`` to turn a cap off, and a typed error per bad value."""

from __future__ import annotations

import math
from typing import Any

import pytest

from persistence.settings.parse import apply_overrides, settings_from_mapping
from protocol.errors import SettingsError
from protocol.settings import DEFAULT_DAILY_TOKENS, DEFAULT_MAX_PROMPT_TOKENS, BudgetSettings


def test_the_defaults_cap_tokens_per_day_and_per_call_but_not_money() -> None:
    budget = settings_from_mapping(None).budget
    assert budget == BudgetSettings()
    assert (budget.daily_tokens, budget.daily_usd, budget.max_prompt_tokens) == (
        DEFAULT_DAILY_TOKENS,
        None,
        DEFAULT_MAX_PROMPT_TOKENS,
    )
    assert budget.capped
    assert settings_from_mapping({"budget": None}).budget == budget  # an empty block: the defaults


def test_values_and_null_turning_a_cap_off() -> None:
    budget = settings_from_mapping(
        {"budget": {"daily_tokens": None, "daily_usd": 2, "max_prompt_tokens": None}}
    ).budget
    assert (budget.daily_tokens, budget.daily_usd, budget.max_prompt_tokens) == (None, 2.0, None)
    assert budget.capped
    assert not settings_from_mapping({"budget": {"daily_tokens": None}}).budget.capped


def test_overrides_set_the_budget_from_the_command_line() -> None:
    block = apply_overrides({}, ["budget.daily_tokens=5000", "budget.daily_usd=null"])
    assert settings_from_mapping(block).budget.daily_tokens == 5000


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ([], "observational_memory.budget must be a mapping."),
        ({"daily_tokens": 0}, "budget.daily_tokens must be a whole number from 1 to"),
        ({"daily_tokens": "2M"}, "budget.daily_tokens must be a whole number from 1 to"),
        ({"daily_tokens": 1.5}, "budget.daily_tokens must be a whole number from 1 to"),
        ({"daily_tokens": True}, "budget.daily_tokens must be a whole number from 1 to"),
        ({"daily_tokens": 10**13}, "budget.daily_tokens must be a whole number from 1 to"),
        ({"daily_usd": 0}, "budget.daily_usd must be a number of US dollars > 0"),
        ({"daily_usd": -1}, "budget.daily_usd must be a number of US dollars > 0"),
        ({"daily_usd": math.inf}, "budget.daily_usd must be a number of US dollars > 0"),
        ({"daily_usd": math.nan}, "budget.daily_usd must be a number of US dollars > 0"),
        ({"daily_usd": "5"}, "budget.daily_usd must be a number of US dollars > 0"),
        ({"max_prompt_tokens": 1000}, "budget.max_prompt_tokens must be a whole number from 4096 to"),
        ({"max_prompt_tokens": 50_000}, "budget.max_prompt_tokens (50000) must be at least 2 times"),
        ({"daily_tokenz": 5}, "observational_memory.budget.daily_tokenz is not a setting; did you mean"),
    ],
)
def test_a_bad_value_is_a_typed_error_naming_the_key(budget: Any, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping({"budget": budget})
    assert str(info.value).startswith(message)


def test_the_prompt_cap_leaves_the_reflector_room_for_its_pool() -> None:
    ok = {"budget": {"max_prompt_tokens": 8192}, "reflector": {"reflect_after_observation_tokens": 4096}}
    assert settings_from_mapping(ok).budget.max_prompt_tokens == 8192
    too_small = {**ok, "reflector": {"reflect_after_observation_tokens": 4097}}
    with pytest.raises(SettingsError, match="lower the threshold"):
        settings_from_mapping(too_small)


def test_a_money_cap_needs_prices_in_us_dollars() -> None:
    prices = {"currency": "EUR", "models": {"local/m": {"prompt": 1, "completion": 2}}}
    with pytest.raises(SettingsError, match=r"budget\.daily_usd counts US dollars"):
        settings_from_mapping({"budget": {"daily_usd": 1}, "prices": prices})
    assert settings_from_mapping({"prices": prices}).budget.daily_usd is None
    usd = {**prices, "currency": "usd"}
    assert settings_from_mapping({"budget": {"daily_usd": 1}, "prices": usd}).budget.daily_usd == 1.0
