"""The money blocks of the settings: ``prices`` (what tokens cost) and ``budget`` (daily caps and the
per-call prompt cap, issue 41 item 3).

Pure functions of the blocks as the YAML loader produced them (the budget also of the two settings
it is checked against); :func:`persistence.settings.parse.settings_from_mapping` calls them. Absent
budget keys take the defaults of :class:`protocol.settings.BudgetSettings`; ``null`` turns a cap off;
anything else out of range is a :class:`~protocol.errors.SettingsError` naming the key.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from protocol import settings_limits as limits
from protocol.errors import SettingsError
from protocol.settings import (
    DEFAULT_DAILY_TOKENS,
    DEFAULT_MAX_PROMPT_TOKENS,
    BudgetSettings,
    ModelPrice,
    PriceTable,
)

PROMPT_CAP_REFLECT_FACTOR: Final = 2
"""``budget.max_prompt_tokens`` must be at least this many times ``reflect_after_observation_tokens``:
the Reflector is sent the whole active pool, which has passed the threshold when it runs."""


def _budget_count(
    budget: Mapping[str, Any], key: str, default: int | None, low: int, high: int
) -> int | None:
    """A whole number from ``low`` to ``high``, ``None`` (``null``: no cap), or the default when absent."""
    if key not in budget:
        return default
    value = budget[key]
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise SettingsError(f"budget.{key} must be a whole number from {low} to {high}, or null for no cap.")
    return value


def prices_from_mapping(value: object) -> PriceTable | None:
    """The optional ``prices`` block: money per million tokens of each ``provider/model``."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise SettingsError("observational_memory.prices must be a mapping.")
    currency = value.get("currency", "USD")
    models = value.get("models", {})
    if not isinstance(currency, str) or not currency.strip() or not isinstance(models, Mapping):
        raise SettingsError("prices needs a currency name and a models mapping of provider/model to prices.")
    table: dict[str, ModelPrice] = {}
    for model, entry in models.items():
        if not isinstance(model, str) or "/" not in model or not isinstance(entry, Mapping):
            raise SettingsError(f"prices.models entry {model!r} must map provider/model to prices.")
        try:
            table[model] = ModelPrice.model_validate(dict(entry))
        except ValueError:
            raise SettingsError(
                f"prices.models[{model!r}] needs prompt and completion (and may give cached_prompt), "
                f"each a finite number from 0 to {limits.MAX_PRICE:g} per million tokens."
            ) from None
    return PriceTable(currency=currency.strip(), models=table)


def budget_from_mapping(value: object, reflect_after: int, prices: PriceTable | None) -> BudgetSettings:
    """The ``budget`` block: daily caps (tokens, US dollars) and the per-call prompt cap."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise SettingsError("observational_memory.budget must be a mapping.")
    daily_tokens = _budget_count(value, "daily_tokens", DEFAULT_DAILY_TOKENS, 1, limits.MAX_DAILY_TOKENS)
    prompt_cap = _budget_count(
        value,
        "max_prompt_tokens",
        DEFAULT_MAX_PROMPT_TOKENS,
        limits.MIN_PROMPT_CAP,
        limits.MAX_CONTEXT_WINDOW,
    )
    daily_usd = value.get("daily_usd")
    if daily_usd is not None and (
        isinstance(daily_usd, bool)
        or not isinstance(daily_usd, int | float)
        or not math.isfinite(daily_usd)
        or not 0 < daily_usd <= limits.MAX_DAILY_USD
    ):
        raise SettingsError(
            f"budget.daily_usd must be a number of US dollars > 0 and <= {limits.MAX_DAILY_USD:g}, "
            "or null for no cap."
        )
    if daily_usd is not None and prices is not None and prices.currency.upper() != "USD":
        raise SettingsError(
            f"budget.daily_usd counts US dollars, but prices.currency is {prices.currency[:16]!r}: give the "
            "prices in USD, or leave daily_usd out."
        )
    if prompt_cap is not None and prompt_cap < PROMPT_CAP_REFLECT_FACTOR * reflect_after:
        raise SettingsError(
            f"budget.max_prompt_tokens ({prompt_cap}) must be at least {PROMPT_CAP_REFLECT_FACTOR} times "
            f"reflector.reflect_after_observation_tokens ({reflect_after}): the Reflector is sent the whole "
            "active pool, which has passed that threshold when it runs. Raise the cap or lower the threshold."
        )
    return BudgetSettings(
        daily_tokens=daily_tokens,
        daily_usd=None if daily_usd is None else float(daily_usd),
        max_prompt_tokens=prompt_cap,
    )
