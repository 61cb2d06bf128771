"""The daily model budget of a project (issue 41 item 3): what was spent today, and whether a call may go.

Pure: the day's usage rows (``persistence.reads.memory_reader.MemoryReader.spend_since``), the
settings and the time come in; a verdict comes out. A project is one memory database: its
``omray_token_usage`` rows since 00:00 UTC are the day's spend, over every session and stage. The
built-in model costs nothing and is neither counted nor capped.

A call is sent only while the day's spend is under every cap; a call that starts under a cap may pass
it by its own size (at most ``budget.max_prompt_tokens`` plus its answer, per run in flight). At the
cap the job raises :class:`~protocol.errors.BudgetReachedError` before sending anything, and the
queue holds it (``protocol.outcomes.JobHeld``) until the next UTC day or until the cap is raised.

Money counts what a provider reported (``claude-code``'s ``total_cost_usd``), else what the
settings' ``prices`` (in US dollars) make of the tokens; a model with neither is listed as
unpriced and adds nothing to the money (never guessed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from protocol.errors import BudgetReachedError
from protocol.jobs import settings_fingerprint
from protocol.outcomes import REASON_BUDGET_TOKENS, REASON_BUDGET_USD
from protocol.records import ModelDaySpend, TokenUsageDay
from protocol.settings import BUILTIN_PROVIDER, BudgetSettings, OmSettings, PriceTable

SpendReader = Callable[[str], Sequence[ModelDaySpend]]
"""``since`` (UTC ISO-8601) -> what each model spent since then (``MemoryReader.spend_since``)."""


def utc_day(now: float) -> tuple[str, str, float]:
    """The UTC day of epoch ``now``: ``(YYYY-MM-DD, its start as the usage rows write times, the epoch
    of the next UTC midnight)``."""
    start = datetime.fromtimestamp(now, tz=UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start.date().isoformat(), start.isoformat(), (start + timedelta(days=1)).timestamp()


def is_metered(model: str) -> bool:
    """False for the built-in model (in-process, free): it is neither counted nor capped."""
    return model.partition("/")[0] != BUILTIN_PROVIDER


@dataclass(frozen=True, slots=True)
class DaySpend:
    """What a project's metered models spent in one UTC day."""

    tokens: int
    """Prompt plus completion tokens."""
    usd: float
    """US dollars: reported by the providers, or priced by the settings' ``prices`` in USD."""
    requests: int
    """Model requests."""
    unpriced_models: tuple[str, ...]
    """Models with requests whose cost is neither reported nor priced (not in ``usd``)."""


def _usd_prices(prices: PriceTable | None) -> PriceTable | None:
    return prices if prices is not None and prices.currency.upper() == "USD" else None


def day_spend(rows: Sequence[ModelDaySpend], prices: PriceTable | None) -> DaySpend:
    """Sum a day's per-model rows into the budget's figures (the built-in model left out)."""
    usd_prices = _usd_prices(prices)
    tokens = requests = 0
    usd = 0.0
    unpriced: set[str] = set()
    for row in rows:
        if not is_metered(row.model):
            continue
        tokens += row.prompt_tokens + row.completion_tokens
        requests += row.requests
        usd += row.reported_usd
        if row.unreported_requests == 0:
            continue
        price = usd_prices.models.get(row.model) if usd_prices is not None else None
        if price is None:
            unpriced.add(row.model)
            continue
        cached = min(row.unreported_cached_prompt_tokens, row.unreported_prompt_tokens)
        usd += price.cost(row.unreported_prompt_tokens, cached, row.unreported_completion_tokens)
    return DaySpend(tokens=tokens, usd=usd, requests=requests, unpriced_models=tuple(sorted(unpriced)))


def budget_hold(spend: DaySpend, budget: BudgetSettings, now: float) -> BudgetReachedError | None:
    """The error a model call must raise instead of being sent, or ``None`` when it may go: a cap is
    reached once the day's spend is at or over it. The tokens cap is checked first."""
    until = utc_day(now)[2]
    if budget.daily_tokens is not None and spend.tokens >= budget.daily_tokens:
        cap = float(budget.daily_tokens)
        return BudgetReachedError(REASON_BUDGET_TOKENS, until, float(spend.tokens), cap)
    if budget.daily_usd is not None and spend.usd >= budget.daily_usd:
        return BudgetReachedError(REASON_BUDGET_USD, until, round(spend.usd, 6), budget.daily_usd)
    return None


class BudgetGate:
    """Checks the project's daily budget before each model call of a job.

    ``spend_since`` reads the day's usage (one indexed range read per check, so calls made by other
    jobs of the project since count too); ``clock`` is epoch seconds now.
    """

    def __init__(self, settings: OmSettings, spend_since: SpendReader, clock: Callable[[], float]) -> None:
        self._budget = settings.budget
        self._prices = settings.prices
        self._spend_since = spend_since
        self._clock = clock

    def check(self, model: str) -> None:
        """Raise :class:`BudgetReachedError` when a call of ``model`` may not be sent now."""
        if not self._budget.capped or not is_metered(model):
            return
        now = self._clock()
        spend = day_spend(self._spend_since(utc_day(now)[1]), self._prices)
        held = budget_hold(spend, self._budget, now)
        if held is not None:
            raise held

    def reached(self, model: str) -> bool:
        """True when a call of ``model`` may not be sent now (what :meth:`check` would raise for)."""
        try:
            self.check(model)
        except BudgetReachedError:
            return True
        return False


@contextmanager
def held_under(block: Mapping[str, object]) -> Iterator[None]:
    """Mark a :class:`BudgetReachedError` raised inside with the fingerprint of the settings ``block``
    the job read (a job accepted under other settings then re-checks the hold at once)."""
    try:
        yield
    except BudgetReachedError as reached:
        reached.settings_fingerprint = settings_fingerprint(block)
        raise


REPORT_DAYS = 7
"""UTC days the spend-by-day reports go back (today included)."""


def report_since(now: float, days: int = REPORT_DAYS) -> str:
    """The first UTC day (``YYYY-MM-DD``) of a report of the last ``days`` days up to ``now``'s."""
    return utc_day(now - (days - 1) * 86_400.0)[0]


@dataclass(slots=True)
class _DayRow:
    tokens: int = 0
    requests: int = 0
    usd: float | None = None


def usage_by_day_json(rows: Sequence[TokenUsageDay], prices: PriceTable | None) -> list[dict[str, object]]:
    """Spend per UTC day, session and model (job kinds summed), newest day first: tokens, requests,
    and US dollars as reported by the provider or priced in USD (``None``: neither)."""
    usd_prices = _usd_prices(prices)
    found: dict[tuple[str, str, str], _DayRow] = {}
    for row in rows:
        entry = found.setdefault((row.day, row.session_id or "", row.model), _DayRow())
        entry.requests += row.requests
        entry.tokens += row.prompt_tokens + row.completion_tokens
        usd = row.cost_usd
        price = usd_prices.models.get(row.model) if usd_prices is not None else None
        if usd is None and price is not None:
            cached = min(row.cached_prompt_tokens, row.prompt_tokens)
            usd = price.cost(row.prompt_tokens, cached, row.completion_tokens)
        if usd is not None:
            entry.usd = (entry.usd or 0.0) + usd
    ordered = sorted(found.items(), key=lambda item: (item[0][1], item[0][2]))
    ordered.sort(key=lambda item: item[0][0], reverse=True)  # newest day first, sessions in order
    return [
        {
            "day": day,
            "session_id": session,
            "model": model,
            "requests": entry.requests,
            "tokens": entry.tokens,
            "usd": None if entry.usd is None else round(entry.usd, 6),
        }
        for (day, session, model), entry in ordered
    ]


def project_budget(spend_since: SpendReader, settings: OmSettings, now: float) -> dict[str, object]:
    """Today's :func:`budget_report` of a project, read with ``spend_since`` (one indexed read)."""
    return budget_report(day_spend(spend_since(utc_day(now)[1]), settings.prices), settings.budget, now)


def budget_report(spend: DaySpend, budget: BudgetSettings, now: float) -> dict[str, object]:
    """Today's spend against the caps, for ``omray status``, ``omray watch`` and the viewer (counts only)."""
    day, _, resets = utc_day(now)
    held = budget_hold(spend, budget, now)
    return {
        "day": day,
        "tokens": spend.tokens,
        "daily_tokens": budget.daily_tokens,
        "usd": round(spend.usd, 6),
        "daily_usd": budget.daily_usd,
        "requests": spend.requests,
        "unpriced_models": list(spend.unpriced_models),
        "max_prompt_tokens": budget.max_prompt_tokens,
        "reached": None if held is None else held.reason,
        "resets_at": datetime.fromtimestamp(resets, tz=UTC).isoformat(),
    }


def format_budget(report: dict[str, object]) -> str:
    """One status line of a budget report."""
    parts = []
    tokens_cap = report.get("daily_tokens")
    tokens = f"{report['tokens']:,} tokens"
    parts.append(f"{tokens} of {tokens_cap:,}" if isinstance(tokens_cap, int) else f"{tokens} (no cap)")
    usd_cap = report.get("daily_usd")
    usd = f"{float(report['usd']):.4f} USD"  # type: ignore[arg-type]
    parts.append(f"{usd} of {float(usd_cap):.2f}" if isinstance(usd_cap, int | float) else f"{usd} (no cap)")
    line = f"{report['day']} (UTC): " + ", ".join(parts)
    unpriced = report.get("unpriced_models")
    if isinstance(unpriced, list) and unpriced and usd_cap is not None:
        line += f"; not in the money: {', '.join(str(m) for m in unpriced)}"
    if report.get("reached"):
        resets = str(report["resets_at"])[:16].replace("T", " ")
        line += f"; REACHED ({report['reached']}): observing is paused until {resets} UTC"
    return line
