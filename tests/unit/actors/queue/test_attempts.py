"""What a worker's answer counts as (``actors.queue.attempts``): applied, or a lost attempt."""

from __future__ import annotations

from actors.queue.attempts import Attempt, InFlight, read_outcome
from actors.queue.state import Dispatch
from protocol.outcomes import JobSucceeded

from .helpers import envelope

SENT = Attempt(job_id="j1", attempt=2, handler_id="observational_memory.semantic_index", started=10.0)


def test_an_outcome_of_the_runs_job_is_applied() -> None:
    assert read_outcome(1, {"kind": "succeeded", "job_id": "j1"}, SENT) == JobSucceeded(job_id="j1")
    # With no attempt remembered (a restarted queue) the state machine checks it instead.
    assert read_outcome(1, {"kind": "succeeded", "job_id": "other"}, None) == JobSucceeded(job_id="other")


def test_a_dead_worker_a_malformed_answer_or_another_jobs_answer_is_a_lost_attempt() -> None:
    assert read_outcome(1, None, SENT) is None
    assert read_outcome(1, {"kind": "succeeded"}, SENT) is None
    assert read_outcome(1, {"kind": "done", "job_id": "j1"}, SENT) is None
    assert read_outcome(1, {"kind": "succeeded", "job_id": "someone-else"}, SENT) is None


def test_in_flight_remembers_each_sent_attempt_until_answered() -> None:
    job = envelope("j3")
    starts = [Dispatch(3, "j3", job.handler_id, 1, job.payload, ((3, 1), (4, 1), (5, 2)))]
    table = InFlight()
    assert table.sent(starts, 100.0) == 2  # the carrier and two coalesced jobs
    assert table.snapshot(101.5) == [
        {"job_seq": 3, "job_id": "j3", "attempt": 1, "handler_id": job.handler_id, "running_s": 1.5}
    ]
    assert table.answered(3) == Attempt("j3", 1, job.handler_id, 100.0)
    assert table.answered(3) is None and table.snapshot(102.0) == []
