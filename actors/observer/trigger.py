"""When an observe job calls the model: the trigger policy (pure, no I/O).

The original observed at every turn boundary, so every call re-sent instructions, tool schema and a
growing memory context for a few hundred tokens of new source. omray lets new material accumulate
and observes when one of these holds:

* ``threshold``: the uncovered source reaches ``observe_after_tokens`` (a full, cheap call);
* ``pressure``: the agent reported that its context is at least ``pressure_context_fill`` full, and
  half the threshold has accumulated: compaction is coming, and it needs the range it replaces
  covered, so the uncovered tail is kept short from here on;
* ``session_end``: the agent said the session ended;
* ``compaction``: the host said it is about to compact its context (the summary it is about to
  make replaces the range, so memory must hold it now);
* ``idle_flush``: a deferred tail waited ``idle_flush_seconds`` without a newer signal of its lane
  (an agent that stopped without saying so still gets its last turns observed);
* ``every_boundary``: ``observe_after_tokens`` is 0, the original per-boundary policy.

Otherwise the job is deferred: it commits nothing and makes no model call, and the queue holds a
follow-up ``idle_flush`` job for the lane, which the lane's next observe job absorbs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from protocol.jobs import ObserveSignal

ObserveReason = Literal["every_boundary", "threshold", "pressure", "session_end", "compaction", "idle_flush"]
"""Why a job observes now."""


@dataclass(frozen=True, slots=True)
class TriggerPolicy:
    """The settings the decision reads (``observer.*`` in the settings block)."""

    observe_after_tokens: int
    """Observe once this many source tokens are uncovered; 0 observes at every signal."""
    pressure_context_fill: float
    """Context fill (0..1) from which the agent is under compaction pressure."""

    @property
    def pressure_tokens(self) -> int:
        """Uncovered tokens that trigger a call under pressure: half the threshold."""
        return math.ceil(self.observe_after_tokens / 2)


@dataclass(frozen=True, slots=True)
class ObserveNow:
    """Call the model for the uncovered range."""

    reason: ObserveReason
    """Which rule fired."""
    uncovered_tokens: int = 0
    """Source tokens the call will observe (0 when they were not measured: the per-boundary policy)."""


@dataclass(frozen=True, slots=True)
class Defer:
    """Commit nothing yet; the tail waits for more material or the idle flush."""

    uncovered_tokens: int
    """Source tokens waiting."""


def decide_observe(
    uncovered_tokens: int, signal: ObserveSignal, context_fill: float | None, policy: TriggerPolicy
) -> ObserveNow | Defer:
    """Observe now or defer, from the uncovered source tokens and the job's signal.

    The end of a session, a coming compaction and an expired idle timer always observe; so does the
    per-boundary policy.
    """
    if signal in ("session_end", "compaction", "idle_flush"):
        return ObserveNow(signal, uncovered_tokens)
    if policy.observe_after_tokens <= 0:
        return ObserveNow("every_boundary", uncovered_tokens)
    if uncovered_tokens >= policy.observe_after_tokens:
        return ObserveNow("threshold", uncovered_tokens)
    pressed = context_fill is not None and context_fill >= policy.pressure_context_fill
    if pressed and uncovered_tokens >= policy.pressure_tokens:
        return ObserveNow("pressure", uncovered_tokens)
    return Defer(uncovered_tokens)


def dispatch_signal(
    terminal: bool, context_fill: float | None, session_end: bool, policy: TriggerPolicy
) -> ObserveSignal | None:
    """Whether a committed batch should send an observe job at all, and with which signal.

    A turn's end always does (the job may still defer); the end of a session does; a batch inside a
    turn does only under pressure (``checkpoint``), so a long turn near compaction is observed
    while it runs. Everything else sends nothing.
    """
    if session_end:
        return "session_end"
    if terminal:
        return "turn_end"
    pressed = context_fill is not None and context_fill >= policy.pressure_context_fill
    if pressed and policy.observe_after_tokens > 0:
        return "checkpoint"
    return None
