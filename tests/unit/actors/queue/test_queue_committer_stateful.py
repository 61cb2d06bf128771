"""Stateful property test of the QueueActor's concurrent path: callers, committer and collector.

The actor's threads communicate through its queue of unwritten writes and its commit
generations. Here hypothesis plays every thread step by step, in any interleaving: a ``dispatch``
caller takes a job (``_accept``) and "returns" only once the commit carrying it is durable; the
committer commits, fails before its transaction, or fails after it landed (a lost reply); the
collector hands over worker outcomes (success, failure, a lost worker, in any order); the whole
actor crashes and restarts from the real SQLite file, abandoning its unwritten writes and its
callers that had not returned.

Checked under every interleaving, against the durable rows of a real ``QueueStore``:

- a worker is started only for a row that is durably ``running`` with that attempt, and never
  for a job whose success is recorded (nothing done twice);
- when a run starts, every earlier unfinished job of its lane is part of it (lane order, no
  overlap);
- at the end, after draining, every job whose ``dispatch`` returned finished exactly once, and
  nothing is left pending or running (nothing lost).
"""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.queue.actor import QueueActor
from actors.queue.retry import RetryPolicy
from actors.queue.state import lane_of
from persistence.writers.queue_store import QueueStore
from protocol.jobs import JOB_PAYLOAD_ADAPTER, JobEnvelope
from protocol.outcomes import JobFailed, JobSucceeded

from .helpers import envelope, observe, reflect


class _StoreFault(Exception):
    """The injected store failure."""


class _FlakyStore:
    """A real QueueStore whose next ``apply_job_writes`` can fail before or after its transaction."""

    def __init__(self, store: QueueStore) -> None:
        self.store = store
        self.fault: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def apply_job_writes(self, writes: Any) -> int:
        fault, self.fault = self.fault, None
        if fault == "before":
            raise _StoreFault("store down")
        applied = self.store.apply_job_writes(writes)
        if fault == "after":
            raise _StoreFault("reply lost")
        return applied


class _Rows:
    """Read the queue file the way an auditor would: every row, read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def all(self) -> list[tuple[int, tuple[str, str], str, str]]:
        """``(job_seq, key, state, lane)`` of every row."""
        with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT job_seq, job_id, state, payload_json FROM omray_job ORDER BY job_seq")
            found = []
            for seq, job_id, state, payload in rows.fetchall():
                job = JobEnvelope(job_id=job_id, payload=JOB_PAYLOAD_ADAPTER.validate_json(payload))
                found.append((int(seq), (job.payload.db_path, job_id), str(state), lane_of(job)))
        return found

    def redriven(self) -> dict[int, int]:
        """``job_seq -> redriven_to`` of every failed row queued again (issue 40 item 1)."""
        with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT job_seq, redriven_to FROM omray_job WHERE redriven_to IS NOT NULL")
            return {int(seq): int(target) for seq, target in rows.fetchall()}

    def row(self, job_seq: int) -> tuple[str, int] | None:
        with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as conn:
            found = conn.execute(
                "SELECT state, attempts FROM omray_job WHERE job_seq = ?", (job_seq,)
            ).fetchone()
        return None if found is None else (str(found[0]), int(found[1]))


class _Workers:
    """The worker pool port: records starts (checking them against the durable rows), delivers on demand."""

    def __init__(self, rows: _Rows) -> None:
        self.rows = rows
        self.running: list[tuple[int, int, str]] = []  # (job_seq, attempt, job_id)
        self.finished: list[tuple[int, dict[str, Any] | None]] = []
        self.batches = 0

    def start(self, handler_id: str, job_seq: int, envelope_data: Mapping[str, Any], attempt: int) -> None:
        row = self.rows.row(job_seq)
        assert row == ("running", attempt), f"start of seq {job_seq} attempt {attempt} before durable: {row}"
        rows = self.rows.all()
        lanes = {seq: lane for seq, _key, _state, lane in rows}
        for seq, _key, state, lane in rows:
            if seq < job_seq and lane == lanes[job_seq]:
                assert state != "pending", f"seq {job_seq} started ahead of {seq} in its lane"
        assert all(lanes[seq] != lanes[job_seq] for seq, _a, _j in self.running), "two runs of one lane"
        self.running.append((job_seq, attempt, str(envelope_data["job_id"])))

    def start_many(self, starts: list[tuple[str, int, Mapping[str, Any], int]]) -> list[int]:
        """Every start of one commit at once, as the Ray pool takes them; some calls are refused
        (the queue must count those attempts as lost and start them again)."""
        self.batches += 1
        refused = []
        for handler_id, job_seq, envelope_data, attempt in starts:
            if (job_seq + attempt + self.batches) % 5 == 0:
                refused.append(job_seq)
            else:
                self.start(handler_id, job_seq, envelope_data, attempt)
        return refused

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        finished, self.finished = self.finished, []
        return finished


class QueueCommitterModel(RuleBasedStateMachine):
    """Every thread of the actor as a rule; crashes restart it from the durable file."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="omray-committer-"))
        self.path = self.directory / "q.sqlite"
        self.rows = _Rows(self.path)
        self.store = _FlakyStore(QueueStore(self.path, synchronous="NORMAL"))
        self.now = 1_000_000.0
        self.envelopes: dict[tuple[str, str], JobEnvelope] = {}
        self.waiting: list[tuple[JobEnvelope, int]] = []  # dispatch callers not returned yet
        self.returned: set[tuple[str, str]] = set()  # keys whose dispatch returned
        self.next_job = 0
        self.end_seq: dict[str, int] = {}
        self.queue = self._new_actor()

    def _new_actor(self) -> QueueActor:
        self.workers = _Workers(self.rows)
        return QueueActor(
            self.store,  # type: ignore[arg-type]
            self.workers,
            policy=RetryPolicy(base_delay_s=1.0),
            max_in_flight=3,
            capacity={"observational_memory.observe_boundary": 2},
            clock=lambda: self.now,
            start_loop=False,
        )

    def teardown(self) -> None:
        try:
            self._drain()
            # Every job finished; a failed one may have been queued again (re-driven once a later
            # job succeeded): its row then names the copy, a row of the same job, and only the
            # last copy of a job stands. So each job is finished exactly once in the end.
            finished: dict[tuple[str, str], int] = {}
            rows = self.rows.all()
            key_of = {seq: key for seq, key, _state, _lane in rows}
            links = self.rows.redriven()
            for seq, key, state, _lane in rows:
                assert state in ("succeeded", "failed"), f"{key} left {state}"
                if seq in links:
                    assert state == "failed" and key_of[links[seq]] == key and links[seq] > seq
                    continue
                finished[key] = finished.get(key, 0) + 1
            for key in self.returned:
                assert finished.get(key) == 1, f"{key} finished {finished.get(key, 0)} times"
        finally:
            self.queue.stop()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _drain(self) -> None:
        for _ in range(400):
            self.store.fault = None
            self._answer_waiting()
            for seq, attempt, job_id in list(self.workers.running):
                self._deliver(seq, attempt, job_id, "ok")
            self.queue.tick(0)
            self.now += 30
            if self.queue.is_idle() and not self.workers.running and not self.waiting:
                return
        raise AssertionError("the queue did not drain")

    # --- the threads ---------------------------------------------------------------------------

    def _job(self, lane: int, kind: str) -> JobEnvelope:
        self.next_job += 1
        job_id = f"j{self.next_job}"
        session = f"s{lane}"
        db_path = "/data/a/om.sqlite" if lane % 2 == 0 else "/data/b/om.sqlite"
        if kind == "observe":
            self.end_seq[session] = self.end_seq.get(session, 0) + 5
            return observe(job_id, session, self.end_seq[session], db_path=db_path)
        if kind == "reflect":
            return reflect(job_id, session, db_path=db_path)
        return envelope(job_id, session, db_path=db_path)

    @rule(lane=st.integers(0, 3), kind=st.sampled_from(["observe", "reflect", "index"]))
    def caller_dispatches(self, lane: int, kind: str) -> None:
        job = self._job(lane, kind)
        generation = self.queue._accept(job)
        self.envelopes[(job.payload.db_path, job.job_id)] = job
        if generation is None:
            self.returned.add((job.payload.db_path, job.job_id))
        else:
            self.waiting.append((job, generation))

    @precondition(lambda self: bool(self.returned))
    @rule(data=st.data())
    def caller_dispatches_the_same_job_again(self, data: st.DataObject) -> None:
        key = data.draw(st.sampled_from(sorted(self.returned)))
        job = self.envelopes[key]
        if self.queue._state.active_seq(job.job_id, job.payload.db_path) is None:
            return  # finished already: dispatching it again would be a new job
        assert self.queue._accept(job) is None  # durable and queued: not queued twice, no wait

    @rule(fault=st.sampled_from([None, None, "before", "after"]))
    def committer_commits(self, fault: str | None) -> None:
        self.store.fault = fault
        with contextlib.suppress(_StoreFault):
            self.queue.commit()
        self.store.fault = None
        self._answer_waiting()

    def _answer_waiting(self) -> None:
        still: list[tuple[JobEnvelope, int]] = []
        for job, generation in self.waiting:
            if self.queue._log.is_durable(generation):
                row_seq = self.queue._state.active_seq(job.job_id, job.payload.db_path)
                self.returned.add((job.payload.db_path, job.job_id))
                if row_seq is not None:
                    assert self.rows.row(row_seq) is not None, "dispatch returned before its row was durable"
            else:
                still.append((job, generation))
        self.waiting = still

    @precondition(lambda self: bool(self.workers.running))
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "ok", "fail", "lost"]))
    def worker_finishes(self, data: st.DataObject, outcome: str) -> None:
        seq, attempt, job_id = data.draw(st.sampled_from(self.workers.running))
        self._deliver(seq, attempt, job_id, outcome)

    def _deliver(self, seq: int, attempt: int, job_id: str, outcome: str) -> None:
        self.workers.running.remove((seq, attempt, job_id))
        result: dict[str, Any] | None = None
        if outcome == "ok":
            result = JobSucceeded(job_id=job_id).model_dump()
        elif outcome == "fail":
            result = JobFailed(job_id=job_id, retryable=True, reason="transient_runtime").model_dump()
        self.workers.finished.append((seq, result))

    @rule()
    def collector_collects(self) -> None:
        self.queue.collect(0)

    @rule(seconds=st.sampled_from([0.5, 2.0, 10.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def actor_crashes_and_restarts(self) -> None:
        # Callers that had not returned see the actor die; their jobs may or may not be durable.
        self.waiting = []
        self.queue = self._new_actor()

    @invariant()
    def durable_before_returned(self) -> None:
        for db_path, job_id in self.returned:
            seq = self.queue._state.active_seq(job_id, db_path)
            if seq is not None:
                assert self.rows.row(seq) is not None


QueueCommitterModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestQueueCommitter = QueueCommitterModel.TestCase
