"""The pool autoscaler's pure decisions: bounds, hysteresis, only idle members retired."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from actors.queue.scaling import (
    Grow,
    PoolLimits,
    PoolLoad,
    PoolScaler,
    Retire,
    ScalingError,
    ScalingPolicy,
)

OBSERVE = "observational_memory.observe_boundary"
POLICY = ScalingPolicy(grow_after_s=1.0, shrink_after_s=10.0, cooldown_s=2.0)


def _scaler(minimum: int = 1, maximum: int = 4, slots: int = 2) -> PoolScaler:
    return PoolScaler({OBSERVE: PoolLimits(minimum, maximum, slots)}, POLICY)


def test_a_backlog_grows_the_pool_only_after_it_lasted() -> None:
    scaler = _scaler()
    busy = PoolLoad(waiting=3, members={0: 2})
    assert scaler.step(0.0, {OBSERVE: busy}) == []
    assert scaler.step(0.5, {OBSERVE: busy}) == []
    # Three runs waiting at two slots per worker: two more workers, the lowest free indices.
    assert scaler.step(1.0, {OBSERVE: busy}) == [Grow(OBSERVE, (1, 2))]


def test_a_backlog_that_clears_before_the_delay_changes_nothing() -> None:
    scaler = _scaler()
    scaler.step(0.0, {OBSERVE: PoolLoad(waiting=3, members={0: 2})})
    assert scaler.step(0.9, {OBSERVE: PoolLoad(waiting=0, members={0: 2})}) == []
    assert scaler.step(1.5, {OBSERVE: PoolLoad(waiting=1, members={0: 2})}) == []  # the wait starts over


def test_growth_stops_at_the_maximum() -> None:
    scaler = _scaler(maximum=3)
    load = PoolLoad(waiting=50, members={0: 2, 2: 2})
    scaler.step(0.0, {OBSERVE: load})
    assert scaler.step(1.0, {OBSERVE: load}) == [Grow(OBSERVE, (1,))]
    full = PoolLoad(waiting=50, members={0: 2, 1: 2, 2: 2})
    assert scaler.step(5.0, {OBSERVE: full}) == [] and scaler.step(9.0, {OBSERVE: full}) == []


def test_spare_workers_are_retired_one_at_a_time_idle_ones_only() -> None:
    scaler = _scaler()
    quiet = PoolLoad(waiting=0, members={0: 1, 1: 0, 2: 0})
    assert scaler.step(0.0, {OBSERVE: quiet}) == []
    assert scaler.step(9.9, {OBSERVE: quiet}) == []
    assert scaler.step(10.0, {OBSERVE: quiet}) == [Retire(OBSERVE, 2)]
    after = PoolLoad(waiting=0, members={0: 1, 1: 0})
    assert scaler.step(11.0, {OBSERVE: after}) == []  # cooldown
    assert scaler.step(12.0, {OBSERVE: after}) == [Retire(OBSERVE, 1)]
    assert scaler.step(30.0, {OBSERVE: PoolLoad(waiting=0, members={0: 0})}) == []  # the minimum stays


def test_a_pool_whose_jobs_need_every_worker_is_not_shrunk() -> None:
    scaler = _scaler(slots=2)
    # Three attempts on two workers: one worker could not hold them, so nothing is spare.
    load = PoolLoad(waiting=0, members={0: 2, 1: 1})
    assert scaler.step(0.0, {OBSERVE: load}) == [] and scaler.step(100.0, {OBSERVE: load}) == []
    # Every member busy: none may be retired even with spare slots.
    assert scaler.step(200.0, {OBSERVE: PoolLoad(waiting=0, members={0: 1, 1: 1})}) == []


def test_no_retirement_right_after_growing() -> None:
    scaler = _scaler()
    scaler.step(0.0, {OBSERVE: PoolLoad(waiting=4, members={0: 2})})
    assert scaler.step(1.0, {OBSERVE: PoolLoad(waiting=4, members={0: 2})}) == [Grow(OBSERVE, (1, 2))]
    idle = PoolLoad(waiting=0, members={0: 0, 1: 0, 2: 0})
    assert scaler.step(1.5, {OBSERVE: idle}) == []
    assert scaler.step(11.5, {OBSERVE: idle}) == [Retire(OBSERVE, 2)]


def test_a_pool_below_its_minimum_is_refilled_at_once() -> None:
    scaler = _scaler(minimum=2)
    assert scaler.step(0.0, {OBSERVE: PoolLoad(waiting=0, members={1: 0})}) == [Grow(OBSERVE, (0,))]


def test_unknown_pools_are_left_alone() -> None:
    assert _scaler().step(0.0, {"other": PoolLoad(waiting=9, members={0: 1})}) == []


@pytest.mark.parametrize(("minimum", "maximum", "slots"), [(0, 1, 1), (3, 2, 1), (1, 1, 0)])
def test_impossible_limits_are_refused(minimum: int, maximum: int, slots: int) -> None:
    with pytest.raises(ScalingError):
        PoolLimits(minimum, maximum, slots)


@settings(max_examples=200, deadline=None)
@given(
    members=st.dictionaries(st.integers(0, 9), st.integers(0, 3), max_size=8),
    waiting=st.integers(0, 20),
    minimum=st.integers(1, 3),
    extra=st.integers(0, 4),
)
def test_a_single_step_respects_the_bounds(
    members: dict[int, int], waiting: int, minimum: int, extra: int
) -> None:
    scaler = _scaler(minimum=minimum, maximum=minimum + extra)
    for now in (0.0, 100.0):
        for command in scaler.step(now, {OBSERVE: PoolLoad(waiting, members)}):
            if isinstance(command, Grow):
                assert not set(command.indices) & set(members)
                assert len(members) + len(command.indices) <= max(minimum + extra, minimum)
            else:
                assert members[command.index] == 0 and len(members) - 1 >= minimum


class PoolModel(RuleBasedStateMachine):
    """The scaler with an executor that carries out its commands on a simulated pool."""

    def __init__(self) -> None:
        super().__init__()
        self.limits = PoolLimits(minimum=1, maximum=5, slots=2)
        self.scaler = PoolScaler({OBSERVE: self.limits}, POLICY)
        self.now = 0.0
        self.members: dict[int, int] = {0: 0}
        self.waiting = 0
        self.retired_busy = 0

    def _step(self) -> None:
        for command in self.scaler.step(self.now, {OBSERVE: PoolLoad(self.waiting, dict(self.members))}):
            if isinstance(command, Grow):
                for index in command.indices:
                    assert index not in self.members
                    self.members[index] = 0
            else:
                self.retired_busy += self.members.pop(command.index)
            self._place()

    def _place(self) -> None:
        # Waiting runs take free slots, as the queue would start them.
        for index in sorted(self.members):
            while self.waiting and self.members[index] < self.limits.slots:
                self.members[index] += 1
                self.waiting -= 1

    @rule(runs=st.integers(1, 12))
    def backlog_arrives(self, runs: int) -> None:
        self.waiting += runs
        self._place()
        self._step()

    @rule(data=st.data())
    def a_run_ends(self, data: st.DataObject) -> None:
        busy = [index for index, running in self.members.items() if running]
        if busy:
            self.members[data.draw(st.sampled_from(busy))] -= 1
            self._place()
        self._step()

    @rule(seconds=st.sampled_from([0.3, 1.0, 3.0, 12.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self._step()

    @invariant()
    def within_bounds_and_nothing_interrupted(self) -> None:
        assert self.limits.minimum <= len(self.members) <= self.limits.maximum
        assert self.retired_busy == 0


TestPoolModel = PoolModel.TestCase
PoolModel.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
