"""Budget holds in the queue's state machine, step by step (the stateful test plays them at random).

A run that answers ``JobHeld`` (its project's daily model budget is used up) leaves its jobs in their
lanes, not counted as attempts; the database's observe and reflect jobs wait, its other work and every
other database go on; one job re-checks every ``hold_recheck_s``; the hold ends with the day, with a
re-check that is not held, at once after ``recheck_holds`` or a job sent under other settings.
"""

from __future__ import annotations

import json

from actors.queue.commands import Dispatch, EmitJobHeld, GiveUp, HoldJob, MarkSucceeded, ScheduleRetry, WakeAt
from actors.queue.retry import RetryPolicy
from actors.queue.state import Command, QueueState
from actors.queue.writes import writes_for
from protocol.canonical import sha256_hex
from protocol.jobs import JobEnvelope
from protocol.outcomes import JOB_HELD_EVENT_TYPE, JobFailed, JobHeld, JobSucceeded
from protocol.queue_rows import JobHeldWrite, RuntimeEventWrite, iso_utc

from .helpers import envelope, observe, reflect, stored

DB = "/data/a/om.sqlite"
OTHER_DB = "/data/b/om.sqlite"
DAY_END = 86_400.0
FP_OLD, FP_NEW = sha256_hex("old settings"), sha256_hex("new settings")


def held(job_id: str, *, until: float = DAY_END, fingerprint: str | None = FP_OLD) -> JobHeld:
    return JobHeld(
        job_id=job_id,
        reason="budget_tokens",
        until=until,
        spent=2_000_100,
        cap=2_000_000,
        settings_fingerprint=fingerprint,
    )


def started(commands: list[Command]) -> list[tuple[int, int]]:
    return [(c.job_seq, c.attempt) for c in commands if isinstance(c, Dispatch)]


def with_fingerprint(job: JobEnvelope, fingerprint: str) -> JobEnvelope:
    payload = job.payload.model_copy(update={"settings_fingerprint": fingerprint})
    return job.model_copy(update={"payload": payload})


def held_queue() -> QueueState:
    """Sessions s1 and s2 of DB each have an observe job; s1's run finds the budget used up at t=0."""
    q = QueueState(RetryPolicy(), max_in_flight=8, hold_recheck_s=60.0)
    q.accept(observe("o1", "s1", 3, db_path=DB), 1, 0.0)
    q.accept(observe("o2", "s2", 3, db_path=DB), 2, 0.0)
    assert started(q.next_dispatch(0.0)) == [(1, 1), (2, 1)]
    commands = q.on_outcome(1, held("o1"), 0.0, attempt=1)
    assert [type(c) for c in commands] == [HoldJob, EmitJobHeld]
    return q


def test_a_held_run_keeps_its_jobs_waiting_uncounted_and_says_why_once() -> None:
    q = held_queue()
    # s2's run was in flight already: it finds the budget used up too; the hold is renewed, no new event.
    renewed = q.on_outcome(2, held("o2"), 1.0, attempt=1)
    assert renewed == [HoldJob(2, "o2", 1, 1, 61.0, "budget_tokens")]
    assert q.depth == 2 and q.in_flight == 0
    snapshot = q.snapshot()
    assert [(j["job_seq"], j["status"], j["attempts"], j["held"]) for j in snapshot["jobs"]] == [
        (1, "pending", 1, 1),
        (2, "pending", 1, 1),
    ]
    assert "om.sqlite" not in json.dumps(snapshot)  # the snapshot names no database
    # Nothing of DB's model work starts before the re-check, and the queue says when to look again.
    assert q.next_dispatch(30.0) == [WakeAt(61.0)]
    assert q.waiting_by_handler(30.0) == {}  # a bigger pool would not start held work
    [hold] = q.held(30.0)
    assert (hold["db_path"], hold["reason"], hold["jobs"], hold["until"]) == (DB, "budget_tokens", 2, DAY_END)
    assert q.held_projects == 1


def test_the_event_says_why_until_when_and_how_to_resume() -> None:
    q = QueueState(RetryPolicy(), max_in_flight=2)
    q.accept(observe("o1", "s1", 3, db_path=DB), 1, 0.0)
    q.next_dispatch(0.0)
    [hold, event] = q.on_outcome(1, held("o1"), 0.0, attempt=1)
    assert isinstance(event, EmitJobHeld) and (event.session_id, event.db_path) == ("s1", DB)
    assert event.event.reason == "budget_tokens" and event.event.until == iso_utc(DAY_END)
    message = event.event.message
    assert "budget.daily_tokens" in message and "nothing is lost" in message
    assert "1970-01-02 00:00 UTC" in message
    writes = writes_for([(hold, 0.0), (event, 0.0)])
    assert writes[0] == JobHeldWrite(
        job_seq=1, held_attempts=1, not_before=iso_utc(60.0), failure_reason="budget_tokens"
    )
    assert isinstance(writes[1], RuntimeEventWrite) and writes[1].event_type == JOB_HELD_EVENT_TYPE
    assert writes[1].payload == event.event.model_dump() and writes[1].db_path == DB


def test_other_work_goes_on_while_a_database_is_held() -> None:
    q = held_queue()
    q.on_outcome(2, JobSucceeded(job_id="o2"), 0.0, attempt=1)
    q.accept(observe("o3", "s2", 6, db_path=DB), 3, 1.0)  # a model job of the held database
    q.accept(reflect("r1", "s9", db_path=DB), 4, 1.0)  # another one
    q.accept(envelope("i1", db_path=DB), 5, 1.0)  # its index work
    q.accept(observe("x1", "s1", 3, db_path=OTHER_DB), 6, 1.0)  # another project
    assert started(q.next_dispatch(1.0)) == [(5, 1), (6, 1)]


def test_one_job_rechecks_and_a_recheck_still_held_renews_the_hold() -> None:
    q = held_queue()
    q.on_outcome(2, held("o2"), 0.0, attempt=1)
    # At the re-check one job starts (the lane first in order), the other waits for its answer.
    assert started(q.next_dispatch(60.0)) == [(1, 2)]
    assert started(q.next_dispatch(61.0)) == []
    q.on_outcome(1, held("o1"), 61.0, attempt=2)
    assert q.next_dispatch(62.0) == [WakeAt(121.0)]
    assert started(q.next_dispatch(121.0)) == [(1, 3)]  # attempts go on; held runs do not count


def test_a_recheck_the_budget_allows_releases_every_held_lane() -> None:
    q = held_queue()
    q.on_outcome(2, held("o2"), 0.0, attempt=1)
    assert started(q.next_dispatch(60.0)) == [(1, 2)]
    assert q.on_outcome(1, JobSucceeded(job_id="o1"), 65.0, attempt=2)[0] == MarkSucceeded(1, "o1", 2)
    assert started(q.next_dispatch(65.0)) == [(2, 2)]
    assert q.held(65.0) == [] and q.held_projects == 0


def test_a_recheck_that_fails_otherwise_releases_the_hold_and_retries_as_usual() -> None:
    q = held_queue()
    q.on_outcome(2, held("o2"), 0.0, attempt=1)
    q.next_dispatch(60.0)
    failure = JobFailed(job_id="o1", retryable=True, reason="model_unreachable")
    [retry] = q.on_outcome(1, failure, 60.0, attempt=2)
    # The first failure of its second run: one attempt counted, so the first retry's 1 s backoff.
    assert retry == ScheduleRetry(1, "o1", 2, 61.0, "model_unreachable")
    assert started(q.next_dispatch(60.0)) == [(2, 2)]


def test_the_next_utc_day_releases_every_held_lane() -> None:
    q = held_queue()
    q.on_outcome(2, held("o2"), 0.0, attempt=1)
    assert started(q.next_dispatch(60.0)) == [(1, 2)]
    q.on_outcome(1, held("o1"), 60.0, attempt=2)
    assert started(q.next_dispatch(DAY_END)) == [(1, 3), (2, 2)]
    assert q.held_projects == 0


def test_omray_retry_and_a_settings_change_recheck_at_once() -> None:
    q = held_queue()
    q.on_outcome(2, held("o2"), 0.0, attempt=1)
    assert q.recheck_holds(OTHER_DB, 5.0) == 0
    assert q.recheck_holds(DB, 5.0) == 1
    assert started(q.next_dispatch(5.0)) == [(1, 2)]
    q.on_outcome(1, held("o1"), 6.0, attempt=2)
    # A job sent under the same settings changes nothing; one sent under new settings re-checks now.
    q.accept(with_fingerprint(observe("o3", "s3", 3, db_path=DB), FP_OLD), 3, 7.0)
    assert started(q.next_dispatch(7.0)) == []
    q.accept(with_fingerprint(observe("o4", "s4", 3, db_path=DB), FP_NEW), 4, 8.0)
    assert started(q.next_dispatch(8.0)) == [(1, 3)]


def test_held_runs_never_use_up_a_jobs_attempts() -> None:
    q = QueueState(RetryPolicy(), max_in_flight=1, hold_recheck_s=1.0)
    q.accept(observe("o1", "s1", 3, db_path=DB), 1, 0.0)
    now = 0.0
    for attempt in range(1, 11):  # ten held runs
        assert started(q.next_dispatch(now)) == [(1, attempt)]
        q.on_outcome(1, held("o1"), now, attempt=attempt)
        now += 1.0
    for attempt in range(11, 14):  # then three failures are retried...
        assert started(q.next_dispatch(now + 100)) == [(1, attempt)]
        commands = q.on_outcome(
            1, JobFailed(job_id="o1", retryable=True, reason="x_y"), now + 100, attempt=attempt
        )
        assert isinstance(commands[0], ScheduleRetry)
        now += 200
    assert started(q.next_dispatch(now + 100)) == [(1, 14)]
    commands = q.on_outcome(1, JobFailed(job_id="o1", retryable=True, reason="x_y"), now + 100, attempt=14)
    # ...and the fourth counted attempt gives up, reporting 4 attempts, not 14.
    assert isinstance(commands[0], GiveUp)
    assert commands[1].event.attempts == 4  # type: ignore[union-attr]


def test_a_restart_keeps_held_runs_uncounted_and_rechecks_after_not_before() -> None:
    row = stored(
        1,
        observe("o1", "s1", 3, db_path=DB),
        "pending",
        attempts=7,
        not_before=60.0,
        failure_reason="budget_tokens",
        held_attempts=6,
    )
    q, commands = QueueState.restore([row], now=0.0)
    assert commands == []  # 1 counted attempt of 4: it stays
    assert q.next_dispatch(10.0) == [WakeAt(60.0)]
    assert started(q.next_dispatch(60.0)) == [(1, 8)]
    spent = stored(2, observe("o2", "s2", 3, db_path=DB), "running", attempts=9, held_attempts=5)
    _, commands = QueueState.restore([spent], now=0.0)
    assert isinstance(commands[0], GiveUp)  # 4 counted attempts, the last one interrupted
