"""Transitions of the queue state machine, asserted on the commands it returns."""

from __future__ import annotations

import json

import pytest

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
    QueueStateError,
    ScheduleRetry,
    WakeAt,
)
from protocol.jobs import SEMANTIC_INDEX_HANDLER
from protocol.outcomes import JobFailed, JobSucceeded

from .helpers import envelope, stored


def ok(job_id: str) -> JobSucceeded:
    return JobSucceeded(job_id=job_id)


def fail(job_id: str, reason: str = "transient_runtime") -> JobFailed:
    return JobFailed(job_id=job_id, retryable=True, reason=reason, error_class="RuntimeError")


def dispatches(commands: list[Command]) -> list[tuple[int, int]]:
    return [(c.job_seq, c.attempt) for c in commands if isinstance(c, Dispatch)]


def test_accept_then_dispatch_then_success() -> None:
    q = QueueState()
    assert q.accept(envelope("a"), 1, now=0.0) == []
    assert (q.depth, q.in_flight) == (1, 0)
    [cmd] = q.next_dispatch(now=0.0)
    assert cmd == Dispatch(1, "a", SEMANTIC_INDEX_HANDLER, 1, envelope("a").payload)
    assert (q.depth, q.in_flight) == (0, 1)
    assert q.on_outcome(1, ok("a"), now=1.0, attempt=1) == [MarkSucceeded(1, "a", 1)]
    assert (q.depth, q.in_flight) == (0, 0)
    assert q.next_dispatch(now=1.0) == []


def test_one_job_at_a_time_in_sequence_order() -> None:
    q = QueueState()
    for seq, job_id in ((3, "c"), (1, "a"), (2, "b")):
        q.accept(envelope(job_id), seq, now=0.0)
    order = []
    for _ in range(3):
        [d] = q.next_dispatch(now=0.0)
        assert isinstance(d, Dispatch)
        assert q.next_dispatch(now=0.0) == []  # the single slot is taken
        order.append(d.job_id)
        q.on_outcome(d.job_seq, ok(d.job_id), now=0.0)
    assert order == ["a", "b", "c"]


def test_always_failing_job_makes_four_attempts_then_one_give_up_and_one_event() -> None:
    q = QueueState()
    q.accept(envelope("a", session_id="run-7"), 1, now=0.0)
    now = 0.0
    all_commands: list[Command] = []
    for _ in range(10):
        cmds = q.next_dispatch(now)
        all_commands += cmds
        ds = [c for c in cmds if isinstance(c, Dispatch)]
        if not ds:
            wakes = [c for c in cmds if isinstance(c, WakeAt)]
            if not wakes:
                break
            now = wakes[0].time
            continue
        all_commands += q.on_outcome(1, fail("a"), now, attempt=ds[0].attempt)
    assert dispatches(all_commands) == [(1, 1), (1, 2), (1, 3), (1, 4)]
    retries = [c for c in all_commands if isinstance(c, ScheduleRetry)]
    assert [(r.attempts, r.reason) for r in retries] == [(n, "transient_runtime") for n in (1, 2, 3)]
    gave_up = [c for c in all_commands if isinstance(c, GiveUp)]
    events = [c for c in all_commands if isinstance(c, EmitJobFailed)]
    assert gave_up == [GiveUp(1, "a", 4, "transient_runtime")]
    assert len(events) == 1
    assert events[0].session_id == "run-7"
    assert events[0].event.model_dump() | {"message": ""} == {
        "message": "",
        "reason": "retry_exhausted",
        "handler_id": SEMANTIC_INDEX_HANDLER,
        "job_id": "a",
        "retry_count": 3,
        "attempts": 4,
    }
    assert (q.depth, q.in_flight) == (0, 0)


def test_backoff_values_and_wake_at() -> None:
    q = QueueState(RetryPolicy(base_delay_s=5.0, multiplier=3.0, max_delay_s=30.0))
    q.accept(envelope("a"), 1, now=0.0)
    expected_not_before = []
    now = 100.0
    for attempt, delay in ((1, 5.0), (2, 15.0), (3, 30.0)):
        [d] = q.next_dispatch(now)
        assert isinstance(d, Dispatch) and d.attempt == attempt
        [retry] = q.on_outcome(1, fail("a"), now, attempt=attempt)
        assert isinstance(retry, ScheduleRetry)
        assert retry.not_before == now + delay
        expected_not_before.append(retry.not_before)
        # Not yet eligible: the queue asks to be woken at exactly not_before.
        assert q.next_dispatch(now + delay - 0.001) == [WakeAt(now + delay)]
        now += delay
    assert expected_not_before == [105.0, 120.0, 150.0]


def test_retry_backoff_does_not_block_later_jobs_and_retry_keeps_its_place() -> None:
    q = QueueState()
    for seq, job_id in ((1, "a"), (2, "b"), (3, "c")):
        q.accept(envelope(job_id), seq, now=0.0)
    [d] = q.next_dispatch(0.0)
    assert isinstance(d, Dispatch) and d.job_id == "a"
    q.on_outcome(1, fail("a"), 0.0, attempt=1)  # a waits until t=1.0
    [d] = q.next_dispatch(0.5)
    assert isinstance(d, Dispatch) and d.job_id == "b"  # b overtakes the waiting retry
    q.on_outcome(2, ok("b"), 0.6, attempt=1)
    # Once due, a (seq 1) goes before c (seq 3), which was accepted after it.
    [d] = q.next_dispatch(2.0)
    assert isinstance(d, Dispatch) and (d.job_id, d.attempt) == ("a", 2)


def test_wake_at_only_when_a_slot_is_free() -> None:
    q = QueueState()
    q.accept(envelope("a"), 1, now=0.0)
    q.accept(envelope("b"), 2, now=0.0)
    q.next_dispatch(0.0)
    q.on_outcome(1, fail("a"), 0.0, attempt=1)
    [d] = q.next_dispatch(0.0)
    assert isinstance(d, Dispatch) and d.job_id == "b"
    assert q.next_dispatch(0.0) == []  # slot busy with b: the outcome will trigger the next step
    q.on_outcome(2, ok("b"), 0.2)
    assert q.next_dispatch(0.2) == [WakeAt(1.0)]


def test_duplicate_pending_or_running_id_is_not_queued_twice() -> None:
    q = QueueState()
    q.accept(envelope("a"), 1, now=0.0)
    assert q.accept(envelope("a"), 2, now=0.0) == [AlreadyQueued(job_seq=2, job_id="a", existing_seq=1)]
    assert q.depth == 1 and q.active_seq("a", "/data/a/om.sqlite") == 1
    q.next_dispatch(0.0)
    assert q.accept(envelope("a"), 3, now=0.0) == [AlreadyQueued(job_seq=3, job_id="a", existing_seq=1)]
    assert (q.depth, q.in_flight) == (0, 1)
    q.on_outcome(1, ok("a"), 0.0)
    # Finished: the same id may be queued again as a new job.
    assert q.accept(envelope("a"), 4, now=0.0) == []
    assert q.active_seq("a", "/data/a/om.sqlite") == 4


def test_seq_reused_by_another_job_is_a_contract_error() -> None:
    q = QueueState()
    q.accept(envelope("a"), 1, now=0.0)
    with pytest.raises(QueueStateError, match="job_seq 1"):
        q.accept(envelope("b"), 1, now=0.0)


def test_late_and_duplicate_outcomes_are_ignored() -> None:
    q = QueueState()
    q.accept(envelope("a"), 1, now=0.0)
    assert q.on_outcome(1, ok("a"), 0.0) == [OutcomeIgnored(1, "not_in_flight")]  # never dispatched
    q.next_dispatch(0.0)
    assert q.on_outcome(1, ok("zzz"), 0.0) == [OutcomeIgnored(1, "job_id_mismatch")]
    assert q.on_outcome(1, ok("a"), 0.0, attempt=1) == [MarkSucceeded(1, "a", 1)]
    # A second delivery of the same result (or a failure arriving late) changes nothing.
    assert q.on_outcome(1, ok("a"), 0.0, attempt=1) == [OutcomeIgnored(1, "not_in_flight")]
    assert q.on_outcome(1, fail("a"), 0.0, attempt=1) == [OutcomeIgnored(1, "not_in_flight")]
    assert q.on_worker_lost(1, 0.0) == [OutcomeIgnored(1, "not_in_flight")]
    assert q.next_dispatch(0.0) == []
    assert q.on_outcome(99, ok("b"), 0.0) == [OutcomeIgnored(99, "not_in_flight")]


def test_outcome_of_an_older_attempt_is_ignored() -> None:
    q = QueueState()
    q.accept(envelope("a"), 1, now=0.0)
    q.next_dispatch(0.0)
    q.on_worker_lost(1, 0.0, attempt=1)
    [d] = q.next_dispatch(5.0)
    assert isinstance(d, Dispatch) and d.attempt == 2
    # The first attempt's worker was not dead after all and reports late.
    assert q.on_outcome(1, ok("a"), 5.0, attempt=1) == [OutcomeIgnored(1, "attempt_mismatch")]
    assert q.in_flight == 1
    assert q.on_outcome(1, ok("a"), 5.0, attempt=2) == [MarkSucceeded(1, "a", 2)]


def test_worker_lost_counts_as_a_retryable_failed_attempt() -> None:
    q = QueueState(RetryPolicy(max_retries=1))
    q.accept(envelope("a"), 1, now=0.0)
    q.next_dispatch(0.0)
    assert q.on_worker_lost(1, 10.0) == [ScheduleRetry(1, "a", 1, 11.0, "worker_crashed")]
    q.next_dispatch(11.0)
    cmds = q.on_worker_lost(1, 12.0)
    assert cmds[0] == GiveUp(1, "a", 2, "worker_crashed")
    assert isinstance(cmds[1], EmitJobFailed) and cmds[1].event.attempts == 2


def test_max_in_flight_greater_than_one() -> None:
    q = QueueState(max_in_flight=2)
    for seq, job_id in ((1, "a"), (2, "b"), (3, "c")):
        q.accept(envelope(job_id), seq, now=0.0)
    assert dispatches(q.next_dispatch(0.0)) == [(1, 1), (2, 1)]
    assert q.in_flight == 2 and q.depth == 1
    assert q.next_dispatch(0.0) == []
    q.on_outcome(2, ok("b"), 0.0)  # finishing out of order frees one slot
    assert dispatches(q.next_dispatch(0.0)) == [(3, 1)]
    q.on_outcome(1, fail("a"), 0.0)
    assert q.next_dispatch(0.0) == [WakeAt(1.0)]
    assert dispatches(q.next_dispatch(1.0)) == [(1, 2)]


def test_max_in_flight_must_be_positive() -> None:
    with pytest.raises(QueueStateError):
        QueueState(max_in_flight=0)


def test_restore_redispatches_interrupted_job_first_keeping_its_attempts() -> None:
    rows = [
        stored(1, envelope("a"), "pending", attempts=1, not_before=50.0, failure_reason="conflict"),
        stored(2, envelope("b"), "running", attempts=2),
        stored(3, envelope("c"), "pending"),
    ]
    q, cmds = QueueState.restore(rows, now=100.0)
    assert cmds == []
    assert (q.depth, q.in_flight) == (3, 0)
    assert dispatches(q.next_dispatch(100.0)) == [(2, 3)]  # interrupted attempt 2 counted
    q.on_outcome(2, ok("b"), 100.0, attempt=3)
    assert dispatches(q.next_dispatch(100.0)) == [(1, 2)]  # due retry before the newer job
    q.on_outcome(1, ok("a"), 100.0, attempt=2)
    assert dispatches(q.next_dispatch(100.0)) == [(3, 1)]


def test_restore_ignores_backoff_of_interrupted_job() -> None:
    rows = [stored(5, envelope("a"), "running", attempts=2, not_before=999.0)]
    q, _ = QueueState.restore(rows, now=0.0)
    assert dispatches(q.next_dispatch(0.0)) == [(5, 3)]


def test_restore_gives_up_on_interrupted_last_attempt() -> None:
    rows = [stored(4, envelope("a", session_id="r"), "running", attempts=4)]
    q, cmds = QueueState.restore(rows, now=0.0)
    assert cmds[0] == GiveUp(4, "a", 4, "interrupted")
    assert isinstance(cmds[1], EmitJobFailed)
    assert cmds[1].session_id == "r" and cmds[1].event.reason == "retry_exhausted"
    assert len(cmds) == 2
    assert (q.depth, q.in_flight) == (0, 0)
    assert q.next_dispatch(0.0) == []


def test_restore_keeps_lowest_seq_of_duplicate_rows() -> None:
    rows = [stored(7, envelope("a"), "pending"), stored(3, envelope("a"), "pending")]
    q, cmds = QueueState.restore(rows, now=0.0)
    assert cmds == [AlreadyQueued(job_seq=7, job_id="a", existing_seq=3)]
    assert q.active_seq("a", "/data/a/om.sqlite") == 3 and q.depth == 1


def test_restore_rejects_two_rows_with_one_seq() -> None:
    rows = [stored(1, envelope("a"), "pending"), stored(1, envelope("b"), "pending")]
    with pytest.raises(QueueStateError):
        QueueState.restore(rows, now=0.0)


def test_snapshot_is_json_and_has_no_payload() -> None:
    q = QueueState(max_in_flight=2)
    q.accept(envelope("a"), 1, now=0.0)
    q.accept(envelope("b"), 2, now=0.0)
    q.next_dispatch(0.0)
    q.on_outcome(1, fail("a"), 0.0)
    snap = q.snapshot()
    text = json.dumps(snap)
    assert "om.sqlite" not in text
    assert snap["depth"] == 1 and snap["in_flight"] == 1 and snap["max_attempts"] == 4
    assert snap["jobs"] == [
        {
            "job_seq": 1,
            "job_id": "a",
            "handler_id": SEMANTIC_INDEX_HANDLER,
            "session_id": "session-1",
            "status": "pending",
            "attempts": 1,
            "held": 0,
            "not_before": 1.0,
            "last_reason": "transient_runtime",
            "carrier": None,
        },
        {
            "job_seq": 2,
            "job_id": "b",
            "handler_id": SEMANTIC_INDEX_HANDLER,
            "session_id": "session-1",
            "status": "running",
            "attempts": 1,
            "held": 0,
            "not_before": None,
            "last_reason": None,
            "carrier": 2,
        },
    ]


def test_a_give_up_after_a_corrupt_events_line_says_where() -> None:
    from protocol.outcomes import EventsLocation

    q = QueueState(RetryPolicy(max_retries=0))
    q.accept(envelope("a", session_id="r"), 1, now=0.0)
    q.next_dispatch(0.0)
    where = EventsLocation(path="/data/r/events.jsonl", line_no=28, seq=None, after_seq=27)
    failure = JobFailed(job_id="a", retryable=True, reason="events_file_corrupt", events_location=where)
    give_up, emit = q.on_outcome(1, failure, 1.0, attempt=1)
    assert isinstance(give_up, GiveUp) and isinstance(emit, EmitJobFailed)
    assert emit.event.events_location == where


def test_waiting_counts_only_heads_a_bigger_pool_could_start() -> None:
    from actors.queue.state import QueueState

    state = QueueState(max_in_flight=10, capacity={"observational_memory.semantic_index": 1})
    for n in range(3):
        state.accept(envelope(f"j{n}"), n + 1, 0.0)
    state.accept(envelope("same-lane", db_path="/data/j0/om.sqlite"), 4, 0.0)
    assert len(state.next_dispatch(0.0)) == 1
    # j1 and j2 wait for a slot; the job behind j0 in its lane waits for its lane, not for a slot.
    assert state.waiting_by_handler(0.0) == {"observational_memory.semantic_index": 2}
    state.set_capacity("observational_memory.semantic_index", 3)
    assert len(state.next_dispatch(0.0)) == 2
    assert state.waiting_by_handler(0.0) == {}
