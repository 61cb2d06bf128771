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

Budget holds (issue 41 item 3): a run of an observe or reflect job may answer ``JobHeld`` (its
project's daily budget is used up). Then, until the day turns or a re-check finds the budget
allowing it again, no model job of that database starts except one re-check run at a time, once it is
due (every ``hold_recheck_s``, at once after ``recheck_holds`` or a job accepted under other
settings); held runs never count as attempts, so holding never makes a job give up; and every job
still finishes exactly once, in lane order, when the budget allows it (the teardown drains a day
later).
"""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.queue.holds import HELD_HANDLERS
from actors.queue.retry import RetryPolicy
from actors.queue.state import (
    AlreadyQueued,
    Command,
    Dispatch,
    EmitJobFailed,
    EmitJobHeld,
    GiveUp,
    HoldJob,
    MarkSucceeded,
    OutcomeIgnored,
    QueueState,
    ScheduleRetry,
    WakeAt,
    lane_of,
)
from protocol.canonical import sha256_hex
from protocol.jobs import JobEnvelope, ObserveBoundaryJob
from protocol.outcomes import JobFailed, JobHeld, JobSucceeded
from protocol.queue_rows import StoredJob, iso_utc

from .helpers import envelope, observe, reflect, scan_next_dispatch, stored

MAX_ATTEMPTS = 4
RECHECK_S = 4.0
DAY_S = 300.0  # a short "day": the clock crosses several budget resets in one run


def db_of(envelope: JobEnvelope) -> str:
    return envelope.payload.db_path


def fingerprint(db: str, version: int) -> str:
    return sha256_hex(f"settings {db} v{version}")


class Hold:
    """A held database as the contract states it."""

    def __init__(self, until: float, due: float, fingerprint_version: int) -> None:
        self.until = until
        self.due = due  # when one re-check run may start
        self.version = fingerprint_version  # the settings it was found under
        self.probe: tuple[int, int] | None = None  # the live re-check run


class QueueActorModel(RuleBasedStateMachine):
    """The actor around the pure queue, with the durable store it keeps in step."""

    @initialize(max_in_flight=st.integers(min_value=1, max_value=4), observers=st.integers(1, 3))
    def start(self, max_in_flight: int, observers: int) -> None:
        self.max_in_flight = max_in_flight
        self.capacity = {"observational_memory.observe_boundary": observers}
        self.policy = RetryPolicy()
        assert self.policy.max_attempts == MAX_ATTEMPTS
        self.queue = QueueState(
            self.policy, max_in_flight=max_in_flight, capacity=self.capacity, hold_recheck_s=RECHECK_S
        )
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
        self.holds: dict[str, Hold] = {}  # db path -> its budget hold
        self.held_runs: dict[int, int] = {}  # seq -> runs held (not attempts)
        self.settings_version: dict[str, int] = {}  # db path -> settings version its jobs are sent with
        self.held_events = 0

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
            elif isinstance(cmd, HoldJob):
                row = self.durable[cmd.job_seq]
                assert row.attempts == cmd.attempts
                assert cmd.held == self.held_runs.get(cmd.job_seq, 0) + 1
                self.held_runs[cmd.job_seq] = cmd.held
                self.durable[cmd.job_seq] = row.model_copy(
                    update={
                        "state": "pending",
                        "not_before": iso_utc(cmd.not_before),
                        "failure_reason": cmd.reason,
                        "held_attempts": cmd.held,
                    }
                )
            elif isinstance(cmd, EmitJobHeld):
                self.held_events += 1
            elif isinstance(cmd, MarkSucceeded | GiveUp):
                if isinstance(cmd, GiveUp):
                    counted = len(self.attempts_run.get(cmd.job_seq, [])) - self.held_runs.get(cmd.job_seq, 0)
                    assert counted == MAX_ATTEMPTS, "gave up before 4 attempts (held runs do not count)"
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
        self._check_budget_hold(cmd)
        for seq, attempt in cmd.covered:
            assert seq not in self.finished, "a finished job was dispatched again"
            assert lane_of(self.envelopes[seq]) == lane, "a run covers jobs of another lane"
            held_runs = self.held_runs.get(seq, 0)
            assert attempt - held_runs <= MAX_ATTEMPTS, "more than 4 attempts (held runs do not count)"
            runs = self.attempts_run.setdefault(seq, [])
            assert not runs or attempt > runs[-1]
            if not runs:
                order = self.first_start_by_lane.setdefault(lane, [])
                assert not order or seq > order[-1], "lane start order"
                order.append(seq)
            idle_until = self.envelopes[seq].not_before
            if not runs and idle_until is not None and self.now < idle_until:
                assert len(cmd.covered) > 1, "a held job started early alone"
            runs.append(attempt)
            assert len(runs) - held_runs <= MAX_ATTEMPTS
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

    def _check_budget_hold(self, cmd: Dispatch) -> None:
        """While its database is held, a model job starts only as the one re-check, once it is due."""
        db = db_of(self.envelopes[cmd.job_seq])
        hold = self.holds.get(db)
        if hold is None or cmd.handler_id not in HELD_HANDLERS:
            return
        if self.now >= hold.until:
            del self.holds[db]  # the day turned: the budget reset
            return
        assert hold.probe is None, "two runs re-check one held budget at once"
        assert self.now >= hold.due, "a held job started before its re-check was due"
        hold.probe = (cmd.job_seq, cmd.attempt)

    def _run_ended(self, seq: int, attempt: int, held: bool) -> None:
        """A run ended: a re-check that was not held again ends the hold."""
        db = db_of(self.envelopes[seq])
        hold = self.holds.get(db)
        if hold is not None and hold.probe == (seq, attempt):
            if held:
                hold.probe = None
            else:
                del self.holds[db]

    def _settings_seen(self, job: JobEnvelope) -> None:
        """A job sent under other settings than a hold was found under makes it re-check at once."""
        db = db_of(job)
        hold = self.holds.get(db)
        if hold is None or self.now >= hold.until or not isinstance(job.payload, ObserveBoundaryJob):
            return
        if job.payload.settings_fingerprint != fingerprint(db, hold.version):
            hold.due = min(hold.due, self.now)
            hold.version = self.settings_version.get(db, 0)

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
            return envelope(job_id, session_id=session, db_path=db_path)
        if kind == "reflect":
            return reflect(job_id, session, db_path=db_path)
        lane = f"{db}/{session}"
        self.end_seq[lane] = self.end_seq.get(lane, 0) + 3
        job = observe(job_id, session, self.end_seq[lane], db_path=db_path)
        return self._with_settings(job)

    def _with_settings(self, job: JobEnvelope) -> JobEnvelope:
        """An observe job as a client sends it: with the fingerprint of its database's settings now."""
        version = self.settings_version.get(db_of(job), 0)
        payload = job.payload.model_copy(update={"settings_fingerprint": fingerprint(db_of(job), version)})
        return job.model_copy(update={"payload": payload})

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
        self._settings_seen(job)

    @rule(session=st.sampled_from(["s1", "s2"]), delay=st.floats(min_value=0.5, max_value=30.0))
    def accept_held_idle_flush(self, session: str, delay: float) -> None:
        # What a deferring observe run sends: its tail again, held until the idle timer.
        lane = f"a/{session}"
        flush = observe(
            self._new_job_id(), session, max(1, self.end_seq.get(lane, 1)), db_path="/data/a/om.sqlite"
        )
        job = self._with_settings(flush).model_copy(update={"not_before": self.now + delay})
        seq = self._store(job)
        assert self.queue.accept(job, seq, self.now) == []
        self._settings_seen(job)

    @precondition(lambda self: bool(self.durable))
    @rule(data=st.data())
    def accept_duplicate_job(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self._active_jobs()))
        seq = self._store(job)
        commands = self.queue.accept(job, seq, self.now)
        assert len(commands) == 1 and isinstance(commands[0], AlreadyQueued)
        self.execute(commands)
        self._settings_seen(job)

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
        self._run_ended(seq, attempt, held=False)
        self.execute(commands)

    def _model_runs(self) -> list[tuple[int, int]]:
        return sorted(run for run in self.live if self.envelopes[run[0]].handler_id in HELD_HANDLERS)

    @precondition(lambda self: bool(self._model_runs()))
    @rule(data=st.data(), in_usd=st.booleans())
    def deliver_budget_reached(self, data: st.DataObject, in_usd: bool) -> None:
        # The worker found its project's daily budget used up before sending anything.
        seq, attempt = data.draw(st.sampled_from(self._model_runs()))
        self.live.discard((seq, attempt))
        db = db_of(self.envelopes[seq])
        day_end = (self.now // DAY_S + 1) * DAY_S
        version = self.settings_version.get(db, 0)
        outcome = JobHeld(
            job_id=self.accepted[seq],
            reason="budget_usd" if in_usd else "budget_tokens",
            until=day_end,
            spent=12.0,
            cap=10.0,
            settings_fingerprint=fingerprint(db, version),
        )
        events_before = self.held_events
        hold = self.holds.get(db)
        new = hold is None or self.now >= hold.until
        self._run_ended(seq, attempt, held=True)
        commands = self.queue.on_outcome(seq, outcome, self.now, attempt=attempt)
        assert commands and all(isinstance(c, HoldJob | EmitJobHeld) for c in commands)
        members = self.run_members[(seq, attempt)]
        assert sorted(c.job_seq for c in commands if isinstance(c, HoldJob)) == sorted(members)
        self.execute(commands)
        assert self.held_events == events_before + (1 if new else 0), "one event per hold, not per renewal"
        if new:
            self.holds[db] = Hold(day_end, min(day_end, self.now + RECHECK_S), version)
        else:
            assert hold is not None
            hold.until, hold.due, hold.version = day_end, min(day_end, self.now + RECHECK_S), version
        for member in members:
            assert self.durable[member].state == "pending", "a held job left the queue"

    @rule(db=st.sampled_from(["a", "b"]))
    def raise_the_cap(self, db: str) -> None:
        # ``omray retry`` after the user raised the cap: the hold re-checks at the next dispatch.
        db_path = f"/data/{db}/om.sqlite"
        self.queue.recheck_holds(db_path, self.now)
        hold = self.holds.get(db_path)
        if hold is not None and self.now < hold.until:
            hold.due = min(hold.due, self.now)

    @rule(db=st.sampled_from(["a", "b"]))
    def change_settings(self, db: str) -> None:
        # The user edits the settings: jobs sent from now on carry another fingerprint.
        db_path = f"/data/{db}/om.sqlite"
        self.settings_version[db_path] = self.settings_version.get(db_path, 0) + 1

    @precondition(lambda self: any(self.now < hold.until for hold in self.holds.values()))
    @rule()
    def wait_for_a_recheck(self) -> None:
        # Time passes until a held database may re-check its budget; the queue starts what it may.
        due = min(hold.due for hold in self.holds.values() if self.now < hold.until)
        self.now = max(self.now, due)
        self.execute(self.queue.next_dispatch(self.now))

    @rule()
    def next_day(self) -> None:
        self.now = (self.now // DAY_S + 1) * DAY_S

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
        hold = self.holds.get(db_of(self.envelopes[seq]))
        if hold is not None and hold.probe == (seq, attempt):
            hold.probe = None  # a lost re-check is due again
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
        self.holds.clear()  # holds live in memory: held rows wait for their not_before, then re-check
        self.queue, commands = QueueState.restore(
            list(self.durable.values()),
            self.now,
            self.policy,
            max_in_flight=self.max_in_flight,
            capacity=self.capacity,
            hold_recheck_s=RECHECK_S,
        )
        self.execute(commands)

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def durable_rows_mirror_the_state(self) -> None:
        snapshot = self.queue.snapshot()
        jobs = snapshot["jobs"]
        assert isinstance(jobs, list)
        assert {(j["job_seq"], j["attempts"], j["held"]) for j in jobs} == {
            (seq, row.attempts, row.held_attempts) for seq, row in self.durable.items()
        }
        assert self.queue.in_flight <= self.max_in_flight
        assert self.queue.in_flight == len(self.live)

    @invariant()
    def the_queue_holds_exactly_the_databases_whose_budget_is_held(self) -> None:
        held = {str(hold["db_path"]) for hold in self.queue.held(self.now)}
        assert held == {db for db, hold in self.holds.items() if self.now < hold.until}

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
            self._run_ended(seq, attempt, held=False)
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
                self._run_ended(d.job_seq, d.attempt, held=False)
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
