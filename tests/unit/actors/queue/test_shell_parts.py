"""The parts the QueueActor shell delegates to, without the actor: accepting jobs (``intake``),
applying a worker's answer (``attempts``), sending starts (``starts``), running a group commit
(``committer``) and what the queue reports (``reports``, ``figures``). No Ray, no threads."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from actors.queue.attempts import Attempt, apply_answer
from actors.queue.commands import Dispatch, GiveUp, MarkSucceeded, OutcomeIgnored, ScheduleRetry
from actors.queue.commits import CommitLog
from actors.queue.committer import GroupCommitter
from actors.queue.figures import ModelUsage, QueueFigures, state_figures
from actors.queue.intake import accept_jobs
from actors.queue.reports import QueueReports, queue_status
from actors.queue.retry import RetryPolicy
from actors.queue.starts import Starter, envelope_of, sends_for
from actors.queue.state import QueueState
from actors.queue.writes import Accept
from protocol.errors import StorageError
from protocol.outcomes import JobFailed, JobSucceeded
from protocol.queue_rows import JobWrite

from .helpers import envelope


def _running(state: QueueState, job_id: str = "j1", seq: int = 1) -> Dispatch:
    state.accept(envelope(job_id), seq, 0.0)
    (start,) = state.next_dispatch(0.0)
    assert isinstance(start, Dispatch)
    return start


# --- intake.accept_jobs --------------------------------------------------------------------------


def test_new_jobs_are_numbered_in_order_and_their_starts_ride_with_their_accepts() -> None:
    state, log = QueueState(max_in_flight=4), CommitLog()
    wait, next_seq = accept_jobs(state, log, [envelope("a"), envelope("b")], 7, 0.0)
    assert next_seq == 9 and wait is not None and not log.is_durable(wait)
    items = [item for item, _ in log.take().items]  # type: ignore[union-attr]
    assert items[:2] == [Accept(7, envelope("a")), Accept(8, envelope("b"))]
    assert [(d.job_seq, d.job_id) for d in items[2:] if isinstance(d, Dispatch)] == [(7, "a"), (8, "b")]


def test_a_job_key_already_queued_is_not_numbered_again_and_waits_only_while_not_durable() -> None:
    state, log = QueueState(), CommitLog()
    first, next_seq = accept_jobs(state, log, [envelope("a")], 1, 0.0)
    again, after = accept_jobs(state, log, [envelope("a")], next_seq, 1.0)
    assert (again, after) == (first, next_seq)  # same commit to wait for, no sequence number used
    batch = log.take()
    assert batch is not None and [item.job_seq for item, _ in batch.items if isinstance(item, Accept)] == [1]
    log.written(batch)
    assert accept_jobs(state, log, [envelope("a")], next_seq, 2.0) == (None, next_seq)


# --- attempts.apply_answer -----------------------------------------------------------------------


def test_a_success_of_the_sent_attempt_finishes_the_job_and_reports_its_usage() -> None:
    state = QueueState()
    start = _running(state)
    sent = Attempt("j1", start.attempt, start.handler_id, 0.0)
    raw = JobSucceeded(job_id="j1", detail={"prompt_tokens": 3, "completion_tokens": 1}).model_dump()
    answer = apply_answer(state, 1, raw, sent, 5.0)
    assert answer.commands == [MarkSucceeded(1, "j1", 1)] and answer.kind == "succeeded"
    assert answer.usage == {"prompt_tokens": 3, "completion_tokens": 1}


def test_a_restarted_queue_applies_a_success_but_reports_no_usage_for_an_attempt_it_did_not_send() -> None:
    state = QueueState()
    _running(state)
    answer = apply_answer(state, 1, JobSucceeded(job_id="j1").model_dump(), None, 5.0)
    assert answer.commands == [MarkSucceeded(1, "j1", 1)] and answer.usage is None


@pytest.mark.parametrize(
    "raw",
    [None, {"kind": "done", "job_id": "j1"}, JobSucceeded(job_id="someone-else").model_dump()],
    ids=["dead worker", "malformed", "another job"],
)
def test_an_answer_that_counts_as_lost_is_a_lost_worker_retried_by_policy(raw: Any) -> None:
    state = QueueState(RetryPolicy(base_delay_s=2.0))
    start = _running(state)
    answer = apply_answer(state, 1, raw, Attempt("j1", start.attempt, start.handler_id, 0.0), 5.0)
    assert answer.kind == "worker_lost" and answer.usage is None
    assert answer.commands == [ScheduleRetry(1, "j1", 1, 7.0, "worker_crashed")]


def test_an_answer_of_an_older_attempt_is_ignored_and_a_failure_is_applied() -> None:
    state = QueueState(RetryPolicy(max_retries=0))
    start = _running(state)
    stale = apply_answer(state, 1, JobSucceeded(job_id="j1").model_dump(), Attempt("j1", 9, "h", 0.0), 1.0)
    assert stale.commands == [OutcomeIgnored(1, "attempt_mismatch")] and stale.kind == "succeeded"
    failed = JobFailed(job_id="j1", retryable=True, reason="conflict").model_dump()
    answer = apply_answer(state, 1, failed, Attempt("j1", start.attempt, start.handler_id, 0.0), 1.0)
    assert answer.kind == "failed" and answer.commands[0] == GiveUp(1, "j1", 1, "conflict")


# --- starts.Starter ------------------------------------------------------------------------------


class _Pool:
    def __init__(self, *, refuse: Sequence[int] = (), many: bool = True, fail_one: bool = False) -> None:
        self.refuse, self.fail_one = set(refuse), fail_one
        self.sent: list[tuple[str, int, Mapping[str, Any], int]] = []
        self.calls = 0
        if many:
            self.start_many = self._start_many

    def start(self, handler_id: str, job_seq: int, envelope: Mapping[str, Any], attempt: int) -> None:
        if self.fail_one:
            raise ConnectionError("pool gone")
        self.calls += 1
        self.sent.append((handler_id, job_seq, envelope, attempt))

    def _start_many(self, starts: list[tuple[str, int, Mapping[str, Any], int]]) -> list[int]:
        self.calls += 1
        self.sent.extend(start for start in starts if start[1] not in self.refuse)
        return [start[1] for start in starts if start[1] in self.refuse]

    def poll(self, timeout_s: float) -> list[tuple[int, dict[str, Any] | None]]:
        return []


def _starts(count: int) -> list[Dispatch]:
    state = QueueState(max_in_flight=count)
    for n in range(1, count + 1):
        state.accept(envelope(f"j{n}"), n, 0.0)
    return [command for command in state.next_dispatch(0.0) if isinstance(command, Dispatch)]


def test_the_starts_of_a_commit_go_out_in_one_call_and_a_refused_one_is_lost() -> None:
    lost: list[tuple[int, str]] = []
    pool = _Pool(refuse=[2])
    starter = Starter(pool, threading.Lock(), lambda: 3.0, lambda c, why: lost.append((c.job_seq, why)))
    starts = _starts(3)
    starter.send(starts)
    assert pool.calls == 1 and [seq for _, seq, _, _ in pool.sent] == [1, 3]
    assert pool.sent[0][2] == envelope_of(starts[0]) and lost == [(2, "StartFailed")]
    assert [row["job_seq"] for row in starter.in_flight.snapshot(3.0)] == [1, 2, 3]  # the queue forgets 2


def test_a_pool_without_start_many_gets_one_call_per_start_and_a_failing_one_is_lost_by_class() -> None:
    lost: list[tuple[int, str]] = []
    pool = _Pool(many=False, fail_one=True)
    starter = Starter(pool, threading.Lock(), lambda: 0.0, lambda c, why: lost.append((c.job_seq, why)))
    starter.send(_starts(2))
    assert lost == [(1, "ConnectionError"), (2, "ConnectionError")]


def test_a_start_whose_envelope_cannot_be_built_is_left_out_of_the_sends() -> None:
    good = _starts(1)[0]
    broken = Dispatch(5, "", good.handler_id, 1, good.payload)  # an empty job id does not validate
    sends, unbuilt = sends_for([good, broken])
    assert [seq for _, seq, _, _ in sends] == [1] and unbuilt == [broken]


# --- committer.GroupCommitter --------------------------------------------------------------------


class _Store:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.written: list[list[JobWrite]] = []

    def apply_job_writes(self, writes: Sequence[JobWrite]) -> int:
        if self.fail:
            raise ConnectionError("store down")
        self.written.append(list(writes))
        return len(writes)


def test_a_commit_writes_everything_queued_in_one_transaction_then_carries_it_out() -> None:
    lock, store = threading.Lock(), _Store()
    committer = GroupCommitter(lock, store)  # type: ignore[arg-type]
    generation = committer.log.accept(1, envelope("a"), 0.0)
    committer.log.accept(2, envelope("b"), 0.0)
    carried: list[int] = []
    assert committer.commit(lambda batch: carried.append(len(batch.items)))
    assert [len(writes) for writes in store.written] == [2] and carried == [2]
    committer.await_durable(generation, timeout_s=0.0)  # durable: returns at once
    assert not committer.busy() and not committer.commit(lambda batch: None)


def test_a_failed_commit_keeps_its_batch_and_its_caller_is_told_to_dispatch_again() -> None:
    committer = GroupCommitter(threading.Lock(), _Store(fail=True))  # type: ignore[arg-type]
    generation = committer.log.accept(1, envelope("a"), 0.0)
    with pytest.raises(ConnectionError):
        committer.commit(lambda batch: None)
    assert len(committer.log) == 1 and committer.busy()
    with pytest.raises(StorageError, match="dispatch it again"):
        committer.await_durable(generation, timeout_s=0.0)


# --- reports and figures -------------------------------------------------------------------------


class _Metrics:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def queue_figures(self, figures: QueueFigures) -> None:
        self.calls.append(("figures", figures))

    def attempt_finished(self, handler_id: str, outcome: str, seconds: float, attempt: int) -> None:
        self.calls.append(("attempt", (outcome, seconds, attempt)))

    def job_failed(self, handler_id: str, reason: str) -> None:
        self.calls.append(("failed", reason))

    def model_usage(self, handler_id: str, usage: ModelUsage) -> None:
        self.calls.append(("usage", dict(usage.tokens)))


def test_an_answer_reports_its_usage_then_its_attempt_and_nothing_for_an_attempt_not_sent() -> None:
    metrics, state = _Metrics(), QueueState()
    start = _running(state)
    reports = QueueReports(metrics, lambda: 0.0)
    sent = Attempt("j1", start.attempt, start.handler_id, 1.0)
    raw = JobSucceeded(job_id="j1", detail={"prompt_tokens": 3, "completion_tokens": 1}).model_dump()
    reports.answered(sent, apply_answer(state, 1, raw, sent, 4.0), 4.0)
    assert metrics.calls == [
        ("usage", {"prompt": 3, "cached_prompt": 0, "completion": 1}),
        ("attempt", ("succeeded", 3.0, 1)),
    ]
    reports.answered(None, apply_answer(state, 1, raw, None, 5.0), 5.0)
    assert len(metrics.calls) == 2


def test_effects_count_successes_and_one_failing_effect_does_not_stop_the_others() -> None:
    def broken_clock() -> float:
        raise OSError("clock gone")

    metrics, state = _Metrics(), QueueState(RetryPolicy(max_retries=0))
    _running(state)
    gave_up = apply_answer(state, 1, None, None, 1.0).commands  # GiveUp, then its EmitJobFailed
    reports = QueueReports(metrics, broken_clock)
    reports.effects([MarkSucceeded(1, "a", 1), *gave_up, MarkSucceeded(2, "b", 1)])
    assert reports.completed == 2 and metrics.calls == [] and list(reports.recent_failures) == []


def test_the_gauges_are_due_once_a_tick_and_status_shows_what_they_show() -> None:
    metrics, state = _Metrics(), QueueState(max_in_flight=3, capacity={envelope("x").handler_id: 2})
    reports = QueueReports(metrics, lambda: 0.0)
    _running(state)
    state.accept(envelope("j2"), 2, 0.0)
    assert reports.figures_due(100.0, every_s=0.05)
    reports.figures(state_figures(state), 100.0)
    assert not reports.figures_due(100.04, every_s=0.05) and reports.figures_due(100.1, every_s=0.05)
    status = queue_status(
        state, reports, in_flight=[], coalesced=4, unwritten=1, commits={"transactions": 2}, loop_alive=True
    )
    assert metrics.calls == [("figures", QueueFigures(depth=1, in_flight=1, slots=2, lanes=2, busy_lanes=1))]
    assert status["figures"] == metrics.calls[0][1].as_dict()
    assert (status["depth"], status["lanes"], status["busy_lanes"], status["capacity"]) == (
        1,
        2,
        1,
        {envelope("x").handler_id: 2},
    )
    assert status["coalesced_since_start"] == 4 and status["commits"] == {"transactions": 2}
    assert [job["job_id"] for job in status["state"]["jobs"]] == ["j1", "j2"]
