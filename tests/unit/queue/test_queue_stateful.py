"""Stateful property test: the QueueActor's loop around QueueState, with crashes and a durable store.

The harness plays the actor: it writes a simulated durable store exactly when a command says so
(and stores a job before ``accept``), delivers worker results in any order (including late and
duplicate ones), loses workers, and crashes the actor, rebuilding the state from the durable rows.
"""

from __future__ import annotations

import dataclasses

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

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
from protocol.outcomes import JobFailed, JobSucceeded

from .helpers import envelope

MAX_ATTEMPTS = 4


class QueueActorModel(RuleBasedStateMachine):
    """The actor around the pure queue, with the durable store it keeps in step."""

    @initialize(max_in_flight=st.integers(min_value=1, max_value=3))
    def start(self, max_in_flight: int) -> None:
        self.max_in_flight = max_in_flight
        self.policy = RetryPolicy()
        assert self.policy.max_attempts == MAX_ATTEMPTS
        self.queue = QueueState(self.policy, max_in_flight=max_in_flight)
        self.now = 0.0
        self.next_seq = 1
        self.next_job = 1
        self.durable: dict[int, StoredJobState] = {}  # active rows, by job_seq
        self.accepted: dict[int, str] = {}  # every stored row: seq -> job id
        self.discarded: set[int] = set()  # surplus duplicate rows the actor deleted
        self.finished: dict[int, str] = {}  # seq -> "succeeded" | "failed"
        self.events: list[EmitJobFailed] = []
        self.first_dispatch_order: list[int] = []
        self.attempts_run: dict[int, list[int]] = {}
        self.live: set[tuple[int, int]] = set()  # (seq, attempt) running under this actor life
        self.history: set[tuple[int, int]] = set()  # every (seq, attempt) ever dispatched

    # --- the actor executing commands --------------------------------------------------------

    def execute(self, commands: list[Command]) -> None:
        for cmd in commands:
            if isinstance(cmd, Dispatch):
                self._dispatched(cmd)
            elif isinstance(cmd, ScheduleRetry):
                row = self.durable[cmd.job_seq]
                assert row.attempts == cmd.attempts
                self.durable[cmd.job_seq] = dataclasses.replace(
                    row, status="pending", not_before=cmd.not_before, last_reason=cmd.reason
                )
            elif isinstance(cmd, MarkSucceeded | GiveUp):
                assert cmd.job_seq not in self.finished, "a job finished twice"
                self.finished[cmd.job_seq] = "succeeded" if isinstance(cmd, MarkSucceeded) else "failed"
                del self.durable[cmd.job_seq]
            elif isinstance(cmd, EmitJobFailed):
                self.events.append(cmd)
            elif isinstance(cmd, AlreadyQueued):
                assert cmd.job_seq != cmd.existing_seq
                del self.durable[cmd.job_seq]
                self.discarded.add(cmd.job_seq)
            elif isinstance(cmd, WakeAt):
                assert cmd.time > self.now
            else:
                assert isinstance(cmd, OutcomeIgnored)

    def _dispatched(self, cmd: Dispatch) -> None:
        seq = cmd.job_seq
        assert seq not in self.finished, "a finished job was dispatched again"
        assert cmd.attempt <= MAX_ATTEMPTS, "more than 4 attempts"
        runs = self.attempts_run.setdefault(seq, [])
        assert not runs or cmd.attempt > runs[-1]
        if not runs:
            assert not self.first_dispatch_order or seq > self.first_dispatch_order[-1], "FIFO start order"
            self.first_dispatch_order.append(seq)
        runs.append(cmd.attempt)
        assert len(runs) <= MAX_ATTEMPTS
        self.durable[seq] = dataclasses.replace(
            self.durable[seq], status="running", attempts=cmd.attempt, not_before=None
        )
        self.live.add((seq, cmd.attempt))
        self.history.add((seq, cmd.attempt))

    def _store(self, job_id: str) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.durable[seq] = StoredJobState(seq, envelope(job_id), "pending")
        self.accepted[seq] = job_id
        return seq

    def _new_job_id(self) -> str:
        job_id = f"job-{self.next_job}"
        self.next_job += 1
        return job_id

    def _active_job_ids(self) -> list[str]:
        return sorted({row.envelope.job_id for row in self.durable.values()})

    # --- rules -------------------------------------------------------------------------------

    @rule()
    def accept_new_job(self) -> None:
        job_id = self._new_job_id()
        seq = self._store(job_id)
        assert self.queue.accept(envelope(job_id), seq, self.now) == []

    @precondition(lambda self: bool(self.durable))
    @rule(data=st.data())
    def accept_duplicate_job(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self._active_job_ids()))
        seq = self._store(job_id)
        commands = self.queue.accept(envelope(job_id), seq, self.now)
        assert len(commands) == 1 and isinstance(commands[0], AlreadyQueued)
        self.execute(commands)

    @rule()
    def dispatch(self) -> None:
        self.execute(self.queue.next_dispatch(self.now))

    @rule(seconds=st.floats(min_value=0.0, max_value=10.0))
    def advance_clock(self, seconds: float) -> None:
        self.now += seconds

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), succeeded=st.booleans())
    def deliver_outcome(self, data: st.DataObject, succeeded: bool) -> None:
        seq, attempt = data.draw(st.sampled_from(sorted(self.live)))
        self.live.discard((seq, attempt))
        job_id = self.accepted[seq]
        outcome: JobSucceeded | JobFailed = (
            JobSucceeded(job_id=job_id)
            if succeeded
            else JobFailed(job_id=job_id, retryable=True, reason="transient_runtime")
        )
        commands = self.queue.on_outcome(seq, outcome, self.now, attempt=attempt)
        assert commands and not isinstance(commands[0], OutcomeIgnored)
        self.execute(commands)

    @precondition(lambda self: bool(self.history - self.live))
    @rule(data=st.data(), succeeded=st.booleans())
    def deliver_late_outcome(self, data: st.DataObject, succeeded: bool) -> None:
        seq, attempt = data.draw(st.sampled_from(sorted(self.history - self.live)))
        job_id = self.accepted[seq]
        outcome: JobSucceeded | JobFailed = (
            JobSucceeded(job_id=job_id)
            if succeeded
            else JobFailed(job_id=job_id, retryable=False, reason="conflict")
        )
        before = self.queue.snapshot()
        commands = self.queue.on_outcome(seq, outcome, self.now, attempt=attempt)
        assert len(commands) == 1 and isinstance(commands[0], OutcomeIgnored)
        assert self.queue.snapshot() == before

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def lose_worker(self, data: st.DataObject) -> None:
        seq, attempt = data.draw(st.sampled_from(sorted(self.live)))
        self.live.discard((seq, attempt))
        self.execute(self.queue.on_worker_lost(seq, self.now, attempt=attempt))

    @rule()
    def crash_and_restore(self) -> None:
        self._restart()

    @rule()
    def crash_after_storing_before_accept(self) -> None:
        self._store(self._new_job_id())
        self._restart()

    @precondition(lambda self: bool(self.durable))
    @rule(data=st.data())
    def crash_after_storing_a_duplicate(self, data: st.DataObject) -> None:
        self._store(data.draw(st.sampled_from(self._active_job_ids())))
        self._restart()

    def _restart(self) -> None:
        # Results of attempts started by the dead actor can no longer be matched to a live call.
        self.live.clear()
        self.queue, commands = QueueState.restore(
            list(self.durable.values()), self.now, self.policy, max_in_flight=self.max_in_flight
        )
        self.execute(commands)

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def durable_rows_mirror_the_state(self) -> None:
        snapshot = self.queue.snapshot()
        jobs = snapshot["jobs"]
        assert isinstance(jobs, list)
        assert {(j["job_seq"], j["attempts"]) for j in jobs} == {
            (seq, row.attempts) for seq, row in self.durable.items()
        }
        assert self.queue.in_flight <= self.max_in_flight
        assert self.queue.in_flight == len(self.live)

    @invariant()
    def every_stored_job_is_queued_finished_or_a_discarded_duplicate(self) -> None:
        assert set(self.accepted) == set(self.durable) | set(self.finished) | self.discarded
        assert not (set(self.durable) & set(self.finished))
        assert len(self.events) == sum(1 for v in self.finished.values() if v == "failed")

    def teardown(self) -> None:
        if not hasattr(self, "queue"):
            return
        # Drain: from now on every attempt succeeds; every stored job must finish.
        for seq, attempt in sorted(self.live):
            self.execute(
                self.queue.on_outcome(seq, JobSucceeded(job_id=self.accepted[seq]), self.now, attempt=attempt)
            )
        self.live.clear()
        for _ in range(10_000):
            commands = self.queue.next_dispatch(self.now)
            self.execute(commands)
            started = [c for c in commands if isinstance(c, Dispatch)]
            for d in started:
                self.live.discard((d.job_seq, d.attempt))
                self.execute(
                    self.queue.on_outcome(
                        d.job_seq, JobSucceeded(job_id=d.job_id), self.now, attempt=d.attempt
                    )
                )
            if not started:
                wakes = [c for c in commands if isinstance(c, WakeAt)]
                if not wakes:
                    break
                self.now = wakes[0].time
        assert (self.queue.depth, self.queue.in_flight) == (0, 0)
        assert self.durable == {}
        assert set(self.finished) == set(self.accepted) - self.discarded


QueueActorModel.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestQueueActorModel = QueueActorModel.TestCase
