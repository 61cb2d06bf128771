"""Durable token usage of every model tool loop, for the cost report (``omray_token_usage``).

The write is best effort, like the activity row: a failed usage write is logged (ids and the error
class only) and never fails the job whose tokens it counts. Rows carry counts and ids, never text.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from actors.models.chat import ToolLoopResult
from protocol.records import TokenUsageRecord, UsageJobKind
from protocol.settings import PriceTable

logger = logging.getLogger("omray.usage")


@dataclass(kw_only=True)
class ModelSpend:
    """What a job's model tool loops spent, counts only: the model counters of a job's result."""

    model_rounds: int = 0
    """Model requests made."""
    prompt_tokens: int = 0
    """Input tokens reported by the model."""
    cached_prompt_tokens: int = 0
    """Input tokens the endpoint reported as served from its prompt cache."""
    completion_tokens: int = 0
    """Output tokens reported by the model."""
    model: str = ""
    """The ``provider/model`` the requests went to ('' when none was made): a label of the token metrics."""
    cost_usd: float | None = None
    """US dollars the provider reported for them (``None`` when it reported none)."""

    def add_spend(self, loop: ToolLoopResult, model: str) -> None:
        """Add what one tool loop against ``model`` spent."""
        self.model_rounds += loop.rounds
        self.model = model
        self.prompt_tokens += loop.prompt_tokens
        self.cached_prompt_tokens += loop.cached_prompt_tokens
        self.completion_tokens += loop.completion_tokens
        if loop.cost_usd is not None:
            self.cost_usd = (self.cost_usd or 0.0) + loop.cost_usd


def record_loop_usage(
    store: Any,
    loop: ToolLoopResult,
    *,
    usage_id: str,
    session_id: str,
    job_kind: UsageJobKind,
    model: str,
    recorded_at: str,
) -> None:
    """Store what ``loop`` spent through ``store.record_token_usage``; nothing when it made no request."""
    if loop.rounds == 0:
        return
    record = TokenUsageRecord(
        usage_id=usage_id,
        session_id=session_id,
        job_kind=job_kind,
        model=model,
        requests=loop.rounds,
        prompt_tokens=loop.prompt_tokens,
        cached_prompt_tokens=min(loop.cached_prompt_tokens, loop.prompt_tokens),
        completion_tokens=loop.completion_tokens,
        cost_usd=loop.cost_usd,
        recorded_at=recorded_at,
    )
    try:
        store.record_token_usage(record)
    except Exception as exc:  # cost reporting must never fail the work it reports on
        logger.warning(
            "token usage write failed",
            extra={"session_id": session_id, "job_kind": job_kind, "error_class": type(exc).__name__},
        )


def with_cost(detail: Mapping[str, Any], prices: PriceTable | None, kind: UsageJobKind) -> dict[str, Any]:
    """A job's outcome ``detail`` with what its tokens cost: what the provider reported (``cost_usd``,
    in US dollars: ``claude-code``), else what ``prices`` makes of them when it covers the model (the
    same rule as the daily budget's, :mod:`actors.models.budget`).

    Tokens are read per stage from ``usage_by_kind`` when the detail splits them (a reflect job:
    Reflector and Dropper), else from its totals, counted for ``kind``. The money goes in
    ``cost: {currency, by_kind: {kind: amount}}``, which the queue turns into the
    ``omray_model_cost_total`` metric; the detail is returned unchanged when nothing is priced.
    """
    result = dict(detail)
    by_kind = detail.get("usage_by_kind")
    parts: Mapping[str, Any] = by_kind if isinstance(by_kind, Mapping) else {kind: detail}
    reported = {
        str(part_kind): float(counts["cost_usd"])
        for part_kind, counts in parts.items()
        if isinstance(counts, Mapping)
        and isinstance(counts.get("cost_usd"), int | float)
        and not isinstance(counts.get("cost_usd"), bool)
    }
    if reported:
        result["cost"] = {"currency": "USD", "by_kind": reported}
        return result
    model = detail.get("model")
    price = prices.models.get(model) if prices is not None and isinstance(model, str) else None
    if prices is None or price is None:
        return result
    amounts: dict[str, float] = {}
    for part_kind, counts in parts.items():
        if not isinstance(counts, Mapping):
            continue
        prompt, cached, completion = (
            counts.get("prompt_tokens"),
            counts.get("cached_prompt_tokens", 0),
            counts.get("completion_tokens"),
        )
        if isinstance(prompt, int) and isinstance(cached, int) and isinstance(completion, int):
            amounts[str(part_kind)] = price.cost(prompt, min(cached, prompt), completion)
    if amounts:
        result["cost"] = {"currency": prices.currency, "by_kind": amounts}
    return result
