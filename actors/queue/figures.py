"""The numbers ``omray status``, ``omray watch`` and the metrics all show, computed in one place.

The queue reports :class:`QueueFigures` and one :class:`PoolFigures` per pool both in its
``status()`` answer (read by ``omray status`` and ``omray watch``) and to its metrics port (the
``omray_queue_*`` and ``omray_pool_*`` gauges the Grafana dashboard charts), from the same values,
so the terminal and the dashboard never disagree about a number they both show. Token counts of a
finished job are read from its outcome's detail by :func:`usage_of`, which trusts nothing in it.

Pure: no clock, no I/O; ids, kinds and counts only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Final

from actors.queue.state import QueueState
from protocol.jobs import OBSERVE_BOUNDARY_HANDLER, REFLECT_GENERATION_HANDLER

UNLIMITED: Final = 10**9
"""Stands for "no limit" when a pool reports no capacity."""


@dataclass(frozen=True, slots=True)
class Figures:
    """Counts at one moment, all of them whole numbers."""

    def as_dict(self) -> dict[str, int]:
        """JSON-able copy."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class QueueFigures(Figures):
    """The queue's load at one moment."""

    depth: int
    """Jobs accepted and not running: waiting for their lane, a slot or a retry."""
    in_flight: int
    """Runs in flight (a run that covers several coalesced jobs counts once)."""
    slots: int
    """Runs the queue may have in flight now: its limit, or the pools' slots if fewer."""
    lanes: int
    """Lanes (one session of one database, or one database's index work) with unfinished jobs."""
    busy_lanes: int
    """Lanes with a run in flight."""
    held_projects: int = 0
    """Projects (memory databases) whose model jobs are held: their daily model budget is used up."""


def queue_figures(
    *,
    depth: int,
    in_flight: int,
    max_in_flight: int,
    capacity: Mapping[str, int],
    lanes: int,
    busy_lanes: int,
    held_projects: int = 0,
) -> QueueFigures:
    """:class:`QueueFigures` from the state machine's counts (``capacity``: slots per handler id)."""
    slots = min(max_in_flight, sum(capacity.values())) if capacity else max_in_flight
    return QueueFigures(
        depth=depth,
        in_flight=in_flight,
        slots=slots,
        lanes=lanes,
        busy_lanes=busy_lanes,
        held_projects=held_projects,
    )


def state_figures(state: QueueState) -> QueueFigures:
    """The figures of a queue's state machine now."""
    lanes, busy_lanes = state.lane_counts()
    return queue_figures(
        depth=state.depth,
        in_flight=state.in_flight,
        max_in_flight=state.max_in_flight,
        capacity=state.capacity,
        lanes=lanes,
        busy_lanes=busy_lanes,
        held_projects=state.held_projects,
    )


def figures_from_status(status: Mapping[str, Any]) -> QueueFigures | None:
    """The figures of a queue's ``status()`` answer; ``None`` when it carries none (an older queue)."""
    figures = status.get("figures")
    if not isinstance(figures, Mapping):
        return None
    try:
        # ``held_projects`` is newer than the others: a queue that does not report it holds nothing.
        values = {"held_projects": 0, **figures}
        return QueueFigures(**{name: int(values[name]) for name in QueueFigures.__slots__})
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(frozen=True, slots=True)
class PoolFigures(Figures):
    """One worker pool at one moment."""

    workers: int
    """Members of the pool."""
    busy_workers: int
    """Members with an attempt in flight."""
    minimum: int
    """Fewest members the autoscaler keeps."""
    maximum: int
    """Most members the autoscaler grows to."""
    slots: int
    """Attempts one member runs at once."""
    waiting: int
    """Runs that could start now but wait for a free slot of this pool."""


USAGE_KIND_OF_HANDLER: Final[Mapping[str, str]] = {
    OBSERVE_BOUNDARY_HANDLER: "observe",
    REFLECT_GENERATION_HANDLER: "reflect",
}
"""Model stage of a handler's tokens when its detail does not split them by stage."""

DIRECTIONS: Final = ("prompt", "cached_prompt", "completion")
"""Token directions (``cached_prompt`` is part of ``prompt``)."""


@dataclass(frozen=True, slots=True)
class ModelUsage:
    """Tokens (and money, when priced) one model stage of a finished job spent."""

    kind: str
    """``observe``, ``reflect`` or ``drop``."""
    model: str
    """``provider/model`` from the settings (``unknown`` when the detail names none)."""
    tokens: Mapping[str, int]
    """Counts by direction (:data:`DIRECTIONS`)."""
    cost: float | None = None
    """Money for these tokens in ``currency``; ``None`` when no price covers the model."""
    currency: str = ""
    """Currency label of the price table."""


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _counts(source: Mapping[str, Any]) -> dict[str, int] | None:
    prompt, completion = _count(source.get("prompt_tokens")), _count(source.get("completion_tokens"))
    if prompt is None or completion is None:
        return None
    cached = _count(source.get("cached_prompt_tokens", 0)) or 0
    return {"prompt": prompt, "cached_prompt": min(cached, prompt), "completion": completion}


def _label(value: object, allowed: frozenset[str] | None = None, fallback: str = "unknown") -> str:
    if not isinstance(value, str) or not value or len(value) > 200:
        return fallback
    return value if allowed is None or value in allowed else fallback


USAGE_KINDS: Final = frozenset({"observe", "reflect", "drop"})
"""Model stages (``protocol.records.UsageJobKind``)."""


def usage_of(handler_id: str, detail: Mapping[str, Any]) -> list[ModelUsage]:
    """The model usage a job's outcome detail reports, by stage.

    A detail may split its tokens by stage (``usage_by_kind: {kind: {prompt_tokens, ...}}``, the
    reflect job: Reflector and Dropper) or give one total (``prompt_tokens``, ...), counted for the
    handler's own stage. ``cost: {currency, by_kind: {kind: amount}}`` adds money. Anything
    malformed is left out; kinds outside :data:`USAGE_KINDS` become ``unknown`` (bounded labels).
    """
    model = _label(detail.get("model"))
    by_kind = detail.get("usage_by_kind")
    parts: dict[str, dict[str, int]] = {}
    if isinstance(by_kind, Mapping):
        for kind, counts in by_kind.items():
            parsed = _counts(counts) if isinstance(counts, Mapping) else None
            if parsed is not None:
                parts[_label(kind, USAGE_KINDS)] = parsed
    else:
        total = _counts(detail)
        if total is not None:
            parts[USAGE_KIND_OF_HANDLER.get(handler_id, "unknown")] = total
    cost = detail.get("cost")
    currency, amounts = "", {}
    if isinstance(cost, Mapping) and isinstance(cost.get("by_kind"), Mapping):
        currency = _label(cost.get("currency"), fallback="")
        for kind, amount in cost["by_kind"].items():
            if (
                isinstance(amount, int | float)
                and not isinstance(amount, bool)
                and 0 <= amount < float("inf")
            ):
                amounts[_label(kind, USAGE_KINDS)] = float(amount)
    return [
        ModelUsage(
            kind=kind,
            model=model,
            tokens=counts,
            cost=amounts.get(kind) if currency else None,
            currency=currency if kind in amounts else "",
        )
        for kind, counts in parts.items()
    ]
