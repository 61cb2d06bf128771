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

The threads share one lock, the commit generations and the unwritten writes, so their code stays
in one class; the decisions live elsewhere: ``state.py`` (lanes, order, coalescing, retries),
``writes.py`` (the writes of one commit), ``commits.py`` (what is unwritten, which commit makes
what durable), ``attempts.py`` (what a worker's answer counts as), ``intake.py`` (what a dispatch
accepts) and ``reports.py`` (metrics and logs).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from actors.queue.attempts import InFlight, read_outcome
from actors.queue.commits import Batch, CommitLog, CommitStats
from actors.queue.figures import QueueFigures, queue_figures
from actors.queue.intake import parse_envelope, parse_envelopes
from actors.queue.ports import NoMetrics, QueueMetricsPort, QueueStorePort, WorkerPoolPort
from actors.queue.reports import QueueReports, safe_metric
from actors.queue.retry import RetryPolicy
from actors.queue.state import Command, Dispatch, QueueState
from actors.queue.writes import wakes_callers_and_starts, writes_for
from protocol.errors import StorageError
from protocol.jobs import JobEnvelope
from protocol.outcomes import JobSucceeded

logger = logging.getLogger("omray.queue")

TICK_S = 0.05
"""Longest wait for a worker outcome in one collector step (retry timers are checked this often)."""

DURABLE_WAIT_S = 60.0
"""Longest a ``dispatch`` waits for the commit of its job before it raises (the job stays queued)."""

FINISH_LINGER_S: Final = 0.005
"""How long the loop holds writes that only record successes (no caller waits on them, and no
start rides with them) for the next dispatch to share their transaction: one agent's next job then
costs one commit, not one behind the last job's finish. A crash meanwhile re-runs the job, as any
crash between an outcome and its write does (handlers are idempotent)."""


def _envelope_of(command: Dispatch) -> dict[str, Any]:
    """What a worker receives for one start."""
    return JobEnvelope(job_id=command.job_id, payload=command.payload).model_dump()


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
        self._reports = QueueReports(self._metrics, clock)
        self._clock = clock
        # Guards the state machine and the bookkeeping below; never held across a store or Ray call.
        self._lock = threading.Lock()
        self._durable = threading.Condition(self._lock)
        self._commit_lock = threading.Lock()  # one commit at a time, in order
        # Wakes the loop thread: a job accepted, an outcome ready, capacity changed, a start lost.
        self._commit_wanted = threading.Event()
        self._depth_reported = 0.0  # when the queue-depth gauge was last set (at most once a tick)
        self._stop = threading.Event()
        self._in_flight = InFlight()
        self._coalesced = 0
        self._stats = CommitStats()
        # What the loop has not written yet, in order, each with the time it was issued (so a
        # repeated write is byte-identical to the first try), and the commit generations callers
        # wait for.
        self._log = CommitLog()
        self._threads: list[threading.Thread] = []
        rows = list(store.list_unfinished_jobs())
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
        return self._dispatch([parse_envelope(envelope)])[0]

    def dispatch_many(self, envelopes: Sequence[JobEnvelope | Mapping[str, Any]]) -> list[str]:
        """Accept several jobs durably in one call, in the order given; their job ids, in that order.

        What ``dispatch`` does for each, with one wait for the one commit that carries them all (a
        client with many agents' hooks waiting sends them together). All or nothing on bad input:
        one envelope that does not validate, or more than ``MAX_DISPATCH_BATCH``, rejects the call
        and accepts none of them.
        """
        return self._dispatch(parse_envelopes(envelopes))

    def _dispatch(self, jobs: Sequence[JobEnvelope]) -> list[str]:
        started = time.perf_counter()
        generation = self._accept(*jobs)
        if generation is not None:
            self._await_durable(generation)
        self._stats.dispatched((time.perf_counter() - started) * 1000.0, len(jobs))
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
                    pending = self._log.accept_pending(existing)
                    if pending is not None:
                        wait = max(wait or 0, pending)
                    continue
                job_seq, self._next_seq = self._next_seq, self._next_seq + 1
                self._state.accept(job, job_seq, now)  # a new key: no notice to act on
                wait = self._log.accept(job_seq, job, now)
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
            while not self._log.is_durable(generation):
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
            in_flight = self._in_flight.snapshot(now)
            snapshot = self._state.snapshot()
            return {
                "figures": self._figures().as_dict(),
                "depth": self._state.depth,
                "in_flight": in_flight,
                "max_in_flight": self._state.max_in_flight,
                "lanes": snapshot["lanes"],
                "busy_lanes": snapshot["busy_lanes"],
                "capacity": snapshot["capacity"],
                "completed_since_start": self._reports.completed,
                "coalesced_since_start": self._coalesced,
                "recent_failures": list(self._reports.recent_failures),
                "unwritten": len(self._log),
                "commits": self._stats.figures(),
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
        self, session_id: str, after_seq: int = 0, db_path: str | None = None
    ) -> list[dict[str, Any]]:
        """Sanitized runtime events (e.g. ``extension_agent.job_failed``) recorded for a session: of
        database ``db_path`` only, when given. Each names its session (``session_id``) and database
        (``db_path``)."""
        return [event.model_dump() for event in self._store.runtime_events(session_id, after_seq, db_path)]

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
                and not self._log
                and not self._log.committing
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
            return self._log.only_finishes()

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
            batch = self._log.take()  # out of the log, not durable or carried out yet: not idle
        if batch is None:
            return False
        started = time.perf_counter()
        try:
            writes = writes_for(batch.items)  # inside: a batch that fails here is put back too
            self._store.apply_job_writes(writes)
        except BaseException:
            with self._durable:
                self._log.put_back(batch)
                self._durable.notify_all()  # waiting callers try the next commit themselves
            raise
        try:
            with self._durable:
                self._log.written(batch)
                self._durable.notify_all()
            self._stats.committed(len(writes), time.perf_counter() - started)
            if self._threads and wakes_callers_and_starts(batch.items):
                # Let the callers just woken answer before the starts are sent: sending holds the
                # GIL for some 0.3 ms, which each caller would otherwise wait out before it could
                # return (alternating runs: one agent's dispatch p50 0.2 ms lower, same throughput).
                time.sleep(0)
            self._carry_out(batch)  # under the commit lock: starts go out in commit order
        finally:
            with self._lock:
                self._log.committing = False
        return True

    def _carry_out(self, batch: Batch) -> None:
        """Start the runs of a durable batch and do what its other commands do; never raises, so no
        start of it is skipped (a start that fails is a lost attempt, retried by policy)."""
        starts: list[Dispatch] = []
        for item, _issued in batch.items:
            if isinstance(item, Dispatch):
                starts.append(item)  # a commit's starts go out together (one lane has one at most)
                continue
            try:
                self._reports.effect(item)
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
            wanted = bool(self._log)
            report_figures = now - self._depth_reported >= TICK_S or not self._threads
            figures = self._figures() if report_figures else None
        if wanted and not self._collects_in_loop:
            self._commit_wanted.set()  # the loop thread commits them (it called this itself otherwise)
        for report in reports:
            safe_metric(report)
        if figures is not None:
            self._depth_reported = now  # gauges: once a tick is enough, and saves the loop a call
            safe_metric(self._metrics.queue_figures, figures)
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
        sent = self._in_flight.answered(job_seq)
        parsed = read_outcome(job_seq, outcome, sent)
        attempt = sent.attempt if sent else None
        if parsed is None:
            commands = self._state.on_worker_lost(job_seq, now, attempt=attempt)
            kind = "worker_lost"
        else:
            commands = self._state.on_outcome(job_seq, parsed, now, attempt=attempt)
            kind = parsed.kind
            if isinstance(parsed, JobSucceeded) and sent is not None:
                reports.append(functools.partial(self._reports.tokens, sent.handler_id, parsed.detail))
        if sent is not None:
            reports.append(
                functools.partial(
                    self._metrics.attempt_finished, sent.handler_id, kind, now - sent.started, sent.attempt
                )
            )
        return commands

    # --- command execution -------------------------------------------------------------------------

    def _enqueue(self, commands: Sequence[Command], now: float) -> None:
        """Queue commands for the loop (under the lock); notices need no write and are dropped."""
        self._log.add(commands, now)

    def _start(self, command: Dispatch) -> None:
        self._mark_in_flight([command])
        try:
            self._workers.start(command.handler_id, command.job_seq, _envelope_of(command), command.attempt)
        except Exception as exc:
            self._start_lost(command, type(exc).__name__)

    def _mark_in_flight(self, commands: Sequence[Dispatch]) -> None:
        """Record attempts as running before they are sent (an outcome may arrive at once)."""
        with self._lock:
            self._coalesced += self._in_flight.sent(commands, self._clock())

    def _start_lost(self, command: Dispatch, error_class: str) -> None:
        """The attempt never reached a worker: it counts as a lost one (retried by policy), never
        as a job left "running" with nobody to report on it."""
        logger.error(
            "job attempt could not start", extra={"job_id": command.job_id, "error_class": error_class}
        )
        try:
            with self._lock:
                self._in_flight.answered(command.job_seq)
                now = self._clock()
                self._enqueue(self._state.on_worker_lost(command.job_seq, now, attempt=command.attempt), now)
        except Exception as exc:  # never keeps the batch's other starts from going out
            logger.error(
                "lost attempt not recorded",
                extra={"job_id": command.job_id, "error_class": type(exc).__name__},
            )
        self._commit_wanted.set()
