"""Stateful property test: the QueueActor's loop around QueueState, with crashes and a durable store.

The harness plays the actor: it writes a simulated durable store exactly when a command says so
(and stores a job before ``accept``), delivers worker results in any order (including late and
duplicate ones), loses workers, and crashes the actor, rebuilding the state from the durable rows.

Jobs belong to a few lanes (sessions of two databases, plus index work) and mix observe, reflect
and index jobs, so runs are coalesced. Checked under any interleaving: no accepted job is lost, no
job finishes twice or starts again after it succeeded, no two runs of one lane overlap, a lane's
jobs first start in acceptance order, an observe job succeeds only through a run that observed at
least as far as its own boundary (coverage stays contiguous), a held job (an idle flush) never
starts before its time unless it rides with another job of its lane, and limits are respected.
"""

from __future__ import annotations

import copy

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
    WakeAt,
    lane_of,
)
from protocol.jobs import JobEnvelope, ObserveBoundaryJob
from protocol.outcomes import JobFailed, JobSucceeded
from protocol.queue_rows import StoredJob, iso_utc

from .helpers import envelope, observe, reflect, scan_next_dispatch, stored

MAX_ATTEMPTS = 4


class QueueActorModel(RuleBasedStateMachine):
    """The actor around the pure queue, with the durable store it keeps in step."""

    @initialize(max_in_flight=st.integers(min_value=1, max_value=3), observers=st.integers(1, 2))
    def start(self, max_in_flight: int, observers: int) -> None:
        self.max_in_flight = max_in_flight
        self.capacity = {"observational_memory.observe_boundary": observers}
        self.policy = RetryPolicy()
        assert self.policy.max_attempts == MAX_ATTEMPTS
        self.queue = QueueState(self.policy, max_in_flight=max_in_flight, capacity=self.capacity)
        self.now = 0.0
        self.next_seq = 1
        self.next_job = 1
        self.durable: dict[int, StoredJob] = {}  # active rows, by job_seq
        self.accepted: dict[int, str] = {}  # every stored row: seq -> job id
        self.discarded: set[int] = set()  # surplus duplicate rows the actor deleted
        self.finished: dict[int, str] = {}  # seq -> "succeeded" | "failed"
        self.events: list[EmitJobFailed] = []
        self.first_dispatch_order: list[int] = []
        self.attempts_run: dict[int, list[int]] = {}
        self.live: set[tuple[int, int]] = set()  # (seq, attempt) running under this actor life
        self.history: set[tuple[int, int]] = set()  # every (seq, attempt) ever dispatched
        self.envelopes: dict[int, JobEnvelope] = {}  # seq -> what was accepted
        self.run_members: dict[tuple[int, int], tuple[int, ...]] = {}  # live run -> member seqs
        self.end_seq: dict[str, int] = {}  # next boundary per session
        self.first_start_by_lane: dict[str, list[int]] = {}

    # --- the actor executing commands --------------------------------------------------------

    def execute(self, commands: list[Command]) -> None:
        for cmd in commands:
            if isinstance(cmd, Dispatch):
                self._dispatched(cmd)
            elif isinstance(cmd, ScheduleRetry):
                row = self.durable[cmd.job_seq]
                assert row.attempts == cmd.attempts
                self.durable[cmd.job_seq] = row.model_copy(
                    update={
                        "state": "pending",
                        "not_before": iso_utc(cmd.not_before),
                        "failure_reason": cmd.reason,
                    }
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
        lane = lane_of(self.envelopes[cmd.job_seq])
        busy = {lane_of(self.envelopes[seq]) for seq, _ in self.live}
        assert lane not in busy, "two runs of one lane overlap"
        running_observe = sum(
            1 for seq, _ in self.live if self.envelopes[seq].handler_id.endswith("observe_boundary")
        )
        if cmd.handler_id.endswith("observe_boundary"):
            assert running_observe < self.capacity[cmd.handler_id], "pool capacity exceeded"
        for seq, attempt in cmd.covered:
            assert seq not in self.finished, "a finished job was dispatched again"
            assert lane_of(self.envelopes[seq]) == lane, "a run covers jobs of another lane"
            assert attempt <= MAX_ATTEMPTS, "more than 4 attempts"
            runs = self.attempts_run.setdefault(seq, [])
            assert not runs or attempt > runs[-1]
            if not runs:
                order = self.first_start_by_lane.setdefault(lane, [])
                assert not order or seq > order[-1], "lane start order"
                order.append(seq)
            held = self.envelopes[seq].not_before
            if not runs and held is not None and self.now < held:
                assert len(cmd.covered) > 1, "a held job started early alone"
            runs.append(attempt)
            assert len(runs) <= MAX_ATTEMPTS
            self.durable[seq] = self.durable[seq].model_copy(
                update={"state": "running", "attempts": attempt, "not_before": None}
            )
        self.live.add((cmd.job_seq, cmd.attempt))
        self.history.add((cmd.job_seq, cmd.attempt))
        self.run_members[(cmd.job_seq, cmd.attempt)] = tuple(seq for seq, _ in cmd.covered)
        carrier = cmd.payload
        for seq, _ in cmd.covered:
            member = self.envelopes[seq].payload
            assert member.kind == carrier.kind, "only jobs of one kind run as one"
            assert member.kind != "reflect" or len(cmd.covered) == 1, "reflect jobs never coalesce"
            if isinstance(member, ObserveBoundaryJob):
                assert isinstance(carrier, ObserveBoundaryJob)
                assert member.terminal_end_seq <= carrier.terminal_end_seq, "coverage would not reach"

    def _store(self, job: JobEnvelope) -> int:
        seq = self.next_seq
        self.next_seq += 1
        self.durable[seq] = stored(seq, job, "pending")
        self.accepted[seq] = job.job_id
        self.envelopes[seq] = job
        return seq

    def _make_job(self, kind: str, session: str, db: str) -> JobEnvelope:
        job_id = self._new_job_id()
        db_path = f"/data/{db}/om.sqlite"
        if kind == "index":
            return envelope(job_id, run_id=session, db_path=db_path)
        if kind == "reflect":
            return reflect(job_id, session, db_path=db_path)
        lane = f"{db}/{session}"
        self.end_seq[lane] = self.end_seq.get(lane, 0) + 3
        return observe(job_id, session, self.end_seq[lane], db_path=db_path)

    def _new_job_id(self) -> str:
        job_id = f"job-{self.next_job}"
        self.next_job += 1
        return job_id

    def _active_jobs(self) -> list[JobEnvelope]:
        unique = {
            (row.envelope.payload.db_path, row.envelope.job_id): row.envelope for row in self.durable.values()
        }
        return [unique[key] for key in sorted(unique)]

    # --- rules -------------------------------------------------------------------------------

    @rule(
        kind=st.sampled_from(["observe", "observe", "reflect", "index"]),
        session=st.sampled_from(["s1", "s2"]),
        db=st.sampled_from(["a", "a", "b"]),
    )
    def accept_new_job(self, kind: str, session: str, db: str) -> None:
        job = self._make_job(kind, session, db)
        seq = self._store(job)
        assert self.queue.accept(job, seq, self.now) == []

    @rule(session=st.sampled_from(["s1", "s2"]), delay=st.floats(min_value=0.5, max_value=30.0))
    def accept_held_idle_flush(self, session: str, delay: float) -> None:
        # What a deferring observe run sends: its tail again, held until the idle timer.
        lane = f"a/{session}"
        flush = observe(
            self._new_job_id(), session, max(1, self.end_seq.get(lane, 1)), db_path="/data/a/om.sqlite"
        )
        job = flush.model_copy(update={"not_before": self.now + delay})
        seq = self._store(job)
        assert self.queue.accept(job, seq, self.now) == []

    @precondition(lambda self: bool(self.durable))
    @rule(data=st.data())
    def accept_duplicate_job(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self._active_jobs()))
        seq = self._store(job)
        commands = self.queue.accept(job, seq, self.now)
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

    @rule(session=st.sampled_from(["s1", "s2"]))
    def crash_after_storing_before_accept(self, session: str) -> None:
        self._store(self._make_job("observe", session, "a"))
        self._restart()

    @precondition(lambda self: bool(self.durable))
    @rule(data=st.data())
    def crash_after_storing_a_duplicate(self, data: st.DataObject) -> None:
        self._store(data.draw(st.sampled_from(self._active_jobs())))
        self._restart()

    def _restart(self) -> None:
        # Results of attempts started by the dead actor can no longer be matched to a live call.
        self.live.clear()
        self.queue, commands = QueueState.restore(
            list(self.durable.values()),
            self.now,
            self.policy,
            max_in_flight=self.max_in_flight,
            capacity=self.capacity,
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
    def indexed_dispatch_equals_a_full_scan(self) -> None:
        # The free-head index must pick exactly what scanning every lane would, now and once
        # every backoff and hold has run out.
        for now in (self.now, self.now + 1_000.0):
            indexed, scanned = copy.deepcopy(self.queue), copy.deepcopy(self.queue)
            assert indexed.next_dispatch(now) == scan_next_dispatch(scanned, now)
            assert indexed.snapshot() == scanned.snapshot()

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
