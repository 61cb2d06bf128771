"""Text and JSON for ``/om-status``, ``/om-view`` and the live activity line (reference §11.2, §12).

Pure: every number, record and the current time come in as arguments; nothing here reads the store.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from protocol.canonical import PHP_TRIM_CHARACTERS, condense
from protocol.errors import OmrayError
from protocol.ids import display_id
from protocol.records import ActiveReflection, ActivityRecord, ObservationRecord, TokenUsageTotal
from protocol.settings import PriceTable

ACTIVITY_FRESH_SECONDS: Final[int] = 300
"""An activity row older than this (strictly) is a crash leftover and is hidden."""


_WHITESPACE_RUN = re.compile(r"\s+")


class UnknownActivityStageError(OmrayError, ValueError):
    """An activity row names a stage that has no status text."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        super().__init__(f"unknown activity stage {stage!r}")


def format_count(value: int) -> str:
    """An integer with ``,`` thousands separators: ``1234`` -> ``1,234``."""
    return f"{value:,}"


def round_half_away(value: float) -> int:
    """Round a float to the nearest integer, halves away from zero (PHP ``round``, not banker's)."""
    magnitude = abs(value)
    whole = math.floor(magnitude)
    if magnitude - whole >= 0.5:
        whole += 1
    return int(math.copysign(whole, value)) if whole else 0


def percent_of(value: int, denominator: int) -> int:
    """``round(value / denominator * 100)`` as an int; 0 when the denominator is not positive."""
    if denominator <= 0:
        return 0
    return round_half_away(value / denominator * 100)


# --------------------------------------------------------------------------------------------- status


@dataclass(frozen=True, slots=True)
class StatusInputs:
    """Every number ``/om-status`` shows, already read from durable memory for one session."""

    recorded_observations: int
    """All observations of the session (including dropped ones)."""
    active_observations: int
    """Observations in the active candidate pool."""
    visible_observations: int
    """Retained observation ids of the active generation (0 before the first generation)."""
    recorded_reflections: int
    """All reflections of the session."""
    visible_reflections: int
    """Reflections linked to the active generation."""
    reflection_tokens: int
    """Sum of the stored ``token_count`` of the active reflections."""
    coverage_end: int | None
    """Last event of the contiguous covered range 1..N, or ``None`` when nothing is covered."""
    active_tokens: int
    """Token estimate of the active candidate pool (sum of ``est(content)``)."""
    reflect_after_tokens: int
    """Threshold above which a reflection generation is dispatched."""
    observations_max_tokens: int
    """Pool size above which the Dropper runs."""

    @property
    def dropped_observations(self) -> int:
        """Recorded observations no longer in the active pool (never negative)."""
        return max(0, self.recorded_observations - self.active_observations)

    @property
    def has_coverage(self) -> bool:
        """Whether any event is covered yet."""
        return self.coverage_end is not None and self.coverage_end >= 1


def _coverage_phrase(inputs: StatusInputs) -> str:
    if inputs.coverage_end is None or inputs.coverage_end < 1:
        return "no events covered yet"
    return f"through event {format_count(inputs.coverage_end)}"


def format_status(inputs: StatusInputs) -> str:
    """The ``/om-status`` markdown text (lines joined with ``"\\n"``)."""
    n = format_count
    reflect_pct = percent_of(inputs.active_tokens, inputs.reflect_after_tokens)
    pool_pct = percent_of(inputs.active_tokens, inputs.observations_max_tokens)
    lines = [
        "## Observational memory",
        "",
        "### Memory",
        f"- **Observations:** {n(inputs.recorded_observations)} recorded / "
        f"{n(inputs.dropped_observations)} dropped / {n(inputs.active_observations)} active / "
        f"{n(inputs.visible_observations)} visible",
        f"- **Reflections:** {n(inputs.recorded_reflections)} recorded / "
        f"{n(inputs.visible_reflections)} visible (~{n(inputs.reflection_tokens)} tokens)",
        f"- **Coverage:** {_coverage_phrase(inputs)}",
        "",
        "### Activity",
        f"- **Next reflection:** ~{n(inputs.active_tokens)} / {n(inputs.reflect_after_tokens)} tokens "
        f"({reflect_pct}%)",
        f"- **Active observation pool:** ~{n(inputs.active_tokens)} / "
        f"{n(inputs.observations_max_tokens)} max tokens ({pool_pct}%)",
        "- **Pipeline:** Observer → delta Reflector → bounded Dropper (async durable FIFO)",
        "- **Compaction:** answered at once from durable memory (never waits for a model)",
        "",
        "> Shows durable memory only; whether workers or the queue are alive is not checked here.",
    ]
    return "\n".join(lines)


def status_json(inputs: StatusInputs) -> dict[str, object]:
    """The same numbers as :func:`format_status`, as a JSON-able dict with named keys."""
    return {
        "recorded_observations": inputs.recorded_observations,
        "dropped_observations": inputs.dropped_observations,
        "active_observations": inputs.active_observations,
        "visible_observations": inputs.visible_observations,
        "recorded_reflections": inputs.recorded_reflections,
        "visible_reflections": inputs.visible_reflections,
        "reflection_tokens": inputs.reflection_tokens,
        "coverage_end": inputs.coverage_end if inputs.has_coverage else None,
        "active_tokens": inputs.active_tokens,
        "reflect_after_tokens": inputs.reflect_after_tokens,
        "next_reflection_percent": percent_of(inputs.active_tokens, inputs.reflect_after_tokens),
        "observations_max_tokens": inputs.observations_max_tokens,
        "active_pool_percent": percent_of(inputs.active_tokens, inputs.observations_max_tokens),
    }


# ----------------------------------------------------------------------------------------------- view


def _ordered_reflections(reflections: Sequence[ActiveReflection]) -> list[ActiveReflection]:
    return sorted(reflections, key=lambda item: (item.position, item.reflection_id))


def _ordered_observations(observations: Sequence[ObservationRecord]) -> list[ObservationRecord]:
    # Source order, as the projection: by first source seq; ties keep the order given (recorded).
    return sorted(observations, key=lambda item: item.first_source_seq)


def known_support_ids(supporting_ids: Iterable[str], known_observation_ids: Collection[str]) -> list[str]:
    """Supporting ids deduplicated (first occurrence wins) and kept only if the observation exists."""
    kept: list[str] = []
    seen: set[str] = set()
    for observation_id in supporting_ids:
        if observation_id in seen or observation_id not in known_observation_ids:
            continue
        seen.add(observation_id)
        kept.append(observation_id)
    return kept


def session_source_seqs(observation: ObservationRecord, session_id: str) -> list[int]:
    """Sequence numbers of the observation's source events that belong to ``session_id``."""
    return [ref.seq for ref in observation.source_refs if ref.run_id == session_id]


def _supports_line(support_ids: Sequence[str]) -> str:
    if not support_ids:
        return "> Supports observations *(none)*"
    return "> Supports observations " + ", ".join(f"`[{display_id(item)}]`" for item in support_ids)


def _sources_line(seqs: Sequence[int]) -> str:
    if not seqs:
        return "> Sources: *(none)*"
    noun = "event" if len(seqs) == 1 else "events"
    return f"> Sources: {noun} " + ", ".join(f"`{seq}`" for seq in seqs)


def format_view(
    reflections: Sequence[ActiveReflection],
    observations: Sequence[ObservationRecord],
    session_id: str,
    known_observation_ids: Collection[str],
) -> str:
    """The ``/om-view`` markdown text, right-trimmed.

    ``reflections`` are the active reflections, ``observations`` the active candidate pool, and
    ``known_observation_ids`` every observation id of the session (support ids outside it are hidden).
    """
    lines: list[str] = ["## Reflections", ""]
    ordered_reflections = _ordered_reflections(reflections)
    for reflection in ordered_reflections:
        support = known_support_ids(reflection.supporting_observation_ids, known_observation_ids)
        lines.append(f"`[{display_id(reflection.reflection_id)}]` {condense(reflection.content)}")
        lines.append(_supports_line(support))
        lines.append("")
    if not ordered_reflections:
        lines.append("*No reflections yet.*")
    lines.extend(("## Observations", ""))
    ordered_observations = _ordered_observations(observations)
    for observation in ordered_observations:
        lines.append(
            f"`[{display_id(observation.observation_id)}]` {observation.timestamp} "
            f"**[{observation.relevance}]** {condense(observation.content)}"
        )
        lines.append(_sources_line(session_source_seqs(observation, session_id)))
        lines.append("")
    if not ordered_observations:
        lines.append("*No observations yet.*")
    return "\n".join(lines).rstrip(PHP_TRIM_CHARACTERS)


def view_json(
    reflections: Sequence[ActiveReflection],
    observations: Sequence[ObservationRecord],
    session_id: str,
    known_observation_ids: Collection[str],
) -> dict[str, object]:
    """The content of :func:`format_view` as a JSON-able dict (full ids plus display ids)."""
    return {
        "session_id": session_id,
        "reflections": [
            {
                "id": reflection.reflection_id,
                "display_id": display_id(reflection.reflection_id),
                "content": condense(reflection.content),
                "supporting_observation_ids": known_support_ids(
                    reflection.supporting_observation_ids, known_observation_ids
                ),
            }
            for reflection in _ordered_reflections(reflections)
        ],
        "observations": [
            {
                "id": observation.observation_id,
                "display_id": display_id(observation.observation_id),
                "timestamp": observation.timestamp,
                "importance": observation.relevance,
                "content": condense(observation.content),
                "source_seqs": session_source_seqs(observation, session_id),
            }
            for observation in _ordered_observations(observations)
        ],
    }


# ------------------------------------------------------------------------------------------- activity


def format_activity(stage: str, current_tokens: int, target_tokens: int | None) -> str:
    """The one-line live status for a running stage; raises :class:`UnknownActivityStageError`."""
    tokens = format_count(current_tokens)
    if stage == "observer":
        return f"Observational memory: observer running on ~{tokens}-token chunk"
    if stage == "reflector":
        return f"Observational memory: reflector running (~{tokens} tokens)"
    if stage == "dropper":
        target = target_tokens if target_tokens is not None and target_tokens > 0 else 0
        pct = round_half_away(100 * current_tokens / target) if target else 0
        return (
            f"Observational memory: dropper running — active pool ~{tokens} / "
            f"{format_count(target)} max tokens ({pct}%)"
        )
    raise UnknownActivityStageError(stage)


def _epoch_seconds(moment: datetime) -> int:
    # Whole seconds, like a Unix timestamp: naive times are taken as UTC (the writer stores UTC).
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return math.floor(aware.timestamp())


def fresh_activity(record: ActivityRecord, now: datetime) -> bool:
    """Whether an activity row should be shown: parseable and at most 300 s old (300 s is fresh)."""
    try:
        updated_at = datetime.fromisoformat(record.updated_at)
    except ValueError:
        return False
    return _epoch_seconds(now) - _epoch_seconds(updated_at) <= ACTIVITY_FRESH_SECONDS


# --- cost report ---------------------------------------------------------------------------------

_USAGE_COUNTS: Final = ("requests", "prompt_tokens", "cached_prompt_tokens", "completion_tokens")


def usage_json(totals: Sequence[TokenUsageTotal], prices: PriceTable | None) -> dict[str, object]:
    """The cost report: token usage per job kind and model, a total, and money when a price table is set.

    Models missing from the price table are listed under ``unpriced_models`` and left out of the
    amounts (never guessed).
    """
    rows: list[dict[str, object]] = []
    total = dict.fromkeys(_USAGE_COUNTS, 0)
    money = 0.0
    reported: float | None = None
    unpriced: set[str] = set()
    for usage in totals:
        counts = {name: int(getattr(usage, name)) for name in _USAGE_COUNTS}
        row: dict[str, object] = {"job_kind": usage.job_kind, "model": usage.model, **counts}
        if usage.cost_usd is not None:  # what the provider itself reported (claude-code)
            row["reported_usd"] = round(usage.cost_usd, 6)
            reported = (reported or 0.0) + usage.cost_usd
        price = prices.models.get(usage.model) if prices is not None else None
        if price is not None:
            row["cost"] = round(
                price.cost(usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens), 6
            )
            money += float(row["cost"])  # type: ignore[arg-type]
        elif prices is not None:
            unpriced.add(usage.model)
        rows.append(row)
        for name in _USAGE_COUNTS:
            total[name] += counts[name]
    report: dict[str, object] = {"by_job_kind_and_model": rows, "total": total}
    if reported is not None:
        report["reported_usd"] = round(reported, 6)
    if prices is not None:
        report["cost"] = {
            "currency": prices.currency,
            "total": round(money, 6),
            "unpriced_models": sorted(unpriced),
        }
    return report


def format_usage(report: dict[str, object]) -> str:
    """One status line of a cost report: requests and tokens, and money when priced."""
    total = report["total"]
    assert isinstance(total, dict)
    line = (
        f"{format_count(total['requests'])} model requests, {format_count(total['prompt_tokens'])} prompt "
        f"({format_count(total['cached_prompt_tokens'])} cached), "
        f"{format_count(total['completion_tokens'])} completion tokens"
    )
    cost = report.get("cost")
    if isinstance(cost, dict):
        line += f", {cost['total']:.4f} {cost['currency']}"
    reported = report.get("reported_usd")
    if isinstance(reported, int | float):
        line += f", {reported:.4f} USD as the provider reported"
    return line
