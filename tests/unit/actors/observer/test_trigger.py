"""The observer's trigger policy: threshold, context pressure, session end, idle flush (pure)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from actors.observer.trigger import Defer, ObserveNow, TriggerPolicy, decide_observe, dispatch_signal

POLICY = TriggerPolicy(observe_after_tokens=8000, pressure_context_fill=0.5)

signals = st.sampled_from(["turn_end", "checkpoint", "session_end", "idle_flush"])
fills = st.none() | st.floats(min_value=0.0, max_value=1.5)


def test_threshold_pressure_and_session_end() -> None:
    assert decide_observe(7999, "turn_end", None, POLICY) == Defer(7999)
    assert decide_observe(8000, "turn_end", None, POLICY) == ObserveNow("threshold", 8000)
    # Under pressure, half the threshold is enough, inside a turn too.
    assert decide_observe(4000, "checkpoint", 0.5, POLICY) == ObserveNow("pressure", 4000)
    assert decide_observe(3999, "checkpoint", 0.9, POLICY) == Defer(3999)
    assert decide_observe(4000, "turn_end", 0.49, POLICY) == Defer(4000)
    # The end of a session and an expired idle timer observe whatever is there.
    assert decide_observe(1, "session_end", None, POLICY) == ObserveNow("session_end", 1)
    assert decide_observe(1, "idle_flush", 0.1, POLICY) == ObserveNow("idle_flush", 1)
    assert decide_observe(1, "compaction", None, POLICY) == ObserveNow("compaction", 1)
    # Threshold 0 is the original policy: every job observes.
    assert decide_observe(1, "turn_end", None, TriggerPolicy(0, 0.5)) == ObserveNow("every_boundary", 1)


@given(st.integers(0, 50_000), st.integers(0, 50_000), signals, fills)
def test_more_material_never_turns_observing_into_deferring(
    low: int, extra: int, signal: str, fill: float | None
) -> None:
    if isinstance(decide_observe(low, signal, fill, POLICY), ObserveNow):  # type: ignore[arg-type]
        assert isinstance(decide_observe(low + extra, signal, fill, POLICY), ObserveNow)  # type: ignore[arg-type]


@given(st.integers(0, 50_000), signals, fills, st.floats(0.0, 1.0))
def test_more_pressure_never_turns_observing_into_deferring(
    tokens: int, signal: str, fill: float | None, more: float
) -> None:
    if isinstance(decide_observe(tokens, signal, fill, POLICY), ObserveNow):  # type: ignore[arg-type]
        higher = None if fill is None else fill + more
        assert isinstance(decide_observe(tokens, signal, higher, POLICY), ObserveNow)  # type: ignore[arg-type]


@given(st.integers(0, 50_000), signals, fills)
def test_a_deferred_tail_is_always_smaller_than_the_threshold(
    tokens: int, signal: str, fill: float | None
) -> None:
    decision = decide_observe(tokens, signal, fill, POLICY)  # type: ignore[arg-type]
    if isinstance(decision, Defer):
        assert signal in ("turn_end", "checkpoint")
        assert decision.uncovered_tokens < POLICY.observe_after_tokens
        if fill is not None and fill >= POLICY.pressure_context_fill:
            assert decision.uncovered_tokens < POLICY.pressure_tokens


def test_which_batches_send_an_observe_job() -> None:
    assert dispatch_signal(True, None, False, POLICY) == "turn_end"
    assert dispatch_signal(False, None, False, POLICY) is None
    assert dispatch_signal(False, 0.49, False, POLICY) is None
    assert dispatch_signal(False, 0.5, False, POLICY) == "checkpoint"
    assert dispatch_signal(False, None, True, POLICY) == "session_end"
    assert dispatch_signal(True, 0.9, True, POLICY) == "session_end"
    # The per-boundary policy never observes inside a turn.
    assert dispatch_signal(False, 0.9, False, TriggerPolicy(0, 0.5)) is None
