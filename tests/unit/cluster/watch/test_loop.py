"""The refresh throttle and the loop: never faster than 0.25 s, first frame at once, Ctrl-C exits 0."""

from __future__ import annotations

import io
import itertools

import pytest
from rich.console import Console

from cluster.watch import MIN_INTERVAL_S, RefreshThrottle, WatchSnapshot, run_watch
from tests.unit.cluster.watch.conftest import NOW


class FakeClock:
    """A monotonic clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "the loop must never spin without waiting"
        self.sleeps.append(seconds)
        self.now += seconds


def _snapshot(depth: int = 0) -> WatchSnapshot:
    return WatchSnapshot(taken_at=NOW, queue_name="omray.queue", queue_depth=depth)


def _console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100, color_system=None), out


def test_throttle_first_refresh_is_immediate_then_every_interval() -> None:
    clock = FakeClock()
    throttle = RefreshThrottle(0.25, clock)
    assert throttle.take()
    clock.now += 0.1
    assert not throttle.take()
    assert throttle.wait_s() == pytest.approx(0.15)
    clock.now += 0.149
    assert not throttle.take()
    clock.now += 0.001
    assert throttle.take()
    assert throttle.wait_s() == pytest.approx(0.25)


@pytest.mark.parametrize(("asked", "effective"), [(0.0, 0.25), (0.1, 0.25), (0.25, 0.25), (1.5, 1.5)])
def test_throttle_interval_has_a_floor(asked: float, effective: float) -> None:
    assert RefreshThrottle(asked, FakeClock()).interval_s == effective
    assert MIN_INTERVAL_S == 0.25


@pytest.mark.parametrize(("interval", "gap"), [(0.05, 0.25), (0.25, 0.25), (1.0, 1.0)])
def test_loop_refreshes_at_the_throttled_pace(interval: float, gap: float) -> None:
    clock = FakeClock()
    reads: list[float] = []

    def read() -> WatchSnapshot:
        reads.append(clock())
        return _snapshot(len(reads))

    console, out = _console()
    code = run_watch(read, interval_s=interval, console=console, clock=clock, sleep=clock.sleep, max_frames=6)
    assert code == 0
    assert reads[0] == 100.0  # the first frame does not wait
    assert [round(b - a, 6) for a, b in itertools.pairwise(reads)] == [gap] * 5
    assert "Queue depth: 6" in out.getvalue()


def test_ctrl_c_exits_with_zero() -> None:
    clock = FakeClock()
    calls: list[int] = []

    def read() -> WatchSnapshot:
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return _snapshot()

    console, _ = _console()
    assert run_watch(read, console=console, clock=clock, sleep=clock.sleep) == 0
    assert len(calls) == 3


def test_ctrl_c_while_sleeping_exits_with_zero() -> None:
    def interrupted_sleep(_seconds: float) -> None:
        raise KeyboardInterrupt

    console, _ = _console()
    assert run_watch(_snapshot, console=console, clock=FakeClock(), sleep=interrupted_sleep) == 0


def test_once_prints_one_frame() -> None:
    reads: list[int] = []

    def read() -> WatchSnapshot:
        reads.append(1)
        return _snapshot(3)

    console, out = _console()
    assert run_watch(read, once=True, console=console) == 0
    assert reads == [1]
    assert out.getvalue().splitlines()[1] == "Queue depth: 3 · in flight: 0"
