"""The only place that turns Python calls into Ray calls for omray's actors.

Following Ray Serve's control plane, every Ray call goes through one small wrapper per remote
resource, so the actor classes in ``actors/`` stay plain Python and unit-testable without Ray.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

logger = logging.getLogger("omray.cluster")

STORE_CALL_TIMEOUT_S = 60.0
"""Upper bound of one StoreActor call (a write waits at most busy_timeout on SQLite)."""


class StoreProxy:
    """Synchronous facade over a StoreActor: ``proxy.m(*a)`` is ``ray.get(handle.m.remote(*a))``.

    With ``durable=True`` a call whose actor died is retried (with backoff) until the restarted
    StoreActor answers: every Store write is idempotent, so repeating one is safe.
    """

    def __init__(self, handle: Any, *, durable: bool = False, max_wait_s: float = 120.0) -> None:
        self._handle = handle
        self._durable = durable
        self._max_wait_s = max_wait_s

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        method = getattr(self._handle, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            deadline = time.monotonic() + self._max_wait_s
            delay = 0.05
            while True:
                try:
                    return ray.get(method.remote(*args, **kwargs), timeout=STORE_CALL_TIMEOUT_S)
                except (RayActorError, GetTimeoutError) as exc:
                    if not self._durable or time.monotonic() > deadline:
                        raise
                    logger.warning(
                        "store call retried", extra={"method": name, "error_class": type(exc).__name__}
                    )
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)

        return call


class RayWorkerPool:
    """Starts job attempts on the worker pools and collects their outcomes without blocking long.

    Each handler id has a pool of worker actors; an attempt goes to the member with the fewest
    attempts in flight (the queue never sends a pool more attempts than its members have slots). ``start``
    may run on an actor-method thread (the queue catching up inside ``dispatch``) while the loop
    thread polls, so the bookkeeping is guarded by a lock (never held across ``ray.wait``).
    """

    def __init__(self, pools: Mapping[str, Any]) -> None:
        self._pools: dict[str, list[Any]] = {
            hid: list(handles) if isinstance(handles, list | tuple) else [handles]
            for hid, handles in pools.items()
        }
        self._in_flight: dict[Any, tuple[int, str, int]] = {}
        self._busy: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        """Send one attempt of one job to the least busy worker of the pool serving ``handler_id``."""
        pool = self._pools[handler_id]
        with self._lock:
            member = min(range(len(pool)), key=lambda i: (self._busy.get((handler_id, i), 0), i))
            self._busy[(handler_id, member)] = self._busy.get((handler_id, member), 0) + 1
        try:
            ref = pool[member].handle.remote(dict(envelope), attempt)
        except BaseException:
            with self._lock:
                self._busy[(handler_id, member)] -= 1
            raise
        with self._lock:
            self._in_flight[ref] = (job_seq, handler_id, member)

    def busy_members(self) -> dict[str, int]:
        """Workers with an attempt in flight, per handler id."""
        with self._lock:
            counts: dict[str, int] = {hid: 0 for hid in self._pools}
            for (hid, _member), n in self._busy.items():
                counts[hid] += 1 if n > 0 else 0
            return counts

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        """Finished attempts as ``(job_seq, outcome)``; ``None`` means the worker died mid-job."""
        with self._lock:
            refs = list(self._in_flight)
        if not refs:
            return []
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        finished: list[tuple[int, dict[str, Any] | None]] = []
        for ref in ready:
            with self._lock:
                job_seq, handler_id, member = self._in_flight.pop(ref)
                self._busy[(handler_id, member)] -= 1
            try:
                finished.append((job_seq, ray.get(ref)))
            except RayError as exc:
                logger.warning(
                    "worker lost mid-job", extra={"job_seq": job_seq, "error_class": type(exc).__name__}
                )
                finished.append((job_seq, None))
        return finished

    def forget_all(self) -> None:
        """Drop every in-flight reference (used when the queue rebuilds its state)."""
        with self._lock:
            self._in_flight.clear()
            self._busy.clear()

    @property
    def in_flight(self) -> int:
        """Attempts started and not yet collected."""
        with self._lock:
            return len(self._in_flight)
