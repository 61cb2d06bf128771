"""Pure decisions of the Dropper (reference §9.4 steps 6–7, §9.7, §11.1).

The model only *proposes* observation ids through ``drop_observations``; the server decides:
:func:`max_drop_count` sizes a hard cap from the pool, and :func:`select_drop_candidates` ranks
the proposals (best-covered, least relevant, oldest first) and keeps at most that many. Nothing
here deletes anything: the chosen ids are simply left out of the next generation's retained set.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Final, Literal, Protocol

from actors.reflector.core import RequestLocalIdMap, coverage_tier, observation_lines, support_counts
from protocol.memory_views import ReflectionView
from protocol.records import ActivityRecord, ObservationRecord, relevance_rank
from protocol.settings import AGENT_HTTP_MAX_DURATION_SECONDS, DEFAULT_AGENT_MAX_TOOL_CALLS
from protocol.tools import DropReceipt, InvalidArgumentsReceipt, drop_ids, drop_receipt

DROPPER_MAX_TOOL_CALLS: Final = DEFAULT_AGENT_MAX_TOOL_CALLS
"""Tool-call budget of one Dropper agent call (16)."""
DROPPER_MAX_DURATION_SECONDS: Final = AGENT_HTTP_MAX_DURATION_SECONDS
"""Wall-clock budget of one Dropper agent call (300 s)."""
DROPPER_THINKING_LEVEL: Final[Literal["off"]] = "off"
"""The Dropper runs with thinking off."""

_COVERAGE_RANK: Final = {"strong": 0, "partial": 1, "none": 2}
_TIMESTAMP_RE = re.compile(r"^([0-9]{4})-([0-9]{2})-([0-9]{2})[ T]([0-9]{2}):([0-9]{2})\Z")


class ReflectionLike(ReflectionView, Protocol):
    """What the Dropper needs of a reflection (an active one or one accepted in this run)."""

    @property
    def supporting_observation_ids(self) -> tuple[str, ...]:
        """Canonical ids of the observations it condenses."""


# --- gates and cap ------------------------------------------------------------------------------


def should_run_dropper(new_reflection_count: int, pool_tokens: int, observations_max_tokens: int) -> bool:
    """Run only after at least one new reflection and with the pool strictly over the target."""
    return new_reflection_count >= 1 and pool_tokens > observations_max_tokens


def pool_token_count(observations: Iterable[ObservationRecord], count_tokens: Callable[[str], int]) -> int:
    """Tokens of the active pool: the sum over the observations' content."""
    return sum(count_tokens(o.content) for o in observations)


def max_drop_count(active_count: int, pool_tokens: int, target_tokens: int) -> int:
    """Hard cap on drops: enough average-sized observations to reach the target, at least 1.

    0 when there is nothing to drop or the pool is not over the target (then the Dropper is
    skipped without a model call). ``(4, 550, 300)`` -> 2.
    """
    if active_count <= 0 or pool_tokens <= 0 or target_tokens < 0 or pool_tokens - target_tokens <= 0:
        return 0
    average = pool_tokens / active_count
    estimated = math.ceil((pool_tokens - target_tokens) / average)
    return min(active_count, max(1, estimated))


def dropper_activity(
    session_id: str, job_id: str, pool_tokens: int, target_tokens: int, now: str
) -> ActivityRecord:
    """Live activity row written when the Dropper starts (§11.1)."""
    return ActivityRecord(
        session_id=session_id,
        job_id=job_id,
        stage="dropper",
        current_tokens=pool_tokens,
        target_tokens=target_tokens,
        updated_at=now,
    )


# --- prompt input -------------------------------------------------------------------------------


def _php_round(value: float) -> int:
    # PHP round() is half away from zero; Python's round() is half to even.
    return math.floor(abs(value) + 0.5) * (1 if value >= 0 else -1)


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}" if count == 1 else f"{count:,} {word}s"


def build_dropper_input(
    reflections: Sequence[ReflectionLike],
    observations: Sequence[ObservationRecord],
    id_map: RequestLocalIdMap,
    pool_tokens: int,
    target_tokens: int,
    max_drops: int,
) -> str:
    """The Dropper user message; ``reflections`` are prior then new, in that order."""
    counts = support_counts(r.supporting_observation_ids for r in reflections)
    percent = _php_round(pool_tokens / target_tokens * 100) if target_tokens > 0 else 0
    over = max(0, pool_tokens - target_tokens)
    lines = ["CURRENT REFLECTIONS:"]
    lines += [f"[{r.reflection_id}] {r.content}" for r in reflections] or ["(none yet)"]
    lines += ["", "CURRENT OBSERVATIONS:"]
    lines += observation_lines(observations, id_map, counts) or ["(none yet)"]
    lines += [
        "",
        f"Active observation pool: ~{pool_tokens:,} tokens; target: ~{target_tokens:,} tokens; "
        f"fullness against target: ~{percent:,}%; over target by ~{over:,} tokens.",
        f"Maximum drops allowed this run: {_plural(max_drops, 'observation')}. This maximum is sized to move "
        "the active pool toward the target if every proposed drop is clearly safe.",
        "This maximum is a hard upper bound, not a target. Drop fewer or none if fewer observations are "
        "clearly safe.",
    ]
    return "\n".join(lines)


# --- tool handler -------------------------------------------------------------------------------


class DropObservationsHandler:
    """Handles the ``drop_observations`` calls of one Dropper run.

    Each call maps request-local ids to canonical ids and queues new ones in first-proposal order;
    unknown or blank ids are counted as missing. ``reason`` is accepted and discarded. The tool
    never deletes anything: :func:`select_drop_candidates` makes the final choice.
    """

    max_tool_calls: Final = DROPPER_MAX_TOOL_CALLS
    """Tool-call budget of the run (16)."""

    def __init__(self, id_map: RequestLocalIdMap, max_drops: int) -> None:
        self._id_map = id_map
        self._max_drops = max_drops
        self._proposals: dict[str, None] = {}

    @property
    def proposals(self) -> tuple[str, ...]:
        """Canonical ids proposed so far, in first-proposal order."""
        return tuple(self._proposals)

    def handle(self, arguments: object) -> DropReceipt | InvalidArgumentsReceipt:
        """Process one tool call and return the receipt for the model."""
        ids = drop_ids(arguments if isinstance(arguments, Mapping) else {})
        if isinstance(ids, InvalidArgumentsReceipt):
            return ids
        added = missing = in_request = in_run = 0
        seen_in_request: set[str] = set()
        for raw in ids:
            canonical = self._id_map.canonical_id(raw.strip()) if isinstance(raw, str) else None
            if canonical is None:
                missing += 1
            elif canonical in seen_in_request:
                in_request += 1
            elif canonical in self._proposals:
                seen_in_request.add(canonical)
                in_run += 1
            else:
                seen_in_request.add(canonical)
                self._proposals[canonical] = None
                added += 1
        return drop_receipt(added, missing, in_request, in_run, len(self._proposals), self._max_drops)


# --- server-side selection ----------------------------------------------------------------------


def timestamp_rank(timestamp: str) -> float:
    """Sort key for age: the minute as seconds since the epoch, ``inf`` when it does not parse.

    The original parses in the process timezone; omray reads the wall-clock minute as UTC, which
    orders every valid timestamp the same way except across a DST fold.
    """
    match = _TIMESTAMP_RE.match(timestamp)
    if match is None:
        return math.inf
    year, month, day, hour, minute = (int(part) for part in match.groups())
    try:
        moment = datetime(year, month, day, hour, minute, tzinfo=UTC)
    except ValueError:
        return math.inf
    return moment.timestamp()


def select_drop_candidates(
    proposed: Sequence[str],
    observations: Sequence[ObservationRecord],
    reflections: Sequence[ReflectionLike],
    max_drops: int,
) -> tuple[str, ...]:
    """The observations actually dropped: proposals ranked and capped (§9.7).

    Proposals are deduped (first index kept) and limited to active observations, then sorted by
    coverage (strong, partial, none), relevance (low first), age (oldest first) and proposal
    order; the first ``max_drops`` win. Critical observations are not excluded, only ranked last.
    """
    by_id = {o.observation_id: o for o in observations}
    counts = support_counts(r.supporting_observation_ids for r in reflections)
    first_index: dict[str, int] = {}
    for index, observation_id in enumerate(proposed):
        if observation_id in by_id and observation_id not in first_index:
            first_index[observation_id] = index

    def rank(observation_id: str) -> tuple[int, int, float, int]:
        observation = by_id[observation_id]
        return (
            _COVERAGE_RANK[coverage_tier(counts.get(observation_id, 0))],
            relevance_rank(observation.relevance),
            timestamp_rank(observation.timestamp),
            first_index[observation_id],
        )

    ranked = sorted(first_index, key=rank)
    return tuple(ranked[: max(0, max_drops)])
