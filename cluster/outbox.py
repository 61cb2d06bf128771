"""The hook's outbox: dispatches the runtime did not accept yet, retried in the background until it does.

The hook returns within its deadline, and the turn is still observed once the runtime is back. Its
retry decisions follow the errors of :mod:`cluster.runtime_connection` (which means "not running", which a
refusal, which a runtime without ``dispatch_many``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from cluster.runtime_connection import RuntimeMethodMissingError, RuntimeUnavailableError
from protocol.errors import RuntimeNotRunningError

logger = logging.getLogger("omray.link")

BATCH_PAUSE_S = 60.0
"""How long an outbox sends job by job after the runtime refused ``dispatch_many`` as unknown."""


class Outbox:
    """Hook dispatches not accepted yet, sent in the background until accepted, in order per session.

    ``send(envelope, timeout_s)`` returns the job id or raises. Jobs of different sessions are sent
    at the same time (up to ``parallel``), so many agents' hooks share the queue's group commit
    instead of waiting behind each other; the jobs of one session are sent one after the other, in
    submission order. A job whose session has nothing else waiting goes straight to a sender thread;
    the others wait for the sender loop. The hook waits for its own job at most its deadline (the
    send runs on a sender thread, never on the hook's); a job still pending then is sent later, with
    a backoff per session between attempts (0.2 s doubling to 5 s). Job ids are deterministic and
    the queue accepts a pending id once, so a send whose answer was lost is harmless when repeated.
    At most ``limit`` jobs wait; past that the oldest is dropped (a later boundary of the same
    session covers its events again).

    With ``send_many`` (``envelopes, timeout_s`` -> their job ids, in order), a sender thread that
    finds several sends waiting takes them all (up to ``batch``, each of another session) in one
    call: a burst of many agents' hooks in one process costs the queue a few calls, not one each.
    ``senders`` bounds the sender threads (``parallel`` still bounds the sessions in flight). A
    batch the runtime did not take is retried like single sends; one it rejected (or a runtime
    without ``dispatch_many`` refused) is sent job by job, so one bad job never holds up the others.
    A runtime without ``dispatch_many`` (:class:`RuntimeMethodMissingError`) then gets single sends for
    :data:`BATCH_PAUSE_S` before the outbox tries a batch again (it may have been upgraded).

    A single send the runtime refuses is retried like one it did not take, and its session's later
    jobs wait behind it: the envelope was validated before it was sent, so a refusal means a runtime
    of another version, which takes the job once it is upgraded. Dropping it would lose the turn
    for good (its hook reports it sent), and sending the later jobs first would break the order.
    """

    def __init__(
        self,
        send: Callable[[Any, float], str],
        call_timeout_s: float,
        limit: int = 1000,
        parallel: int = 16,
        *,
        send_many: Callable[[list[Any], float], list[str]] | None = None,
        batch: int = 64,
        senders: int | None = None,
    ) -> None:
        self._send = send
        self._send_many = send_many
        self._batch = max(1, batch)
        self._max_senders = max(1, min(parallel, senders or parallel))
        self._call_timeout_s = call_timeout_s
        self._limit = limit
        self._parallel = parallel
        self._pending: dict[str, Any] = {}
        self._pending_of: dict[str, int] = {}  # pending jobs per session
        self._accepted: dict[str, str] = {}
        self._sending: set[str] = set()  # sessions with a send in flight
        self._not_before: dict[str, float] = {}  # per session, after a failed send
        self._backoff: dict[str, float] = {}
        self._lock = threading.Lock()
        # The sender loop and ``wait_empty`` wait on ``_changed``; each hook waits on an event of its
        # own job, so an accepted job wakes its hook alone (with many agents in one process, waking
        # them all at every answer cost more than the sends).
        self._changed = threading.Condition(self._lock)
        self._waiters: dict[str, list[threading.Event]] = {}
        self._thread: threading.Thread | None = None
        # Sends handed to the sender threads, which stay (a thread per send cost a start each).
        self._sends: collections.deque[tuple[str, Any, str]] = collections.deque()
        self._send_ready = threading.Condition(self._lock)
        self._senders = 0
        self._idle_senders = 0
        self._batches_after = 0.0  # monotonic time before which senders send job by job

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    @staticmethod
    def _session_of(job_id: str, envelope: Any) -> str:
        payload = getattr(envelope, "payload", None)
        if payload is None:
            return job_id
        return f"{getattr(payload, 'db_path', '')}\x00{getattr(payload, 'session_id', job_id)}"

    def submit(self, job_id: str, envelope: Any, timeout_s: float) -> str | None:
        """Queue ``envelope`` for sending; its job id once accepted within ``timeout_s``, else ``None``."""
        deadline = time.monotonic() + timeout_s
        answered = threading.Event()
        session = self._session_of(job_id, envelope)
        with self._lock:
            self._accepted.pop(job_id, None)
            # First in its session's line, and the session free to send: no need for the loop.
            direct = (
                job_id not in self._pending
                and not self._pending_of.get(session)
                and session not in self._sending
                and self._not_before.get(session, 0.0) <= time.monotonic()
                and len(self._sending) < self._parallel
            )
            self._add_pending(job_id, envelope, session)
            self._waiters.setdefault(job_id, []).append(answered)
            while len(self._pending) > self._limit:
                dropped = next(iter(self._pending))
                self._remove_pending(dropped)
                logger.warning("hook job dropped from a full outbox", extra={"job_id": dropped})
            if direct and job_id in self._pending:
                self._sending.add(session)
                self._hand_over(job_id, envelope, session)
            else:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="omray-outbox", daemon=True)
                    self._thread.start()
                self._changed.notify_all()
        answered.wait(max(0.0, deadline - time.monotonic()))
        with self._lock:
            waiting = self._waiters.get(job_id, [])
            if answered in waiting:
                waiting.remove(answered)
                if not waiting:
                    del self._waiters[job_id]
            return self._accepted.pop(job_id, None) if answered.is_set() else None

    def wait_empty(self, timeout_s: float) -> bool:
        """True once every queued job was accepted (tests, clean shutdowns)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._pending:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def _add_pending(self, job_id: str, envelope: Any, session: str) -> None:
        """Under the lock."""
        if job_id not in self._pending:
            self._pending_of[session] = self._pending_of.get(session, 0) + 1
        self._pending[job_id] = envelope

    def _remove_pending(self, job_id: str) -> None:
        """Under the lock."""
        session = self._session_of(job_id, self._pending.pop(job_id))
        left = self._pending_of.get(session, 1) - 1
        if left > 0:
            self._pending_of[session] = left
        else:
            self._pending_of.pop(session, None)

    def _ready(self, now: float) -> tuple[list[tuple[str, Any, str]], float | None]:
        """The first pending job of every session that may send now; else when one may (under lock)."""
        picked: list[tuple[str, Any, str]] = []
        seen: set[str] = set()
        wake: float | None = None
        for job_id, envelope in self._pending.items():
            session = self._session_of(job_id, envelope)
            if session in seen:
                continue
            seen.add(session)
            if session in self._sending:
                continue
            due = self._not_before.get(session, 0.0)
            if due > now:
                wake = due if wake is None else min(wake, due)
                continue
            if len(self._sending) + len(picked) >= self._parallel:
                break
            picked.append((job_id, envelope, session))
        return picked, wake

    def _run(self) -> None:
        while True:
            with self._changed:
                while True:
                    picked, wake = self._ready(time.monotonic())
                    if picked:
                        break
                    self._changed.wait(None if wake is None else max(0.0, wake - time.monotonic()))
                for job_id, envelope, session in picked:
                    self._sending.add(session)
                    self._hand_over(job_id, envelope, session)

    def _hand_over(self, job_id: str, envelope: Any, session: str) -> None:
        """Give one send to a sender thread, starting one if none is idle (under the lock)."""
        self._sends.append((job_id, envelope, session))
        if len(self._sends) > self._idle_senders and self._senders < self._max_senders:
            self._senders += 1
            threading.Thread(target=self._sender, name="omray-outbox-send", daemon=True).start()
        self._send_ready.notify()

    def _sender(self) -> None:
        while True:
            with self._lock:
                self._idle_senders += 1
                while not self._sends:
                    self._send_ready.wait()
                self._idle_senders -= 1
                items = [self._sends.popleft()]
                if self._send_many is not None and time.monotonic() >= self._batches_after:
                    while self._sends and len(items) < self._batch:
                        items.append(self._sends.popleft())
            try:
                if len(items) == 1:
                    self._send_one(*items[0])
                else:
                    self._send_batch(items)
            except Exception as exc:  # a sender thread never dies: the next send needs it
                logger.error(
                    "hook job send failed",
                    extra={"job_id": items[0][0], "jobs": len(items), "error_class": type(exc).__name__},
                )
                with self._changed:
                    for _job_id, _envelope, session in items:
                        self._sending.discard(session)
                    self._changed.notify_all()

    def _send_batch(self, items: list[tuple[str, Any, str]]) -> None:
        assert self._send_many is not None
        try:
            answers = self._send_many([envelope for _, envelope, _ in items], self._call_timeout_s)
            if len(answers) != len(items):
                raise RuntimeUnavailableError("the queue answered a batch with another number of job ids")
        except RuntimeNotRunningError as exc:  # not taken: each retried after its pause
            for job_id, _envelope, session in items:
                self._not_taken(job_id, session, exc)
            return
        except Exception as exc:
            # Rejected, or a runtime older than ``dispatch_many``: job by job, so that one bad job
            # holds up no other and an older runtime still gets every job.
            if isinstance(exc, RuntimeMethodMissingError):
                with self._lock:
                    self._batches_after = time.monotonic() + BATCH_PAUSE_S
            for item in items:
                self._send_one(*item)
            return
        for (job_id, envelope, session), accepted in zip(items, answers, strict=True):
            self._taken(job_id, envelope, session, accepted)

    def _send_one(self, job_id: str, envelope: Any, session: str) -> None:
        try:
            accepted = self._send(envelope, self._call_timeout_s)
        except Exception as exc:  # retried after a pause; the hook never sees it
            self._not_taken(job_id, session, exc)
            return
        self._taken(job_id, envelope, session, accepted)

    def _not_taken(self, job_id: str, session: str, exc: Exception) -> None:
        logger.info("hook job not accepted yet", extra={"job_id": job_id, "error_class": type(exc).__name__})
        with self._changed:
            backoff = self._backoff.get(session, 0.2)
            self._not_before[session] = time.monotonic() + backoff
            self._backoff[session] = min(backoff * 2, 5.0)
            self._sending.discard(session)
            if self._pending and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name="omray-outbox", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def _taken(self, job_id: str, envelope: Any, session: str, accepted: str) -> None:
        with self._changed:
            self._backoff.pop(session, None)
            self._not_before.pop(session, None)
            self._sending.discard(session)
            if self._pending.get(job_id) is envelope:
                self._remove_pending(job_id)
            self._accepted[job_id] = accepted
            if len(self._accepted) > self._limit:  # answers nobody waits for any more
                self._accepted.pop(next(iter(self._accepted)))
            for answered in self._waiters.pop(job_id, []):
                answered.set()
            self._changed.notify_all()
