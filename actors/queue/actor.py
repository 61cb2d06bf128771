"""QueueActor: the thin shell that executes :class:`actors.queue.state.QueueState` commands.

It owns the durable ``extension_agent`` queue of one runtime: every accepted job is written to the
queue's own SQLite file (its one writer) *before* ``dispatch`` returns. Two kinds of threads share
one lock that covers only the in-memory state (never a store call):

- ``dispatch`` callers (the actor serves many at once) hand their jobs to the state machine, queue
  their durable writes and wait for the commit that includes them;
- the *loop* thread does the rest, one step at a time: it feeds the worker outcomes that arrived to
  the state machine, then commits every write queued so far in ONE transaction, wakes the callers
  it made durable and starts the runs the writes allow, in commit order. Callers that arrive while
  a commit is in flight ride in the next one (group commit: callers committing in turn themselves
  measured slower under load). One thread, woken by whatever gave it work, means one thread switch
  per step: a lane's next job is started by the step that recorded its predecessor's outcome. A
  pool that cannot tell the queue when outcomes arrive gets a *collector* thread that waits instead.

This module keeps the threads and the public API; the rest lives beside it: ``state.py`` (lanes,
order, coalescing, retries), ``committer.py`` (running the group commits), ``commits.py`` and
``writes.py`` (what one commit writes and makes durable), ``starts.py`` (sending starts, attempts in
flight), ``attempts.py`` (what a worker's answer counts as), ``intake.py`` (what a dispatch accepts)
and ``reports.py`` (status, metrics and logs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from actors.queue.attempts import Answered, Attempt, apply_answer
from actors.queue.commands import Dispatch, EmitJobFailed, GiveUp, MarkSucceeded
from actors.queue.commits import Batch
from actors.queue.committer import GroupCommitter
from actors.queue.figures import QueueFigures, state_figures
from actors.queue.intake import accept_jobs, parse_envelope, parse_envelopes
from actors.queue.ports import NoMetrics, QueueMetricsPort, QueueStorePort, WorkerPoolPort
from actors.queue.redrive import (
    AUTOMATIC_REDRIVES,
    NOT_REDRIVEN,
    Redrive,
    RedriveTracker,
    fingerprint_of,
    sent_under,
)
from actors.queue.reports import QueueReports, queue_status
from actors.queue.retry import RetryPolicy
from actors.queue.starts import Starter
from actors.queue.state import QueueState
from protocol.jobs import JobEnvelope
from protocol.queue_rows import StoredJob

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
    job stuck as running, a finished job never recorded, a lost job-failed event); every write is
    idempotent, so repeating a batch whose reply was lost is safe.

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
        self._reports = QueueReports(metrics or NoMetrics(), clock)
        self._clock = clock
        # Guards the state machine, the commit log and the attempts in flight; never held across a
        # store or Ray call.
        self._lock = threading.Lock()
        self._committer = GroupCommitter(self._lock, store)
        self._log = self._committer.log
        self._starter = Starter(workers, self._lock, clock, self._start_lost)
        # Wakes the loop thread: a job accepted, an outcome ready, capacity changed, a start lost.
        self._commit_wanted = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Failed jobs that wait for their cause to go (actors.queue.redrive). Set up before the
        # restore's first commit: a start that commit sends can be lost and use up a last attempt.
        self._redrive = RedriveTracker()
        self._redrive_due: list[Redrive] = []
        # Failed rows queued again by this process: two re-drives that read the same failed row
        # before either copy was durable (``omray retry`` beside a success) queue it once.
        self._redriven: set[int] = set()
        rows = list(store.list_unfinished_jobs())
        self._next_seq = store.next_job_seq()
        self._state, commands = QueueState.restore(
            rows, clock(), policy, max_in_flight=max_in_flight, capacity=capacity, coalesce=coalesce
        )
        now = clock()
        self._log.add(commands, now)
        self._log.add(self._state.next_dispatch(now), now)
        self.commit()
        # What gave up before this process (and at its restore, just committed) is in the rows.
        for group in store.waiting_for_cause(sorted(NOT_REDRIVEN), AUTOMATIC_REDRIVES):
            self._redrive.restored(group)
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
            # The loop thread writes it, with whatever else arrived meanwhile: callers never commit
            # themselves, so concurrent dispatches share commits instead of taking turns at the store
            # (and the GIL). Without the threads the caller commits; a failing commit raises.
            if not self._threads:
                self.commit()
            self._committer.await_durable(generation, DURABLE_WAIT_S)
        self._committer.stats.dispatched((time.perf_counter() - started) * 1000.0, len(jobs))
        return [job.job_id for job in jobs]

    def _accept(self, *jobs: JobEnvelope) -> int | None:
        """Queue the jobs and their starts; the generation to wait for (``None``: all durable already)."""
        with self._lock:
            wait, self._next_seq = accept_jobs(self._state, self._log, jobs, self._next_seq, self._clock())
            for job in jobs:  # other settings than failed jobs were sent with: they may run now
                due = self._redrive.accepted(job.payload.db_path, fingerprint_of(job))
                if due is not None:
                    self._redrive_due.append(due)
        self._commit_wanted.set()
        return wait

    def status(self) -> dict[str, Any]:
        """Queue depth (and how much of it is delayed), runs in flight, lanes, recent failures, failed
        jobs waiting for their cause to go, and counters (ids and counts only)."""
        waiting = self._store.waiting_for_cause(sorted(NOT_REDRIVEN), AUTOMATIC_REDRIVES)
        with self._lock:
            now = self._clock()
            return queue_status(
                self._state,
                self._reports,
                in_flight=self._starter.in_flight.snapshot(now),
                coalesced=self._starter.coalesced,
                unwritten=len(self._log),
                commits=self._committer.stats.figures(),
                loop_alive=bool(self._threads) and all(t.is_alive() for t in self._threads),
                now=now,
                waiting=waiting,
            )

    def figures(self) -> QueueFigures:
        """Depth, runs in flight, slots and lanes now: what ``status()`` and the metrics both report."""
        with self._lock:
            return state_figures(self._state)

    def waiting_by_handler(self) -> dict[str, int]:
        """Runs ready to start that wait for a free slot, by handler id (what autoscaling grows on)."""
        with self._lock:
            return self._state.waiting_by_handler(self._clock())

    def set_capacity(self, handler_id: str, size: int) -> None:
        """The pool serving ``handler_id`` now runs ``size`` jobs at once; start what that allows."""
        with self._lock:
            self._state.set_capacity(handler_id, size)
            now = self._clock()
            self._log.add(self._state.next_dispatch(now), now)
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
            return self._state.depth == 0 and self._state.in_flight == 0 and not self._committer.busy()

    def stop(self) -> None:
        """Stop the loop (and collector) thread (tests and shutdown; a restart starts new ones)."""
        self._stop.set()
        self._commit_wanted.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def commit(self) -> bool:
        """One group commit: every queued write in ONE transaction, then what they allow.

        Wakes the ``dispatch`` callers whose jobs it made durable, then starts the runs it recorded.
        Raises when the store write fails; the batch then stays queued, in order, ahead of anything
        newer. Returns False when there was nothing to write.
        """
        return self._committer.commit(self._carry_out, yield_to_callers=bool(self._threads))

    def collect(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for outcomes, apply them and queue what they free (and due retries)."""
        finished = self._workers.poll(timeout_s)
        answers: list[tuple[Attempt | None, Answered]] = []
        with self._lock:
            # Apply every collected outcome before anything is written: the pool has handed them
            # over, so one failing write must not drop the outcomes after it.
            now = self._clock()
            for job_seq, outcome in finished:
                sent = self._starter.in_flight.answered(job_seq)
                answers.append((sent, apply_answer(self._state, job_seq, outcome, sent, now)))
                self._log.add(answers[-1][1].commands, now)
                self._track_redrives(answers[-1][1].commands)
            self._log.add(self._state.next_dispatch(now), now)
            wanted = bool(self._log)
            due = self._reports.figures_due(now, TICK_S) or not self._threads
            figures = state_figures(self._state) if due else None
        if wanted and not self._collects_in_loop:
            self._commit_wanted.set()  # the loop thread commits them (it called this itself otherwise)
        for sent, answer in answers:
            self._reports.answered(sent, answer, now)
        if figures is not None:
            self._reports.figures(figures, now)
        return len(finished)

    def tick(self, timeout_s: float) -> int:
        """One step of both threads, for callers that drive the queue by hand (tests)."""
        self.commit()
        collected = self.collect(timeout_s)
        self.commit()
        if self.run_redrives():
            self.commit()
        return collected

    # --- re-driving failed jobs (actors.queue.redrive) -------------------------------------------

    def retry_failed(self, db_path: str | None = None) -> dict[str, int]:
        """``omray retry``: queue again every failed job (of ``db_path``) not re-driven yet, except
        those whose input is invalid, and let the budget holds (of ``db_path``) re-check at once;
        returns ``{"requeued": n, "rechecked": holds}`` once the requeued rows are durable."""
        rows = self._store.failed_to_redrive(db_path, excluded_reasons=sorted(NOT_REDRIVEN))
        requeued, generation = self._requeue(rows)
        with self._lock:
            now = self._clock()
            rechecked = self._state.recheck_holds(db_path, now)
            self._log.add(self._state.next_dispatch(now), now)
        self._commit_wanted.set()
        if generation is not None:
            if not self._threads:
                self.commit()
            self._committer.await_durable(generation, DURABLE_WAIT_S)
        return {"requeued": requeued, "rechecked": rechecked}

    def run_redrives(self) -> int:
        """Re-drive the failed jobs whose cause a success has shown gone (the loop thread calls it
        after a commit); the number queued again."""
        with self._lock:
            due, self._redrive_due = self._redrive_due, []
        requeued = 0
        for redrive in due:
            rows = self._store.failed_to_redrive(
                redrive.db_path,
                redrive.handler_ids,
                max_redrives=AUTOMATIC_REDRIVES if redrive.automatic_only else None,
                excluded_reasons=sorted(NOT_REDRIVEN),
            )
            if redrive.new_fingerprint is not None:  # what ran under other settings, now under these
                rows = [row for row in rows if fingerprint_of(row.envelope) != redrive.new_fingerprint]
            requeued += self._requeue(rows, redrive.new_fingerprint)[0]
        if requeued:
            logger.info("failed jobs re-driven", extra={"jobs": requeued})
        return requeued

    def _track_redrives(self, commands: Sequence[Any]) -> None:
        """Note give-ups and the successes that re-drive them (under the lock)."""
        reason, fingerprint = "", None
        for command in commands:
            if isinstance(command, GiveUp):
                reason, fingerprint = command.reason, command.settings_fingerprint
            elif isinstance(command, EmitJobFailed):
                self._redrive.gave_up(command.db_path, command.event.handler_id, reason, fingerprint)
            elif isinstance(command, MarkSucceeded) and command.db_path:
                due = self._redrive.succeeded(command.db_path, command.handler_id)
                if due is not None:
                    self._redrive_due.append(due)
                    self._commit_wanted.set()

    def _requeue(self, rows: Sequence[StoredJob], fingerprint: str | None = None) -> tuple[int, int | None]:
        """Accept a copy of each failed row as a new job (sent under settings ``fingerprint`` when
        given), linked to it in the same write."""
        requeued, wait = 0, None
        with self._lock:
            now = self._clock()
            for row in rows:
                envelope = row.envelope
                if row.job_seq in self._redriven:
                    continue  # read before its copy was durable: queued again once already
                if self._state.active_seq(envelope.job_id, envelope.payload.db_path) is not None:
                    continue  # the same job is queued again already: that run covers it
                self._redriven.add(row.job_seq)
                if fingerprint is not None:
                    envelope = sent_under(envelope, fingerprint)
                job_seq, self._next_seq = self._next_seq, self._next_seq + 1
                self._state.accept(envelope, job_seq, now)
                wait = self._log.accept(job_seq, envelope, now, row.job_seq, row.redrives + 1)
                requeued += 1
            self._log.add(self._state.next_dispatch(now), now)
        if requeued:
            self._commit_wanted.set()
        return requeued, wait

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
                        if self.run_redrives():
                            continue
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

    # --- carrying out a durable batch ------------------------------------------------------------

    def _carry_out(self, batch: Batch) -> None:
        """Report what a durable batch did, then start its runs; never raises, so no start of it is
        skipped (a start that fails is a lost attempt, retried by policy)."""
        self._reports.effects(item for item, _ in batch.items if not isinstance(item, Dispatch))
        self._starter.send([item for item, _ in batch.items if isinstance(item, Dispatch)])

    def _start_lost(self, command: Dispatch, error_class: str) -> None:
        """The attempt never reached a worker: it counts as a lost one (retried by policy), never
        as a job left "running" with nobody to report on it."""
        logger.error(
            "job attempt could not start", extra={"job_id": command.job_id, "error_class": error_class}
        )
        try:
            with self._lock:
                self._starter.in_flight.answered(command.job_seq)
                now = self._clock()
                lost = self._state.on_worker_lost(command.job_seq, now, attempt=command.attempt)
                self._log.add(lost, now)
                self._track_redrives(lost)  # a lost start can use up the last attempt too
        except Exception as exc:  # never keeps the batch's other starts from going out
            logger.error(
                "lost attempt not recorded",
                extra={"job_id": command.job_id, "error_class": type(exc).__name__},
            )
        self._commit_wanted.set()
