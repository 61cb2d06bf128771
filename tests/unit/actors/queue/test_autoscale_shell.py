"""The autoscaler's executor: a retired member's slots leave the queue's capacity before the member
leaves its pool, and come back when the pool keeps it. Fake queue and actor handles; Ray mocked."""

from __future__ import annotations

from typing import Any
from unittest import mock

from actors.queue.scaling import PoolLimits, PoolScaler
from cluster import autoscale
from cluster.autoscale import PoolAutoscaler
from cluster.ray_calls import RayWorkerPool


class _Queue:
    def __init__(self, pool: RayWorkerPool, log: list[Any]) -> None:
        self.pool, self.log = pool, log

    def waiting_by_handler(self) -> dict[str, int]:
        return {}

    def set_capacity(self, handler_id: str, size: int) -> None:
        # What the queue may start from now on, next to the members that could take it.
        self.log.append(("capacity", size, len(self.pool.members(handler_id))))


class _Metrics:
    def pool_figures(self, handler_id: str, figures: Any) -> None:
        """Ignore."""

    def pool_resized(self, handler_id: str, direction: str) -> None:
        """Ignore."""


class _Handle:
    def __init__(self) -> None:
        self.shutdown = mock.Mock()


def _autoscaler(log: list[Any], pool: RayWorkerPool) -> PoolAutoscaler:
    scaler = PoolScaler({"observe": PoolLimits(minimum=1, maximum=3, slots=4)})
    return PoolAutoscaler(_Queue(pool, log), pool, scaler, lambda hid, i: _Handle(), _Metrics(), lambda: 0.0)


def test_capacity_shrinks_before_the_member_leaves_its_pool() -> None:
    log: list[Any] = []
    pool = RayWorkerPool({"observe": {0: _Handle(), 1: _Handle(), 2: _Handle()}})
    with mock.patch.object(autoscale, "ray"):
        _autoscaler(log, pool)._retire("observe", 2)
    assert log[0] == ("capacity", 8, 3)  # two members' slots, while all three are still members
    assert set(pool.members("observe")) == {0, 1}
    assert log[-1] == ("capacity", 8, 2)


def test_a_member_kept_after_all_gets_its_slots_back() -> None:
    log: list[Any] = []
    pool = RayWorkerPool({"observe": {0: _Handle(), 1: _Handle()}})
    with mock.patch.object(pool, "retire", return_value=None), mock.patch.object(autoscale, "ray") as ray:
        _autoscaler(log, pool)._retire("observe", 1)
    assert log == [("capacity", 4, 2), ("capacity", 8, 2)]
    assert not ray.kill.called
