"""The only place that turns Python calls into Ray calls for omray's actors.

Following Ray Serve's control plane, every Ray call goes through one small wrapper per remote
resource, so the actor classes in ``actors/`` stay plain Python and unit-testable without Ray.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from protocol.jobs import pool_of

logger = logging.getLogger("omray.cluster")

STORE_CALL_TIMEOUT_S = 60.0
"""Upper bound of one StoreActor call (a write waits at most busy_timeout on SQLite)."""


class StoreProxy:
    """Synchronous facade over a StoreActor: ``proxy.m(*a)`` is ``ray.get(handle.m.remote(*a))``.

    With ``durable=True`` a call whose actor died is retried (with backoff) until the restarted
    StoreActor answers: every Store write is idempotent, so repeating one is safe. ``check`` runs
    after each failed call and raises when retrying cannot help (the actor's node is not in the
    cluster: :class:`protocol.placement.DataNodeLostError`).
    """

    def __init__(
        self,
        handle: Any,
        *,
        durable: bool = False,
        max_wait_s: float = 120.0,
        check: Callable[[], None] | None = None,
    ) -> None:
        self._handle = handle
        self._durable = durable
        self._max_wait_s = max_wait_s
        self._check = check

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
                    if self._check is not None:
                        self._check()  # raises when waiting cannot help (the data node is gone)
                    if not self._durable or time.monotonic() > deadline:
                        raise
                    logger.warning(
                        "store call retried", extra={"method": name, "error_class": type(exc).__name__}
                    )
                    time.sleep(delay)
                    delay = min(delay * 2, 2.0)

        return call


SHORT_ATTEMPT_S = 0.02
"""A pool whose recent attempts took less than this (the median of the last :data:`RECENT_ATTEMPTS`
calls, one slow first job apart) gets the attempts one commit starts in one call per member: there
the Ray call, not the job, is most of the cost."""

RECENT_ATTEMPTS = 16
"""Calls per pool whose times decide whether its attempts are short (at least half of them first)."""


class RayWorkerPool:
    """Starts job attempts on the worker pools; outcomes arrive by callback, so nothing polls Ray.

    Each handler id has a pool of worker actors, by member index; an attempt goes to the active
    member with the fewest attempts in flight (the queue never sends a pool more attempts than its
    members have slots). A member can be retired only while it has nothing in flight, and a
    retired member never gets another attempt, so killing it loses nothing. ``start``,
    ``start_many`` and ``poll`` run on the queue's loop thread; outcomes are handed over under a
    lock, and ``on_ready`` wakes the loop when there are some.

    ``start_many`` sends the attempts of a pool whose attempts are short (:data:`SHORT_ATTEMPT_S`)
    to one member in one call (``handle_many``, run one after the other there), and every other
    attempt in a call of its own, so a slow job never holds another's outcome back. A call that
    fails, or a worker that dies, ends each attempt it carried as lost (``None``), once.

    ``running`` (per handler id, job id -> member index) names the attempts an earlier life of the
    queue left running: the next attempt of such a job goes to that member, alone, wherever the
    load is, so it waits there for the old attempt to end instead of overlapping it elsewhere.
    """

    def __init__(
        self,
        pools: Mapping[str, Mapping[int, Any]],
        running: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self._members: dict[str, dict[int, Any]] = {hid: dict(members) for hid, members in pools.items()}
        # Per pool, job id -> the member still running an attempt of it that an earlier life of the
        # queue sent: the job's next attempt goes there, where it waits for the old one to end
        # (``WorkerActor`` never overlaps two attempts of one job), so its lane never overlaps.
        self._running_elsewhere: dict[str, dict[str, int]] = {
            hid: dict(jobs) for hid, jobs in (running or {}).items()
        }
        # Per call in flight: the job seqs it carries, the pool, the member, when it was sent.
        self._in_flight: dict[Any, tuple[tuple[int, ...], str, int, float]] = {}
        self._busy: dict[tuple[str, int], int] = {}
        # Per pool, how long its recent attempts took (a call's time over the attempts it carried).
        self._attempt_s: dict[str, collections.deque[float]] = {}
        self._calls: collections.Counter[str] = collections.Counter()  # per pool: calls, attempts
        self._finished: list[tuple[int, dict[str, Any] | None]] = []
        self._changed = threading.Condition()
        self._ready: Callable[[], None] | None = None

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        """Send one attempt of one job to the least busy worker of the pool serving ``handler_id``
        (``protocol.jobs.pool_of``: forget jobs go to the reflector pool)."""
        self._send(pool_of(handler_id), [(job_seq, envelope, attempt)], batched=False)

    def start_many(self, starts: Sequence[tuple[str, int, Mapping[str, Any], int]]) -> list[int]:
        """Send several attempts (``handler_id, job_seq, envelope, attempt``); the job seqs of those
        that could not be sent (each a lost attempt for the queue)."""
        by_pool: dict[str, list[tuple[int, Mapping[str, Any], int]]] = {}
        for handler_id, job_seq, envelope, attempt in starts:
            by_pool.setdefault(pool_of(handler_id), []).append((job_seq, envelope, attempt))
        failed: list[int] = []
        for handler_id, group in by_pool.items():
            with self._changed:  # pins exist only after a restart that left attempts running
                pins = set(self._running_elsewhere.get(handler_id, ()))
            pinned = [one for one in group if pins and str(one[1].get("job_id")) in pins]
            if pinned:
                group = [one for one in group if str(one[1].get("job_id")) not in pins]
            calls = (
                [group] if len(group) > 1 and self.short_attempts(handler_id) else [[one] for one in group]
            )
            calls.extend([one] for one in pinned)  # each to the member that runs its old attempt
            for items in calls:
                try:
                    self._send(handler_id, items, batched=len(items) > 1)
                except Exception as exc:
                    logger.error(
                        "job attempts could not be sent",
                        extra={"jobs": len(items), "error_class": type(exc).__name__},
                    )
                    failed.extend(job_seq for job_seq, _, _ in items)
        return failed

    def call_counts(self, handler_id: str) -> tuple[int, int]:
        """Calls sent to the pool serving ``handler_id`` since start, and the attempts they carried."""
        with self._changed:
            return self._calls[f"{handler_id}:calls"], self._calls[f"{handler_id}:attempts"]

    def short_attempts(self, handler_id: str) -> bool:
        """True when the pool's recent attempts were short enough to share a call."""
        with self._changed:
            recent = sorted(self._attempt_s.get(handler_id, ()))
        return len(recent) >= RECENT_ATTEMPTS // 2 and recent[len(recent) // 2] < SHORT_ATTEMPT_S

    def _send(
        self, handler_id: str, items: list[tuple[int, Mapping[str, Any], int]], *, batched: bool
    ) -> None:
        with self._changed:
            pool = self._members[handler_id]
            member = min(pool, key=lambda i: (self._busy.get((handler_id, i), 0), i))
            if len(items) == 1:
                pinned = self._running_elsewhere.get(handler_id, {}).pop(str(items[0][1].get("job_id")), None)
                if pinned is not None and pinned in pool:
                    member = pinned
            self._busy[(handler_id, member)] = self._busy.get((handler_id, member), 0) + len(items)
            handle = pool[member]
        try:
            if batched:
                ref = handle.handle_many.remote([(dict(envelope), attempt) for _, envelope, attempt in items])
            else:
                ref = handle.handle.remote(dict(items[0][1]), items[0][2])
        except BaseException:
            with self._changed:
                self._busy[(handler_id, member)] -= len(items)
            raise
        seqs = tuple(job_seq for job_seq, _, _ in items)
        with self._changed:
            self._in_flight[ref] = (seqs, handler_id, member, time.monotonic())
            self._calls[f"{handler_id}:calls"] += 1
            self._calls[f"{handler_id}:attempts"] += len(items)
        ref.future().add_done_callback(functools.partial(self._done, ref, batched))

    def _done(self, ref: Any, batched: bool, future: concurrent.futures.Future[Any]) -> None:
        """Ray's callback thread: hand the outcomes to the collector (``None``: the worker died)."""
        with self._changed:
            seqs, handler_id, member, sent = self._in_flight.pop(ref)
            self._busy[(handler_id, member)] -= len(seqs)
            each = (time.monotonic() - sent) / len(seqs)
            self._attempt_s.setdefault(handler_id, collections.deque(maxlen=RECENT_ATTEMPTS)).append(each)
        outcomes: list[Any]
        try:
            answer = future.result()
            outcomes = list(answer) if batched else [answer]
            if len(outcomes) != len(seqs):
                raise ValueError("a worker answered a batch with another number of outcomes")
        except (RayError, concurrent.futures.CancelledError, TypeError, ValueError) as exc:
            logger.warning(
                "worker lost mid-job",
                extra={"job_seq": seqs[0], "jobs": len(seqs), "error_class": type(exc).__name__},
            )
            outcomes = [None] * len(seqs)
        with self._changed:
            self._finished.extend(zip(seqs, outcomes, strict=True))
            self._changed.notify_all()
            ready = self._ready
        if ready is not None:
            ready()

    def on_ready(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` each time outcomes become ready to :meth:`poll` (the queue's loop wakes
        on it and collects them itself, so no thread of its own waits in ``poll``)."""
        with self._changed:
            self._ready = callback

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        """Finished attempts as ``(job_seq, outcome)``, waiting up to ``timeout_s`` for the first."""
        with self._changed:
            if not self._finished and timeout_s > 0:
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
            if index in self._running_elsewhere.get(handler_id, {}).values():
                return None  # it still runs an attempt an earlier queue sent, whose next one goes there
            self._busy.pop((handler_id, index), None)
            return pool.pop(index)
