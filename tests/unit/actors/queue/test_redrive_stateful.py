"""Stateful property test of re-driving given-up jobs (issue 40 item 1): fail/fix interleavings.

Agents' turns arrive as observe jobs of four sessions over two databases; the model endpoint goes
down and comes back at any moment, or the user changes the settings (each job carries the
fingerprint of the settings it was sent with; a change fixes the outage or not); while it is down
every attempt fails (retryable, as a closed port does) and jobs give up after their attempts; the
queue crashes and restarts at any moment; ``omray retry`` may be called at any moment. A worker
observes like the real Observer: from its session's coverage cursor through the job's
``terminal_end_seq`` (a later job covers what an earlier one did not), so the test
counts how often each event is observed.

Checked, against a real ``QueueStore`` file:

- while running: no event is ever observed twice, and every start respects lane order (the
  shared ``_Workers`` check);
- in the end, once the endpoint answers, fixed one of two ways: either the user changes the
  settings and a job accepted under them fails for a cause of its own (no success to go by), and
  every event of every session is observed, exactly once; or after one new turn per database (the
  cause shown gone by its success) every event of every session whose jobs were not re-driven
  :data:`AUTOMATIC_REDRIVES` times already is; after ``omray retry``, every event of every session is.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from actors.queue.actor import QueueActor
from actors.queue.redrive import AUTOMATIC_REDRIVES
from actors.queue.retry import RetryPolicy
from persistence.writers.queue_store import QueueStore
from protocol.outcomes import REASON_INVALID_PAYLOAD, JobFailed, JobSucceeded

from .helpers import observe
from .test_queue_committer_stateful import _Rows, _Workers

SESSIONS = ("s0", "s1", "s2", "s3")
POISONED = ("p0", "p1")
"""A session of each database whose jobs fail for a cause no fix removes (a bad payload)."""


def _db(session: str) -> str:
    return "/data/a/om.sqlite" if int(session[1]) % 2 == 0 else "/data/b/om.sqlite"


class _ObservingWorkers(_Workers):
    """Workers that remember what each run observes up to (its session and end seq)."""

    def __init__(self, rows: _Rows) -> None:
        super().__init__(rows)
        self.runs: dict[int, tuple[str, int]] = {}

    def start(self, handler_id: str, job_seq: int, envelope_data: Mapping[str, Any], attempt: int) -> None:
        payload = envelope_data["payload"]
        self.runs[job_seq] = (
            str(payload.get("session_id", payload.get("run_id"))),
            int(payload["terminal_end_seq"]),
        )
        super().start(handler_id, job_seq, envelope_data, attempt)


class RedriveModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="omray-redrive-"))
        self.path = self.directory / "queue.sqlite"
        self.store = QueueStore(self.path)
        self.rows = _Rows(self.path)
        self.now = 1000.0
        self.outage = False
        self.next_job = 0
        self.end_seq = {session: 0 for session in SESSIONS + POISONED}
        self.cursor = {session: 0 for session in SESSIONS + POISONED}  # the session's coverage
        self.fix = "success"
        self.observed: dict[tuple[str, int], int] = {}
        self.settings_version = 0
        self.queue = self._new_actor()

    def _new_actor(self) -> QueueActor:
        self.workers = _ObservingWorkers(self.rows)
        return QueueActor(
            self.store,
            self.workers,
            policy=RetryPolicy(base_delay_s=1.0),
            max_in_flight=3,
            capacity={"observational_memory.observe_boundary": 2},
            clock=lambda: self.now,
            start_loop=False,
        )

    @initialize(fix=st.sampled_from(["success", "settings"]))
    def how_the_user_fixes_it(self, fix: str) -> None:
        self.fix = fix

    def teardown(self) -> None:
        try:
            self.outage = False
            if self.fix == "settings":
                self._fixed_by_settings()
            self._drain()
            for db_path in sorted({_db(session) for session in SESSIONS}):
                session = next(s for s in SESSIONS if _db(s) == db_path)
                self.turn_ends(session)  # a new turn: its success shows the cause is gone
            self._drain()
            capped = {
                key[1] for seq, key, state, _ in self.rows.all() if state == "failed" and self._capped(seq)
            }
            for session in SESSIONS:
                if not any(self._session_of(job_id) == session for job_id in capped):
                    self._check_observed_once(session)
            self.queue.retry_failed()
            self._drain()
            for session in SESSIONS:
                self._check_observed_once(session)
        finally:
            self.queue.stop()
            self.store.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _fixed_by_settings(self) -> None:
        """The endpoint stays down until every job still queued gave up; then the user fixes the
        settings and a turn of each database is accepted under them, whose own job fails for a
        cause of its own (no success shows the endpoint back): the settings change alone re-drives
        every failed job, capped ones included."""
        self.outage = True
        self._drain()
        self.outage = False
        self.settings_version += 1
        for poisoned in POISONED:
            self.turn_ends(poisoned)
        self._drain()
        for session in SESSIONS:
            self._check_observed_once(session)

    def _capped(self, job_seq: int) -> bool:
        import contextlib
        import sqlite3

        with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as conn:
            row = conn.execute(
                "SELECT redrives, redriven_to FROM omray_job WHERE job_seq = ?", (job_seq,)
            ).fetchone()
        return bool(row[1] is None and row[0] >= AUTOMATIC_REDRIVES)

    def _session_of(self, job_id: str) -> str:
        return job_id.split(":")[0]

    def _check_observed_once(self, session: str) -> None:
        for seq in range(1, self.end_seq[session] + 1):
            assert self.observed.get((session, seq)) == 1, (
                f"{session} event {seq}: {self.observed.get((session, seq))}"
            )

    def _drain(self) -> None:
        for _ in range(600):
            for job_seq, attempt, job_id in list(self.workers.running):
                self._deliver(job_seq, attempt, job_id)
            self.queue.tick(0)
            self.now += 30
            if self.queue.is_idle() and not self.workers.running:
                return
        raise AssertionError("the queue did not drain")

    @rule(session=st.sampled_from(SESSIONS))
    def turn_ends(self, session: str) -> None:
        self.next_job += 1
        self.end_seq[session] += 3
        job = observe(f"{session}:j{self.next_job}", session, self.end_seq[session], db_path=_db(session))
        fingerprint = f"{self.settings_version:064x}"
        job = job.model_copy(
            update={"payload": job.payload.model_copy(update={"settings_fingerprint": fingerprint})}
        )
        self.queue._accept(job)
        self.queue.commit()

    @rule()
    def endpoint_goes_down(self) -> None:
        self.outage = True

    @rule()
    def endpoint_comes_back(self) -> None:
        self.outage = False

    @rule(fixes=st.booleans())
    def user_changes_settings(self, fixes: bool) -> None:
        self.settings_version += 1
        self.outage = self.outage and not fixes

    @precondition(lambda self: bool(self.workers.running))
    @rule(data=st.data())
    def worker_finishes(self, data: st.DataObject) -> None:
        job_seq, attempt, job_id = data.draw(st.sampled_from(self.workers.running))
        self._deliver(job_seq, attempt, job_id)

    def _deliver(self, job_seq: int, attempt: int, job_id: str) -> None:
        self.workers.running.remove((job_seq, attempt, job_id))
        if self._session_of(job_id) in POISONED:
            result = JobFailed(job_id=job_id, retryable=False, reason=REASON_INVALID_PAYLOAD).model_dump()
        elif self.outage:
            result = JobFailed(job_id=job_id, retryable=True, reason="model_unreachable").model_dump()
        else:
            session, end = self.workers.runs[job_seq]
            for seq in range(self.cursor[session] + 1, end + 1):  # from coverage, as the Observer
                self.observed[(session, seq)] = self.observed.get((session, seq), 0) + 1
            self.cursor[session] = max(self.cursor[session], end)
            result = JobSucceeded(job_id=job_id).model_dump()
        self.workers.finished.append((job_seq, result))

    @rule()
    def queue_steps(self) -> None:
        self.queue.tick(0)

    @rule(seconds=st.sampled_from([1.0, 5.0, 30.0]))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds

    @rule()
    def queue_restarts(self) -> None:
        self.queue.stop()
        self.queue = self._new_actor()

    @rule()
    def user_runs_omray_retry(self) -> None:
        self.queue.retry_failed()

    @invariant()
    def nothing_is_observed_twice(self) -> None:
        assert all(count == 1 for count in self.observed.values())


RedriveModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestRedrive = RedriveModel.TestCase


def test_a_job_whose_last_attempt_is_lost_at_a_restart_is_re_driven_later() -> None:
    """Found by the model above: the restore's first commit sends starts, one is lost and uses up its
    job's last attempt, before the actor had its re-drive tracker; that job waited forever."""
    model = RedriveModel()
    try:
        for session in ("s1", "s0", "s0", "s1", "s2"):
            model.turn_ends(session)
        model.queue_restarts()
        model.queue_steps()
        model.queue_restarts()
        model.queue_restarts()
        model.time_passes(5.0)
        model.queue_restarts()
        model._drain()
        model.turn_ends("s0")  # a success in s2's database: the cause is shown gone
        model._drain()
        model._check_observed_once("s2")
    finally:
        model.queue.stop()
        model.store.close()
        shutil.rmtree(model.directory, ignore_errors=True)
