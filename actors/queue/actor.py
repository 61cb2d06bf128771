"""QueueActor: the thin shell that executes :class:`actors.queue.state.QueueState` commands.

It owns the durable ``extension_agent`` queue of one runtime. Every accepted job is written to the
queue's own SQLite file (through that file's StoreActor) *before* ``dispatch`` returns, so no
crash loses an accepted job. A background loop started in ``__init__`` (and therefore again after
every restart) starts eligible jobs on the worker pool of their handler id, collects outcomes and
records them durably; the pure state machine decides lanes, order, coalescing and retries.

Group commit: concurrent ``dispatch`` calls (the actor serves several at once) are written in one
transaction by whichever caller holds the queue lock next, and every store write a loop step
produces (starts, retries, finishes, give-ups) goes to the store in one transaction too. The
guarantees are the same as one write per job: a job is durable before its ``dispatch`` returns,
a start is durable before the worker is called, and every write is idempotent.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import ValidationError

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
    JobFinished,
    JobGivenUp,
    JobRetry,
    JobStarted,
    JobWrite,
    RuntimeEventWrite,
)
from protocol.errors import InvalidPayloadError
from protocol.jobs import JobEnvelope
from protocol.outcomes import JOB_OUTCOME_ADAPTER, JobFailedEvent, JobSucceeded

logger = logging.getLogger("omray.queue")

TICK_S = 0.05
"""Longest wait for a worker outcome in one loop step (keeps ``dispatch`` latency low)."""


class QueueStorePort(Protocol):
    """The queue-database writes the actor needs (a ``persistence.Store`` or a StoreActor proxy)."""

    def enqueue_jobs(self, envelopes: Sequence[JobEnvelope], accepted_at: str) -> Sequence[Any]: ...
    def apply_job_writes(self, writes: Sequence[JobWrite]) -> int: ...
    def list_unfinished_jobs(self) -> Sequence[Any]: ...
    def runtime_events(self, run_id: str, after_seq: int = 0) -> Sequence[Any]: ...
    def job_counts(self) -> Any: ...


class QueueMetricsPort(Protocol):
    """Where the queue reports its numbers (Ray metrics in a cluster; nothing in unit tests)."""

    def queue_depth(self, depth: int, in_flight: int) -> None: ...
    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None: ...
    def job_failed(self, handler_id: str, reason: str) -> None: ...
    def model_tokens(
        self, handler_id: str, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0
    ) -> None: ...


class NoMetrics:
    """A metrics port that records nothing."""

    def queue_depth(self, depth: int, in_flight: int) -> None:
        """Ignore."""

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        """Ignore."""

    def job_failed(self, handler_id: str, reason: str) -> None:
        """Ignore."""

    def model_tokens(
        self, handler_id: str, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0
    ) -> None:
        """Ignore."""


class WorkerPoolPort(Protocol):
    """Starts attempts on workers and collects outcomes (``None`` = the worker died mid-job)."""

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None: ...
    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]: ...

    @property
    def in_flight(self) -> int: ...


def iso_utc(epoch_s: float) -> str:
    """UTC ISO-8601 text of an epoch time."""
    return datetime.fromtimestamp(epoch_s, tz=UTC).isoformat()


def epoch_of(iso: str | None) -> float | None:
    """Epoch seconds of an ISO-8601 text (``None`` stays ``None``)."""
    return None if iso is None else datetime.fromisoformat(iso).timestamp()


@dataclass
class _PendingAccept:
    """One ``dispatch`` call waiting for the group commit that makes its job durable."""

    envelope: JobEnvelope
    done: bool = False
    error: BaseException | None = None


class QueueActor:
    """The durable job queue of one runtime, its single dispatcher.

    Guarantees: a job is durable before ``dispatch`` returns; within a lane (one session of one
    database, or one database's index work) jobs start in acceptance order and never overlap, and
    lanes run in parallel up to ``max_in_flight`` runs and the size of each worker pool (the
    queue's own sequence numbers decide, never Ray's delivery order); a job leaves the queue only
    when its handler succeeded or its 4 attempts are used up, then a sanitized ``job_failed`` event
    is recorded for its session. Safe to call from several threads: every step runs under one lock.

    Store writes and worker starts that a step asked for are kept, in order, until they succeeded:
    a write batch that fails (a StoreActor restarting, a timeout) is retried whole on the next loop
    step before anything else, so the durable rows catch up with the in-memory state instead of
    diverging from it (a job stuck as running, a finished job never recorded, a lost job-failed
    event). Every queue write is idempotent, so repeating a batch whose reply was lost is safe.
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
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._recent_failures: collections.deque[dict[str, Any]] = collections.deque(maxlen=20)
        self._in_flight_attempts: dict[int, tuple[str, int, str, float]] = {}
        self._completed = 0
        self._coalesced = 0
        # Accepts waiting for the next group commit (appended without the queue lock).
        self._accepts_lock = threading.Lock()
        self._accepts: list[_PendingAccept] = []
        # Commands not yet carried out, each with the time it was issued (so a repeated write is
        # byte-identical to the first try). Only touched under the lock.
        self._unexecuted: collections.deque[tuple[Command, float]] = collections.deque()
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
        self._state, commands = QueueState.restore(
            rows, clock(), policy, max_in_flight=max_in_flight, capacity=capacity, coalesce=coalesce
        )
        self._execute(commands)
        if rows:
            logger.info("queue restored", extra={"unfinished_jobs": len(rows)})
        self._thread: threading.Thread | None = None
        if start_loop:
            self._thread = threading.Thread(target=self._run_forever, name="omray-queue-loop", daemon=True)
            self._thread.start()

    # --- public API (documented actor-handle methods) ------------------------------------------

    def dispatch(self, envelope: JobEnvelope | Mapping[str, Any]) -> str:
        """Accept a job durably and return its job id; a job key already pending is not queued twice."""
        try:
            job = envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
        except Exception as exc:
            raise InvalidPayloadError(f"invalid job envelope ({type(exc).__name__})") from None
        pending = _PendingAccept(job)
        with self._accepts_lock:
            self._accepts.append(pending)
        with self._lock:
            if not pending.done:
                self._commit_accepts()
        if pending.error is not None:
            raise pending.error
        self._wake.set()
        return job.job_id

    def _commit_accepts(self) -> None:
        """Group commit: store every waiting accept in one transaction, then queue them in order."""
        with self._accepts_lock:
            batch, self._accepts = self._accepts, []
        if not batch:
            return
        try:
            # Catch up first: a finished job whose row is not yet recorded would otherwise look
            # "already queued" to enqueue_jobs and be accepted again under its old row.
            self._flush()
            results = self._store.enqueue_jobs([p.envelope for p in batch], iso_utc(self._clock()))
        except BaseException as exc:
            for item in batch:
                item.error = exc
                item.done = True
            raise
        now = self._clock()
        for item, result in zip(batch, results, strict=True):
            self._enqueue_commands(self._state.accept(item.envelope, result.job_seq, now), now)
            item.done = True
        try:
            self._flush()
        except Exception as exc:
            # The jobs are durable already; the loop retries these writes on its next step.
            logger.warning("queue writes deferred", extra={"error_class": type(exc).__name__})

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
                "depth": self._state.depth,
                "in_flight": in_flight,
                "max_in_flight": self._state.max_in_flight,
                "lanes": snapshot["lanes"],
                "busy_lanes": snapshot["busy_lanes"],
                "capacity": snapshot["capacity"],
                "completed_since_start": self._completed,
                "coalesced_since_start": self._coalesced,
                "recent_failures": list(self._recent_failures),
                "state": snapshot,
                "loop_alive": self._thread is not None and self._thread.is_alive(),
            }

    def runtime_events(self, run_id: str, after_seq: int = 0) -> list[dict[str, Any]]:
        """Sanitized runtime events (e.g. ``extension_agent.job_failed``) recorded for a session."""
        return [event.model_dump() for event in self._store.runtime_events(run_id, after_seq)]

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
                and not self._unexecuted
                and not self._accepts
            )

    def stop(self) -> None:
        """Stop the loop thread (used by tests and shutdown; a restart starts a new one)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- the loop --------------------------------------------------------------------------------

    def _run_forever(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick(TICK_S)
            except Exception as exc:
                # The loop must never die: a failed step (e.g. the StoreActor restarting) is logged
                # and its unexecuted commands are retried, in order, on the next step.
                logger.error("queue loop step failed", extra={"error_class": type(exc).__name__})
                self._stop.wait(0.5)

    def tick(self, timeout_s: float) -> int:
        """One loop step: start eligible jobs, wait up to ``timeout_s`` for outcomes, record them."""
        with self._lock:
            self._flush()
            self._execute(self._state.next_dispatch(self._clock()))
        if self._workers.in_flight == 0:
            self._wake.wait(timeout_s)
            self._wake.clear()
            return 0
        finished = self._workers.poll(timeout_s)
        with self._lock:
            # Apply every collected outcome to the state before writing anything: the pool has
            # handed them over, so one failing write must not drop the outcomes after it.
            now = self._clock()
            for job_seq, outcome in finished:
                self._enqueue_commands(self._apply_outcome(job_seq, outcome), now)
            # Start what the outcomes freed in the same step, so one batch records both.
            self._enqueue_commands(self._state.next_dispatch(now), now)
            self._flush()
        self._safe_metric(self._metrics.queue_depth, self._state.depth, self._state.in_flight)
        return len(finished)

    def _apply_outcome(self, job_seq: int, outcome: dict[str, Any] | None) -> list[Command]:
        started = self._in_flight_attempts.pop(job_seq, None)
        attempt = started[1] if started else None
        parsed = None
        if outcome is not None:
            try:
                parsed = JOB_OUTCOME_ADAPTER.validate_python(outcome)
            except ValidationError:
                logger.error("malformed worker outcome", extra={"job_seq": job_seq})
        if parsed is None:
            commands = self._state.on_worker_lost(job_seq, self._clock(), attempt=attempt)
            kind = "worker_lost"
        else:
            commands = self._state.on_outcome(job_seq, parsed, self._clock(), attempt=attempt)
            kind = parsed.kind
            if isinstance(parsed, JobSucceeded) and started is not None:
                self._report_tokens(started[2], parsed.detail)
        if started is not None:
            self._safe_metric(
                self._metrics.attempt_finished, started[2], kind, self._clock() - started[3], started[1]
            )
        return commands

    def _report_tokens(self, handler_id: str, detail: Mapping[str, Any]) -> None:
        prompt, completion = detail.get("prompt_tokens"), detail.get("completion_tokens")
        cached = detail.get("cached_prompt_tokens", 0)
        if isinstance(prompt, int) and isinstance(completion, int):
            cached = cached if isinstance(cached, int) else 0
            self._safe_metric(self._metrics.model_tokens, handler_id, prompt, completion, cached)

    @staticmethod
    def _safe_metric(record: Callable[..., None], *args: Any) -> None:
        # Metrics never hurt work: a failing exporter is logged and ignored.
        try:
            record(*args)
        except Exception as exc:
            logger.warning("metric update failed", extra={"error_class": type(exc).__name__})

    # --- command execution -------------------------------------------------------------------------

    def _execute(self, commands: Sequence[Command]) -> None:
        self._enqueue_commands(commands, self._clock())
        self._flush()

    def _enqueue_commands(self, commands: Sequence[Command], now: float) -> None:
        for command in commands:
            if not isinstance(command, AlreadyQueued | OutcomeIgnored | WakeAt):  # notices
                self._unexecuted.append((command, now))

    def _flush(self) -> None:
        """Carry out the unexecuted commands: their writes in one transaction, then their effects.

        A failed write batch leaves every command queued (retried whole, idempotently, next time).
        Starting a worker may fail and produce new commands (a lost attempt): those are flushed
        in a further round.
        """
        for _ in range(8):  # each round's lost starts can only add a bounded number of commands
            if not self._unexecuted:
                return
            batch = list(self._unexecuted)
            writes = self._writes_for(batch)
            if writes:
                self._store.apply_job_writes(writes)
            self._unexecuted.clear()
            for command, _issued in batch:
                self._effect(command)

    def _writes_for(self, batch: Sequence[tuple[Command, float]]) -> list[JobWrite]:
        writes: list[JobWrite] = []
        for index, (command, now) in enumerate(batch):
            at = iso_utc(now)
            if isinstance(command, Dispatch):
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
                        )
                    )
            elif isinstance(command, EmitJobFailed) and not self._is_paired(batch, index):
                writes.append(
                    RuntimeEventWrite(
                        run_id=command.run_id,
                        event_type=JobFailedEvent.event_type,
                        payload=command.event.model_dump(),
                        created_at=at,
                    )
                )
        return writes

    @staticmethod
    def _paired_event(
        batch: Sequence[tuple[Command, float]], index: int, command: GiveUp
    ) -> EmitJobFailed | None:
        following = batch[index + 1][0] if index + 1 < len(batch) else None
        if isinstance(following, EmitJobFailed) and following.event.job_id == command.job_id:
            return following
        return None

    @staticmethod
    def _is_paired(batch: Sequence[tuple[Command, float]], index: int) -> bool:
        previous = batch[index - 1][0] if index > 0 else None
        command = batch[index][0]
        return (
            isinstance(previous, GiveUp)
            and isinstance(command, EmitJobFailed)
            and command.event.job_id == previous.job_id
        )

    def _effect(self, command: Command) -> None:
        """What a command does once its writes are durable (no store access here)."""
        if isinstance(command, Dispatch):
            self._start(command)
        elif isinstance(command, MarkSucceeded):
            self._completed += 1
        elif isinstance(command, ScheduleRetry):
            logger.warning(
                "job attempt failed; retry scheduled",
                extra={"job_id": command.job_id, "attempts": command.attempts, "reason": command.reason},
            )
        elif isinstance(command, EmitJobFailed):
            self._report_job_failed(command.run_id, command.event, self._clock())

    def _start(self, command: Dispatch) -> None:
        envelope = JobEnvelope(job_id=command.job_id, payload=command.payload)
        self._in_flight_attempts[command.job_seq] = (
            command.job_id,
            command.attempt,
            command.handler_id,
            self._clock(),
        )
        if len(command.covered) > 1:
            self._coalesced += len(command.covered) - 1
        try:
            self._workers.start(command.handler_id, command.job_seq, envelope.model_dump(), command.attempt)
        except Exception as exc:
            # The attempt never reached a worker: it counts as a lost one (retried by policy),
            # never as a job left "running" with nobody to report on it.
            logger.error(
                "job attempt could not start",
                extra={"job_id": command.job_id, "error_class": type(exc).__name__},
            )
            self._in_flight_attempts.pop(command.job_seq, None)
            lost = self._state.on_worker_lost(command.job_seq, self._clock(), attempt=command.attempt)
            self._enqueue_commands(lost, self._clock())

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
