"""QueueActor: the thin shell that executes :class:`actors.queue.state.QueueState` commands.

It owns the durable ``extension_agent`` queue of one runtime. Every accepted job is written to the
queue's own SQLite file (the queue is that file's one writer) *before* ``dispatch`` returns, so no
crash loses an accepted job; the pure state machine decides lanes, order, coalescing and retries.

Two kinds of threads, one lock that covers only the in-memory state (never a store call):

- ``dispatch`` callers (the actor serves many at once) number the job, hand it to the state
  machine, queue its durable write and wait for the commit that includes it;
- the *loop* thread does the rest, one step at a time: it takes the worker outcomes that arrived
  and feeds them to the state machine, then commits every write queued so far (accepts, starts,
  retries, finishes, give-ups, in order) in ONE transaction, wakes the callers it made durable and
  carries out what the writes allow (starting workers), in commit order. ``dispatch`` callers only
  wait, and those that arrive while a commit is in flight ride in the next one (group commit;
  callers committing in turn themselves measured slower under load, as each commit then carried
  fewer writes). One thread for all of it, woken by whatever gave it work, means one thread
  switch per step: a lane's next job is started by the same step that recorded its predecessor's
  outcome. A pool that cannot tell the queue when outcomes arrive gets a *collector* thread that
  waits for them instead.

The guarantees are those of one write per job: a job is durable before its ``dispatch`` returns,
a start is durable before the worker is called, a write batch that fails is retried whole and in
order before anything newer (so the durable rows never diverge from the state), and every write
is idempotent, so repeating a batch whose reply was lost is safe.

Length: about 830 lines, on purpose: the threads share one lock, the commit generations and the
unwritten writes, so their code stays in one class; the decisions live in ``state.py``.
"""

from __future__ import annotations

import collections
import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Protocol

from pydantic import ValidationError

from actors.queue.figures import ModelUsage, QueueFigures, queue_figures, usage_of
from actors.queue.retry import RetryPolicy
from actors.queue.state import (
    AlreadyQueued,
    Command,
    Dispatch,
    EmitJobFailed,
    GiveUp,
    MarkSucceeded,
    OutcomeIgnored,
    QueueState,
    ScheduleRetry,
    StoredJobState,
    WakeAt,
)
from persistence.store import (
    JobAccepted,
    JobFinished,
    JobGivenUp,
    JobRetry,
    JobStarted,
    JobWrite,
    RuntimeEventWrite,
)
from protocol.errors import InvalidPayloadError, StorageError
from protocol.jobs import JobEnvelope
from protocol.outcomes import JOB_OUTCOME_ADAPTER, JobFailedEvent, JobSucceeded

logger = logging.getLogger("omray.queue")

TICK_S = 0.05
"""Longest wait for a worker outcome in one collector step (retry timers are checked this often)."""

DURABLE_WAIT_S = 60.0
"""Longest a ``dispatch`` waits for the commit of its job before it raises (the job stays queued)."""


class QueueStorePort(Protocol):
    """The queue-database writes the actor needs (a ``persistence.Store`` or a StoreActor proxy)."""

    def next_job_seq(self) -> int: ...
    def apply_job_writes(self, writes: Sequence[JobWrite]) -> int: ...
    def list_unfinished_jobs(self) -> Sequence[Any]: ...
    def runtime_events(
        self, run_id: str, after_seq: int = 0, db_path: str | None = None
    ) -> Sequence[Any]: ...
    def job_counts(self) -> Any: ...


class QueueMetricsPort(Protocol):
    """Where the queue reports its numbers (Ray metrics in a cluster; nothing in unit tests)."""

    def queue_figures(self, figures: QueueFigures) -> None: ...
    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None: ...
    def job_failed(self, handler_id: str, reason: str) -> None: ...
    def model_usage(self, handler_id: str, usage: ModelUsage) -> None: ...


class NoMetrics:
    """A metrics port that records nothing."""

    def queue_figures(self, figures: QueueFigures) -> None:
        """Ignore."""

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        """Ignore."""

    def job_failed(self, handler_id: str, reason: str) -> None:
        """Ignore."""

    def model_usage(self, handler_id: str, usage: ModelUsage) -> None:
        """Ignore."""


class WorkerPoolPort(Protocol):
    """Starts attempts on workers and collects outcomes (``None`` = the worker died mid-job).

    A pool may also offer ``start_many(starts) -> job seqs not sent`` (each start a ``handler_id,
    job_seq, envelope, attempt`` tuple); the queue then hands it every start of one commit at once.
    And it may offer ``on_ready(callback)``: the pool then calls ``callback()`` (cheap, never
    blocking) each time outcomes become ready to ``poll``, and the queue's loop thread collects them
    itself, ``poll(0)``, instead of a collector thread waiting in ``poll``.
    """

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None: ...
    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        """Finished attempts, waiting up to ``timeout_s`` for the first one."""
        ...


DISPATCH_WINDOW: Final = 1000
"""Recent ``dispatch`` calls (and group commits) whose times ``status()["commits"]`` summarizes."""

FINISH_LINGER_S: Final = 0.005
"""How long the loop holds writes that only record successes (no caller waits on them, and no
start rides with them) for the next dispatch to share their transaction: one agent's next job then
costs one commit, not one behind the last job's finish. A crash meanwhile re-runs the job, as any
crash between an outcome and its write does (handlers are idempotent)."""

MAX_DISPATCH_BATCH: Final = 256
"""Most jobs one ``dispatch_many`` call may carry (a client sends what its hooks have waiting)."""


def _envelope_of(command: Dispatch) -> dict[str, Any]:
    """What a worker receives for one start."""
    return JobEnvelope(job_id=command.job_id, payload=command.payload).model_dump()


def iso_utc(epoch_s: float) -> str:
    """UTC ISO-8601 text of an epoch time."""
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat()


def epoch_of(iso: str | None) -> float | None:
    """Epoch seconds of an ISO-8601 text (``None`` stays ``None``)."""
    return None if iso is None else datetime.fromisoformat(iso).timestamp()


@dataclass(frozen=True, slots=True)
class _Accept:
    """A job the state machine has taken whose row is not durable yet (its ``dispatch`` waits)."""

    job_seq: int
    envelope: JobEnvelope


Pending = Command | _Accept
"""Something queued for the loop: a job to store, or a command to record and carry out."""


class QueueActor:
    """The durable job queue of one runtime, its single dispatcher.

    Guarantees: a job is durable before ``dispatch`` returns; within a lane (one session of one
    database, or one database's index work) jobs start in acceptance order and never overlap, and
    lanes run in parallel up to ``max_in_flight`` runs and the size of each worker pool (the
    queue's own sequence numbers decide, never Ray's delivery order); a job leaves the queue only
    when its handler succeeded or its 4 attempts are used up, then a sanitized ``job_failed`` event
    is recorded for its session. Safe to call from many threads: the lock guards the in-memory
    state only, so a caller waits for the one commit carrying its job and for nothing else.

    Writes and worker starts are kept, in order, until they succeeded: a write batch that fails (a
    StoreActor restarting, a timeout) is put back whole at the front and retried before anything
    newer, so the durable rows catch up with the in-memory state instead of diverging from it (a
    job stuck as running, a finished job never recorded, a lost job-failed event).

    With ``start_loop=False`` no thread runs: tests drive :meth:`commit`, :meth:`collect` and
    :meth:`tick` by hand (``dispatch`` then commits its own job before it returns).
    """

    def __init__(
        self,
        store: QueueStorePort,
        workers: WorkerPoolPort,
        *,
        policy: RetryPolicy | None = None,
        max_in_flight: int = 1,
        capacity: Mapping[str, int] | None = None,
        coalesce: bool = True,
        clock: Callable[[], float] = time.time,
        start_loop: bool = True,
        metrics: QueueMetricsPort | None = None,
    ) -> None:
        self._store = store
        self._workers = workers
        self._metrics: QueueMetricsPort = metrics or NoMetrics()
        self._clock = clock
        # Guards the state machine and the bookkeeping below; never held across a store or Ray call.
        self._lock = threading.Lock()
        self._durable = threading.Condition(self._lock)
        self._commit_lock = threading.Lock()  # one commit at a time, in order
        # Wakes the loop thread: a job accepted, an outcome ready, capacity changed, a start lost.
        self._commit_wanted = threading.Event()
        self._depth_reported = 0.0  # when the queue-depth gauge was last set (at most once a tick)
        self._stop = threading.Event()
        self._recent_failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self._in_flight_attempts: dict[int, tuple[str, int, str, float]] = {}
        self._completed = 0
        self._coalesced = 0
        self._commits = collections.Counter[str]()  # transactions, writes, microseconds (the loop only)
        # How long recent ``dispatch`` calls took in this process, accept to durable (milliseconds).
        self._dispatch_ms: collections.deque[float] = collections.deque(maxlen=DISPATCH_WINDOW)
        self._commit_ms: collections.deque[float] = collections.deque(maxlen=DISPATCH_WINDOW)
        # What the loop has not written yet, in order, each with the time it was issued (so a
        # repeated write is byte-identical to the first try).
        self._unwritten: collections.deque[tuple[Pending, float]] = collections.deque()
        self._committing = False  # a batch taken from ``_unwritten`` is being written or carried out
        # Commit generations: callers wait until the generation that carries their job is durable.
        self._generation = 1
        self._durable_generation = 0
        self._unwritten_accepts: dict[int, int] = {}  # job_seq -> generation carrying its accept
        self._threads: list[threading.Thread] = []
        rows = [
            StoredJobState(
                job_seq=row.job_seq,
                envelope=row.envelope,
                status=row.state,
                attempts=row.attempts,
                not_before=epoch_of(row.not_before),
                last_reason=row.failure_reason,
            )
            for row in store.list_unfinished_jobs()
        ]
        self._next_seq = store.next_job_seq()
        self._state, commands = QueueState.restore(
            rows, clock(), policy, max_in_flight=max_in_flight, capacity=capacity, coalesce=coalesce
        )
        now = clock()
        self._enqueue(commands, now)
        self._enqueue(self._state.next_dispatch(now), now)
        self.commit()
        if rows:
            logger.info("queue restored", extra={"unfinished_jobs": len(rows)})
        on_ready = getattr(workers, "on_ready", None)
        self._collects_in_loop = start_loop and on_ready is not None
        if start_loop:
            targets: list[tuple[Callable[[], None], str]] = [(self._loop_forever, "omray-queue-loop")]
            if on_ready is None:
                targets.append((self._collect_forever, "omray-queue-collect"))
            else:
                on_ready(self._commit_wanted.set)
                self._commit_wanted.set()  # outcomes of the starts just sent may be waiting already
            for target, name in targets:
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)

    # --- public API (documented actor-handle methods) ------------------------------------------

    def dispatch(self, envelope: JobEnvelope | Mapping[str, Any]) -> str:
        """Accept a job durably and return its job id; a job key already pending is not queued twice."""
        try:
            job = envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
        except Exception as exc:
            raise InvalidPayloadError(f"invalid job envelope ({type(exc).__name__})") from None
        started = time.perf_counter()
        generation = self._accept(job)
        if generation is not None:
            self._await_durable(generation)
        self._dispatch_ms.append((time.perf_counter() - started) * 1000.0)
        return job.job_id

    def dispatch_many(self, envelopes: Sequence[JobEnvelope | Mapping[str, Any]]) -> list[str]:
        """Accept several jobs durably in one call, in the order given; their job ids, in that order.

        What ``dispatch`` does for each, with one wait for the one commit that carries them all (a
        client with many agents' hooks waiting sends them together). All or nothing on bad input:
        one envelope that does not validate, or more than ``MAX_DISPATCH_BATCH``, rejects the call
        and accepts none of them.
        """
        if isinstance(envelopes, str | bytes | Mapping) or not isinstance(envelopes, Sequence):
            raise InvalidPayloadError(
                f"dispatch_many takes a list of job envelopes, not {type(envelopes).__name__}"
            )
        if len(envelopes) > MAX_DISPATCH_BATCH:
            raise InvalidPayloadError(
                f"at most {MAX_DISPATCH_BATCH} jobs per dispatch_many, got {len(envelopes)}"
            )
        jobs: list[JobEnvelope] = []
        for index, envelope in enumerate(envelopes):
            try:
                jobs.append(
                    envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
                )
            except Exception as exc:
                raise InvalidPayloadError(
                    f"invalid job envelope at index {index} ({type(exc).__name__}); no job accepted"
                ) from None
        started = time.perf_counter()
        generation = self._accept(*jobs)
        if generation is not None:
            self._await_durable(generation)
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        self._dispatch_ms.extend(elapsed_ms for _ in jobs)
        return [job.job_id for job in jobs]

    def _accept(self, *jobs: JobEnvelope) -> int | None:
        """Number the jobs, queue them and their starts (if slots are free); the generation to wait for.

        ``None``: every one of them is pending or running already, and durable.
        """
        wait: int | None = None
        with self._lock:
            now = self._clock()
            for job in jobs:
                existing = self._state.active_seq(job.job_id, job.payload.db_path)
                if existing is not None:
                    pending = self._unwritten_accepts.get(existing)
                    if pending is not None:
                        wait = max(wait or 0, pending)
                    continue
                job_seq, self._next_seq = self._next_seq, self._next_seq + 1
                self._state.accept(job, job_seq, now)  # a new key: no notice to act on
                self._unwritten.append((_Accept(job_seq, job), now))
                self._unwritten_accepts[job_seq] = self._generation
                wait = self._generation
            # Their starts (or other lanes') ride in the same transaction as the accepts.
            self._enqueue(self._state.next_dispatch(now), now)
        self._commit_wanted.set()
        return wait

    def _await_durable(self, generation: int) -> None:
        """Return once the commit carrying ``generation`` is durable.

        The loop thread writes it, in one transaction with whatever else arrived meanwhile:
        callers never commit themselves, so concurrent dispatches share commits instead of taking
        turns at the store (and at the GIL). Without the threads (``start_loop=False``) the caller
        commits; a commit of its own that fails raises, and the job stays queued.
        """
        if not self._threads:
            self.commit()
        deadline = time.monotonic() + DURABLE_WAIT_S
        with self._durable:
            while self._durable_generation < generation:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    # The job stays queued and is written once the store answers; a repeated
                    # dispatch of it finds it and returns.
                    raise StorageError("the queue store did not confirm the job in time; dispatch it again")
                self._durable.wait(remaining)

    def status(self) -> dict[str, Any]:
        """Queue depth, runs in flight, lanes, recent failures and counters (ids and counts only)."""
        with self._lock:
            now = self._clock()
            in_flight = [
                {
                    "job_seq": seq,
                    "job_id": job_id,
                    "attempt": attempt,
                    "handler_id": handler,
                    "running_s": round(now - started, 3),
                }
                for seq, (job_id, attempt, handler, started) in self._in_flight_attempts.items()
            ]
            snapshot = self._state.snapshot()
            return {
                "figures": self._figures().as_dict(),
                "depth": self._state.depth,
                "in_flight": in_flight,
                "max_in_flight": self._state.max_in_flight,
                "lanes": snapshot["lanes"],
                "busy_lanes": snapshot["busy_lanes"],
                "capacity": snapshot["capacity"],
                "completed_since_start": self._completed,
                "coalesced_since_start": self._coalesced,
                "recent_failures": list(self._recent_failures),
                "unwritten": len(self._unwritten),
                "commits": self._commit_figures(),
                "state": snapshot,
                "loop_alive": bool(self._threads) and all(t.is_alive() for t in self._threads),
            }

    def figures(self) -> QueueFigures:
        """Depth, runs in flight, slots and lanes now: what ``status()`` and the metrics both report."""
        with self._lock:
            return self._figures()

    def _figures(self) -> QueueFigures:
        """:meth:`figures`, under the lock."""
        lanes, busy_lanes = self._state.lane_counts()
        return queue_figures(
            depth=self._state.depth,
            in_flight=self._state.in_flight,
            max_in_flight=self._state.max_in_flight,
            capacity=self._state.capacity,
            lanes=lanes,
            busy_lanes=busy_lanes,
        )

    def _commit_figures(self) -> dict[str, float]:
        """Group commits since start: transactions, writes, mean writes and milliseconds per transaction."""
        count = self._commits["transactions"]
        recent = sorted(self._dispatch_ms)
        commits = sorted(self._commit_ms)
        return {
            "transactions": count,
            "writes": self._commits["writes"],
            "writes_per_transaction": round(self._commits["writes"] / count, 2) if count else 0.0,
            "ms_per_transaction": round(self._commits["micros"] / 1000 / count, 3) if count else 0.0,
            # In this process, from accept to durable, over the last ``DISPATCH_WINDOW`` dispatches:
            # next to a caller's figure, what the transport and the caller's own process add.
            "dispatch_ms_p50": round(recent[len(recent) // 2], 3) if recent else 0.0,
            "dispatch_ms_p95": round(recent[int(len(recent) * 0.95)], 3) if recent else 0.0,
            # The store write of the last ``DISPATCH_WINDOW`` group commits (a slow one holds every
            # dispatch it carries and every one that arrives meanwhile).
            "commit_ms_p95": round(commits[int(len(commits) * 0.95)], 3) if commits else 0.0,
            "commit_ms_max": round(commits[-1], 3) if commits else 0.0,
        }

    def waiting_by_handler(self) -> dict[str, int]:
        """Runs ready to start that wait for a free slot, by handler id (what autoscaling grows on)."""
        with self._lock:
            return self._state.waiting_by_handler(self._clock())

    def set_capacity(self, handler_id: str, size: int) -> None:
        """The pool serving ``handler_id`` now runs ``size`` jobs at once; start what that allows."""
        with self._lock:
            self._state.set_capacity(handler_id, size)
            now = self._clock()
            self._enqueue(self._state.next_dispatch(now), now)
        self._commit_wanted.set()

    def runtime_events(
        self, run_id: str, after_seq: int = 0, db_path: str | None = None
    ) -> list[dict[str, Any]]:
        """Sanitized runtime events (e.g. ``extension_agent.job_failed``) recorded for a session: of
        database ``db_path`` only, when given. Each names its database (``db_path``)."""
        return [event.model_dump() for event in self._store.runtime_events(run_id, after_seq, db_path)]

    def job_counts(self) -> dict[str, int]:
        """Durable job counts by state."""
        counts = self._store.job_counts()
        return dict(counts.model_dump()) if hasattr(counts, "model_dump") else dict(counts)

    def is_idle(self) -> bool:
        """True when no job is waiting or running."""
        with self._lock:
            return (
                self._state.depth == 0
                and self._state.in_flight == 0
                and not self._unwritten
                and not self._committing
            )

    def stop(self) -> None:
        """Stop the loop (and collector) thread (tests and shutdown; a restart starts new ones)."""
        self._stop.set()
        self._commit_wanted.set()
        for thread in self._threads:
            thread.join(timeout=5)

    # --- the threads -----------------------------------------------------------------------------

    def _loop_forever(self) -> None:
        delay = 0.0
        while not self._stop.is_set():
            # Cleared before the work, so anything that sets it meanwhile wakes the next step.
            self._commit_wanted.wait(TICK_S)
            self._commit_wanted.clear()
            try:
                self._collect_ready()  # also every tick: retries come due with no outcome
                while not self._stop.is_set():
                    if self._only_finishes():
                        # Nobody waits for a finish: a caller's job arriving meanwhile shares its commit.
                        self._commit_wanted.wait(FINISH_LINGER_S)
                        self._commit_wanted.clear()
                        self._collect_ready()
                    if not self.commit():
                        break
                    self._collect_ready()
                delay = 0.0
            except Exception as exc:
                # The loop must never die: a failed batch (e.g. the store busy) is logged, stays
                # queued in order, and is retried after a growing pause; outcomes that arrive
                # meanwhile wait in the pool.
                logger.error("queue loop step failed", extra={"error_class": type(exc).__name__})
                delay = min(max(delay * 2, 0.05), 2.0)
                self._stop.wait(delay)

    def _collect_ready(self) -> None:
        """Apply the outcomes the pool holds, without waiting (when the loop collects them itself).

        A step that fails is logged, and the loop goes on to commit what is queued: collecting
        must not hold up the callers' commits (the next step collects again)."""
        if not self._collects_in_loop:
            return
        try:
            self.collect(0.0)
        except Exception as exc:
            logger.error("queue collect step failed", extra={"error_class": type(exc).__name__})

    def _only_finishes(self) -> bool:
        """True when every write waiting is a success record: no caller and no start waits on them."""
        with self._lock:
            return bool(self._unwritten) and all(
                isinstance(item, MarkSucceeded) for item, _ in self._unwritten
            )

    def _collect_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.collect(TICK_S)
            except Exception as exc:
                # The collector must never die either: a failed step is logged and the next one
                # collects again (outcomes already applied have queued their writes).
                logger.error("queue loop step failed", extra={"error_class": type(exc).__name__})
                self._stop.wait(0.5)

    def commit(self) -> bool:
        """One group commit: every queued write in ONE transaction, then what they allow.

        Wakes the ``dispatch`` callers whose jobs it made durable, then starts the runs it recorded.
        Raises when the store write fails; the batch then stays queued, in order, ahead of anything
        newer. Returns False when there was nothing to write.
        """
        with self._commit_lock:
            return self._commit_locked()

    def _commit_locked(self) -> bool:
        with self._lock:
            if not self._unwritten:
                return False
            batch = list(self._unwritten)
            self._unwritten.clear()
            self._committing = True  # out of ``_unwritten``, not durable or carried out yet: not idle
            generation = self._generation
            self._generation += 1
        started = time.perf_counter()
        try:
            writes = self._writes_for(batch)  # inside: a batch that fails here is put back too
            self._store.apply_job_writes(writes)
        except BaseException:
            with self._durable:
                self._unwritten.extendleft(reversed(batch))
                self._committing = False
                self._durable.notify_all()  # waiting callers try the next commit themselves
            raise
        try:
            with self._durable:
                self._durable_generation = generation
                for item, _issued in batch:
                    if isinstance(item, _Accept):
                        self._unwritten_accepts.pop(item.job_seq, None)
                self._durable.notify_all()
            elapsed = time.perf_counter() - started
            self._commits.update(transactions=1, writes=len(writes), micros=round(elapsed * 1e6))
            self._commit_ms.append(elapsed * 1000.0)
            if self._threads and self._wakes_callers_and_starts(batch):
                # Let the callers just woken answer before the starts are sent: sending holds the
                # GIL for some 0.3 ms, which each caller would otherwise wait out before it could
                # return (alternating runs: one agent's dispatch p50 0.2 ms lower, same throughput).
                time.sleep(0)
            self._carry_out(batch)  # under the commit lock: starts go out in commit order
        finally:
            with self._lock:
                self._committing = False
        return True

    @staticmethod
    def _wakes_callers_and_starts(batch: Sequence[tuple[Pending, float]]) -> bool:
        """True when a batch made some caller's job durable and also starts a run."""
        kinds = {type(item) for item, _ in batch}
        return _Accept in kinds and Dispatch in kinds

    def _carry_out(self, batch: Sequence[tuple[Pending, float]]) -> None:
        """Start the runs of a durable batch and do what its other commands do; never raises, so no
        start of it is skipped (a start that fails is a lost attempt, retried by policy)."""
        starts: list[Dispatch] = []
        for item, _issued in batch:
            if isinstance(item, Dispatch):
                starts.append(item)  # a commit's starts go out together (one lane has one at most)
                continue
            try:
                self._effect(item)
            except Exception as exc:  # a log or metric failing must not keep a start from going out
                logger.error("queue effect failed", extra={"error_class": type(exc).__name__})
        start_many = getattr(self._workers, "start_many", None)
        if start_many is None or len(starts) < 2:
            for command in starts:
                self._start(command)
            return
        self._mark_in_flight(starts)
        failed: list[Dispatch] = []
        sends: list[tuple[str, int, dict[str, Any], int]] = []
        for command in starts:
            try:
                sends.append((command.handler_id, command.job_seq, _envelope_of(command), command.attempt))
            except Exception:
                failed.append(command)
        try:
            unsent = set(start_many(sends))
        except Exception:
            unsent = {job_seq for _, job_seq, _, _ in sends}
        failed.extend(command for command in starts if command.job_seq in unsent)
        for command in failed:
            self._start_lost(command, "StartFailed")

    def collect(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for outcomes, apply them and queue what they free (and due retries)."""
        finished = self._workers.poll(timeout_s)
        reports: list[Callable[[], None]] = []
        with self._lock:
            # Apply every collected outcome before anything is written: the pool has handed them
            # over, so one failing write must not drop the outcomes after it.
            now = self._clock()
            for job_seq, outcome in finished:
                self._enqueue(self._apply_outcome(job_seq, outcome, now, reports), now)
            self._enqueue(self._state.next_dispatch(now), now)
            wanted = bool(self._unwritten)
            report_figures = now - self._depth_reported >= TICK_S or not self._threads
            figures = self._figures() if report_figures else None
        if wanted and not self._collects_in_loop:
            self._commit_wanted.set()  # the loop thread commits them (it called this itself otherwise)
        for report in reports:
            self._safe_metric(report)
        if figures is not None:
            self._depth_reported = now  # gauges: once a tick is enough, and saves the loop a call
            self._safe_metric(self._metrics.queue_figures, figures)
        return len(finished)

    def tick(self, timeout_s: float) -> int:
        """One step of both threads, for callers that drive the queue by hand (tests)."""
        self.commit()
        collected = self.collect(timeout_s)
        self.commit()
        return collected

    def _apply_outcome(
        self, job_seq: int, outcome: dict[str, Any] | None, now: float, reports: list[Callable[[], None]]
    ) -> list[Command]:
        started = self._in_flight_attempts.pop(job_seq, None)
        attempt = started[1] if started else None
        parsed = None
        if outcome is not None:
            try:
                parsed = JOB_OUTCOME_ADAPTER.validate_python(outcome)
            except ValidationError:
                logger.error("malformed worker outcome", extra={"job_seq": job_seq})
        if parsed is not None and started is not None and parsed.job_id != started[0]:
            # An answer about another job says nothing about this run: a lost attempt, retried,
            # rather than an ignored one that would hold the run's lane and slot for good.
            logger.error("worker outcome names another job", extra={"job_seq": job_seq})
            parsed = None
        if parsed is None:
            commands = self._state.on_worker_lost(job_seq, now, attempt=attempt)
            kind = "worker_lost"
        else:
            commands = self._state.on_outcome(job_seq, parsed, now, attempt=attempt)
            kind = parsed.kind
            if isinstance(parsed, JobSucceeded) and started is not None:
                reports.append(functools.partial(self._report_tokens, started[2], parsed.detail))
        if started is not None:
            reports.append(
                functools.partial(
                    self._metrics.attempt_finished, started[2], kind, now - started[3], started[1]
                )
            )
        return commands

    def _report_tokens(self, handler_id: str, detail: Mapping[str, Any]) -> None:
        for usage in usage_of(handler_id, detail):
            self._safe_metric(self._metrics.model_usage, handler_id, usage)

    @staticmethod
    def _safe_metric(record: Callable[..., None], *args: Any) -> None:
        # Metrics never hurt work: a failing exporter is logged and ignored.
        try:
            record(*args)
        except Exception as exc:
            logger.warning("metric update failed", extra={"error_class": type(exc).__name__})

    # --- command execution -------------------------------------------------------------------------

    def _enqueue(self, commands: Sequence[Command], now: float) -> None:
        """Queue commands for the loop (under the lock); notices need no write and are dropped."""
        for command in commands:
            if not isinstance(command, AlreadyQueued | OutcomeIgnored | WakeAt):
                self._unwritten.append((command, now))

    def _writes_for(self, batch: Sequence[tuple[Pending, float]]) -> list[JobWrite]:
        writes: list[JobWrite] = []
        for index, (command, now) in enumerate(batch):
            at = iso_utc(now)
            if isinstance(command, _Accept):
                writes.append(JobAccepted(job_seq=command.job_seq, envelope=command.envelope, accepted_at=at))
            elif isinstance(command, Dispatch):
                # Durable first: if we die after this write, the restart re-dispatches the run.
                writes.extend(JobStarted(job_seq=seq, attempt=n, started_at=at) for seq, n in command.covered)
            elif isinstance(command, ScheduleRetry):
                writes.append(
                    JobRetry(
                        job_seq=command.job_seq,
                        not_before=iso_utc(command.not_before),
                        failure_reason=command.reason,
                    )
                )
            elif isinstance(command, MarkSucceeded):
                writes.append(JobFinished(job_seq=command.job_seq, state="succeeded", finished_at=at))
            elif isinstance(command, GiveUp):
                emit = self._paired_event(batch, index, command)
                if emit is None:
                    writes.append(
                        JobFinished(
                            job_seq=command.job_seq,
                            state="failed",
                            finished_at=at,
                            failure_reason=command.reason,
                        )
                    )
                else:
                    # Giving up and its failure event are one write: no crash in between.
                    writes.append(
                        JobGivenUp(
                            job_seq=command.job_seq,
                            finished_at=at,
                            failure_reason=command.reason,
                            run_id=emit.run_id,
                            event_type=JobFailedEvent.event_type,
                            event_payload=emit.event.model_dump(),
                            db_path=emit.db_path,
                        )
                    )
            elif isinstance(command, EmitJobFailed) and not self._is_paired(batch, index):
                writes.append(
                    RuntimeEventWrite(
                        run_id=command.run_id,
                        event_type=JobFailedEvent.event_type,
                        payload=command.event.model_dump(),
                        created_at=at,
                        db_path=command.db_path,
                    )
                )
        return writes

    @staticmethod
    def _paired_event(
        batch: Sequence[tuple[Pending, float]], index: int, command: GiveUp
    ) -> EmitJobFailed | None:
        following = batch[index + 1][0] if index + 1 < len(batch) else None
        if isinstance(following, EmitJobFailed) and following.event.job_id == command.job_id:
            return following
        return None

    @staticmethod
    def _is_paired(batch: Sequence[tuple[Pending, float]], index: int) -> bool:
        previous = batch[index - 1][0] if index > 0 else None
        command = batch[index][0]
        return (
            isinstance(previous, GiveUp)
            and isinstance(command, EmitJobFailed)
            and command.event.job_id == previous.job_id
        )

    def _effect(self, command: Pending) -> None:
        """What a command other than a start does once its writes are durable (no store access here;
        :meth:`_carry_out` sends the starts)."""
        if isinstance(command, MarkSucceeded):
            self._completed += 1
        elif isinstance(command, ScheduleRetry):
            logger.warning(
                "job attempt failed; retry scheduled",
                extra={"job_id": command.job_id, "attempts": command.attempts, "reason": command.reason},
            )
        elif isinstance(command, EmitJobFailed):
            self._report_job_failed(command.run_id, command.event, self._clock())

    def _start(self, command: Dispatch) -> None:
        self._mark_in_flight([command])
        try:
            self._workers.start(command.handler_id, command.job_seq, _envelope_of(command), command.attempt)
        except Exception as exc:
            self._start_lost(command, type(exc).__name__)

    def _mark_in_flight(self, commands: Sequence[Dispatch]) -> None:
        """Record attempts as running before they are sent (an outcome may arrive at once)."""
        with self._lock:
            now = self._clock()
            for command in commands:
                self._in_flight_attempts[command.job_seq] = (
                    command.job_id,
                    command.attempt,
                    command.handler_id,
                    now,
                )
                self._coalesced += len(command.covered) - 1

    def _start_lost(self, command: Dispatch, error_class: str) -> None:
        """The attempt never reached a worker: it counts as a lost one (retried by policy), never
        as a job left "running" with nobody to report on it."""
        logger.error(
            "job attempt could not start", extra={"job_id": command.job_id, "error_class": error_class}
        )
        try:
            with self._lock:
                self._in_flight_attempts.pop(command.job_seq, None)
                now = self._clock()
                self._enqueue(self._state.on_worker_lost(command.job_seq, now, attempt=command.attempt), now)
        except Exception as exc:  # never keeps the batch's other starts from going out
            logger.error(
                "lost attempt not recorded",
                extra={"job_id": command.job_id, "error_class": type(exc).__name__},
            )
        self._commit_wanted.set()

    def _report_job_failed(self, run_id: str, event: JobFailedEvent, now: float) -> None:
        payload = event.model_dump()
        self._recent_failures.append({"run_id": run_id, **payload, "at": iso_utc(now)})
        self._safe_metric(self._metrics.job_failed, event.handler_id, event.reason)
        logger.error(
            "job failed after retrying",
            extra={
                "run_id": run_id,
                "job_id": event.job_id,
                "handler_id": event.handler_id,
                "reason": event.reason,
                "attempts": event.attempts,
            },
        )
