"""The only place that turns Python calls into Ray calls for omray's actors.

Following Ray Serve's control plane, every Ray call goes through one small wrapper per remote
resource, so the actor classes in ``actors/`` stay plain Python and unit-testable without Ray.
"""

from __future__ import annotations

import concurrent.futures
import functools
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
    """Starts job attempts on the worker pools; outcomes arrive by callback, so nothing polls Ray.

    Each handler id has a pool of worker actors, by member index; an attempt goes to the active
    member with the fewest attempts in flight (the queue never sends a pool more attempts than its
    members have slots). A member can be retired only while it has nothing in flight, and a
    retired member never gets another attempt, so killing it loses nothing. ``start`` runs on the
    queue's committer thread and ``poll`` on its collector; outcomes are handed over under a lock.
    """

    def __init__(self, pools: Mapping[str, Mapping[int, Any]]) -> None:
        self._members: dict[str, dict[int, Any]] = {hid: dict(members) for hid, members in pools.items()}
        self._in_flight: dict[Any, tuple[int, str, int]] = {}
        self._busy: dict[tuple[str, int], int] = {}
        self._finished: list[tuple[int, dict[str, Any] | None]] = []
        self._changed = threading.Condition()

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        """Send one attempt of one job to the least busy worker of the pool serving ``handler_id``."""
        with self._changed:
            pool = self._members[handler_id]
            member = min(pool, key=lambda i: (self._busy.get((handler_id, i), 0), i))
            self._busy[(handler_id, member)] = self._busy.get((handler_id, member), 0) + 1
            handle = pool[member]
        try:
            ref = handle.handle.remote(dict(envelope), attempt)
        except BaseException:
            with self._changed:
                self._busy[(handler_id, member)] -= 1
            raise
        with self._changed:
            self._in_flight[ref] = (job_seq, handler_id, member)
        ref.future().add_done_callback(functools.partial(self._done, ref))

    def _done(self, ref: Any, future: concurrent.futures.Future[Any]) -> None:
        """Ray's callback thread: hand the outcome to the collector (``None``: the worker died)."""
        with self._changed:
            job_seq, handler_id, member = self._in_flight.pop(ref)
            self._busy[(handler_id, member)] -= 1
        try:
            outcome: dict[str, Any] | None = future.result()
        except (RayError, concurrent.futures.CancelledError) as exc:
            logger.warning(
                "worker lost mid-job", extra={"job_seq": job_seq, "error_class": type(exc).__name__}
            )
            outcome = None
        with self._changed:
            self._finished.append((job_seq, outcome))
            self._changed.notify_all()

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        """Finished attempts as ``(job_seq, outcome)``, waiting up to ``timeout_s`` for the first."""
        with self._changed:
            if not self._finished:
                self._changed.wait(timeout_s)
            finished, self._finished = self._finished, []
        return finished

    def members(self, handler_id: str) -> dict[int, int]:
        """Active members of one pool and the attempts each has in flight."""
        with self._changed:
            return {i: self._busy.get((handler_id, i), 0) for i in self._members[handler_id]}

    def add(self, handler_id: str, index: int, handle: Any) -> None:
        """Make a new worker a member of the pool serving ``handler_id``."""
        with self._changed:
            self._members[handler_id][index] = handle

    def retire(self, handler_id: str, index: int) -> Any | None:
        """Take an idle member out of its pool and return its handle; ``None`` if it is busy or unknown."""
        with self._changed:
            pool = self._members[handler_id]
            if index not in pool or self._busy.get((handler_id, index), 0) > 0 or len(pool) == 1:
                return None
            self._busy.pop((handler_id, index), None)
            return pool.pop(index)
