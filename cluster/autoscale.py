"""Carries out the pool autoscaler's decisions: creates and stops named worker actors.

The decisions are pure (:class:`actors.queue.scaling.PoolScaler`); this executor feeds it each
pool's load (runs waiting for a slot, from the queue; attempts per member, from the worker pool),
then creates the members a :class:`Grow` names (``omray.observer.<i>`` …) and tells the queue its
new capacity, or retires the member a :class:`Retire` names: the queue's capacity shrinks first
(so no start is counted on a member that is leaving), the pool takes it out only while it has
nothing in flight (it then never gets another attempt), and the actor closes its clients and is
killed. A member that was busy after all is kept, and its slots are given back; if a worker dies
with a job anyway, the queue counts a lost attempt and retries it, as for any crash.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

import ray

from actors.queue.figures import PoolFigures
from actors.queue.reports import safe_metric
from actors.queue.scaling import Grow, PoolLoad, PoolScaler, ScalingCommand
from cluster.ray_calls import RayWorkerPool

logger = logging.getLogger("omray.cluster")

SCALE_INTERVAL_S = 1.0
"""How often the autoscaler looks at the pools."""

RETIRE_TIMEOUT_S = 5.0
"""How long a retired worker may take to close its clients before it is killed."""


class CapacityPort(Protocol):
    """What the autoscaler needs from the queue."""

    def waiting_by_handler(self) -> dict[str, int]: ...
    def set_capacity(self, handler_id: str, size: int) -> None: ...


class PoolMetricsPort(Protocol):
    """Where pool sizes are reported (Ray metrics in a cluster)."""

    def pool_figures(self, handler_id: str, figures: PoolFigures) -> None: ...
    def pool_resized(self, handler_id: str, direction: str) -> None: ...


class PoolAutoscaler:
    """Runs the scaler every :data:`SCALE_INTERVAL_S` on its own thread and executes its commands."""

    def __init__(
        self,
        queue: CapacityPort,
        pool: RayWorkerPool,
        scaler: PoolScaler,
        create: Callable[[str, int], Any],
        metrics: PoolMetricsPort,
        clock: Callable[[], float],
    ) -> None:
        self._queue = queue
        self._pool = pool
        self._scaler = scaler
        self._create = create
        self._metrics = metrics
        self._clock = clock
        self._waiting: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run_forever, name="omray-queue-autoscale", daemon=True)

    def start(self) -> None:
        """Start the scaling thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop the scaling thread."""
        self._stop.set()
        self._thread.join(timeout=RETIRE_TIMEOUT_S + 1)

    def _run_forever(self) -> None:
        while not self._stop.wait(SCALE_INTERVAL_S):
            try:
                self.step()
            except Exception as exc:
                # Scaling must never stop the queue: a failed step is logged and tried again.
                logger.error("pool scaling step failed", extra={"error_class": type(exc).__name__})

    def step(self) -> list[ScalingCommand]:
        """Look at every pool once and carry out what the scaler decides."""
        self._waiting = self._queue.waiting_by_handler()
        loads = {
            hid: PoolLoad(self._waiting.get(hid, 0), self._pool.members(hid)) for hid in self._scaler.limits
        }
        commands = self._scaler.step(self._clock(), loads)
        for command in commands:
            if isinstance(command, Grow):
                self._grow(command)
            else:
                self._retire(command.handler_id, command.index)
        for hid, figures in self.figures().items():
            safe_metric(self._metrics.pool_figures, hid, figures)
        return commands

    def _grow(self, command: Grow) -> None:
        for index in command.indices:
            self._pool.add(command.handler_id, index, self._create(command.handler_id, index))
        self._resize(command.handler_id, "grow", len(command.indices))

    def _retire(self, handler_id: str, index: int) -> None:
        slots = self._scaler.limits[handler_id].slots
        members = len(self._pool.members(handler_id))
        # Capacity first: between the member leaving and a lower capacity, the queue could start
        # that member's slots' worth of attempts on the others, more than they have slots for.
        # (Starts the queue issued just before, not sent yet, can still land on them: a worker
        # runs two calls beyond its slots, and Ray queues any more; nothing is lost.)
        self._queue.set_capacity(handler_id, (members - 1) * slots)
        handle = self._pool.retire(handler_id, index)
        if handle is None:
            self._queue.set_capacity(handler_id, len(self._pool.members(handler_id)) * slots)
            return  # it took a job meanwhile: keep it
        self._resize(handler_id, "shrink", 1)
        try:
            ray.wait([handle.shutdown.remote()], timeout=RETIRE_TIMEOUT_S)
        except Exception as exc:  # a dead or stuck worker is killed anyway
            logger.info("retired worker did not close its clients", extra={"error_class": type(exc).__name__})
        ray.kill(handle, no_restart=True)

    def _resize(self, handler_id: str, direction: str, count: int) -> None:
        workers = len(self._pool.members(handler_id))
        self._queue.set_capacity(handler_id, workers * self._scaler.limits[handler_id].slots)
        safe_metric(self._metrics.pool_resized, handler_id, direction)
        logger.info(
            "worker pool resized",
            extra={"handler_id": handler_id, "direction": direction, "count": count, "workers": workers},
        )

    def figures(self) -> dict[str, PoolFigures]:
        """Every pool's size, busy members, bounds, slots and waiting runs, by handler id: what the
        metrics and :meth:`snapshot` (status, watch) both report."""
        result: dict[str, PoolFigures] = {}
        for hid, limits in self._scaler.limits.items():
            members = self._pool.members(hid)
            result[hid] = PoolFigures(
                workers=len(members),
                busy_workers=sum(1 for running in members.values() if running),
                minimum=limits.minimum,
                maximum=limits.maximum,
                slots=limits.slots,
                waiting=self._waiting.get(hid, 0),
            )
        return result

    def snapshot(self) -> dict[str, dict[str, int]]:
        """:meth:`figures` as JSON, by handler id (for status and watch), with the calls sent to each
        pool and the attempts they carried (more attempts than calls: batched)."""
        return {
            hid: {
                "calls": self._pool.call_counts(hid)[0],
                "attempts": self._pool.call_counts(hid)[1],
                **figures.as_dict(),
            }
            for hid, figures in self.figures().items()
        }
