"""The writes of one group commit (``actors.queue.writes``): pure, no store, no clock."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from actors.queue.state import (
    AlreadyQueued,
    Dispatch,
    EmitJobFailed,
    GiveUp,
    MarkSucceeded,
    OutcomeIgnored,
    ScheduleRetry,
    WakeAt,
)
from actors.queue.writes import Accept, Issued, is_paired, only_finishes, wakes_callers_and_starts, writes_for
from protocol.outcomes import JobFailedEvent
from protocol.queue_rows import (
    JobAccepted,
    JobFinished,
    JobGivenUp,
    JobRetry,
    JobStarted,
    RuntimeEventWrite,
    iso_utc,
)

from .helpers import envelope


def _failed_event(job_id: str) -> EmitJobFailed:
    event = JobFailedEvent(
        message="job failed",
        reason="retry_exhausted",
        handler_id="observational_memory.semantic_index",
        job_id=job_id,
        retry_count=3,
        attempts=4,
    )
    return EmitJobFailed(session_id=f"session-of-{job_id}", event=event)


def _dispatch(job_seq: int, *members: tuple[int, int]) -> Dispatch:
    job = envelope(f"j{job_seq}")
    return Dispatch(
        job_seq, job.job_id, job.handler_id, members[0][1] if members else 1, job.payload, members
    )


def test_each_command_becomes_its_row_write_with_the_time_it_was_issued() -> None:
    job = envelope("j1")
    batch: list[Issued] = [
        (Accept(1, job), 10.0),
        (_dispatch(2, (2, 1), (3, 2)), 11.0),
        (ScheduleRetry(4, "j4", 1, not_before=20.0, reason="conflict"), 12.0),
        (MarkSucceeded(5, "j5", 1), 13.0),
    ]
    assert writes_for(batch) == [
        JobAccepted(job_seq=1, envelope=job, accepted_at=iso_utc(10.0)),
        JobStarted(job_seq=2, attempt=1, started_at=iso_utc(11.0)),  # every covered member, own attempt
        JobStarted(job_seq=3, attempt=2, started_at=iso_utc(11.0)),
        JobRetry(job_seq=4, not_before=iso_utc(20.0), failure_reason="conflict"),
        JobFinished(job_seq=5, state="succeeded", finished_at=iso_utc(13.0)),
    ]


def test_a_give_up_and_its_own_failure_event_are_one_write() -> None:
    emit = _failed_event("j7")
    writes = writes_for([(GiveUp(7, "j7", 4, "retry_exhausted"), 5.0), (emit, 5.0)])
    assert writes == [
        JobGivenUp(
            job_seq=7,
            finished_at=iso_utc(5.0),
            failure_reason="retry_exhausted",
            session_id="session-of-j7",
            event_type=JobFailedEvent.event_type,
            event_payload=emit.event.model_dump(),
        )
    ]


def test_a_failure_event_of_another_job_is_written_on_its_own() -> None:
    other = _failed_event("j8")
    writes = writes_for([(GiveUp(7, "j7", 4, "retry_exhausted"), 5.0), (other, 6.0)])
    assert writes == [
        JobFinished(job_seq=7, state="failed", finished_at=iso_utc(5.0), failure_reason="retry_exhausted"),
        RuntimeEventWrite(
            session_id="session-of-j8",
            event_type=JobFailedEvent.event_type,
            payload=other.event.model_dump(),
            created_at=iso_utc(6.0),
        ),
    ]


def test_an_event_before_its_give_up_is_not_paired() -> None:
    emit = _failed_event("j7")
    writes = writes_for([(emit, 1.0), (GiveUp(7, "j7", 4, "retry_exhausted"), 1.0)])
    assert [type(w) for w in writes] == [RuntimeEventWrite, JobFinished]


def test_notices_write_nothing() -> None:
    batch: list[Issued] = [
        (AlreadyQueued(job_seq=3, job_id="j1", existing_seq=1), 0.0),
        (OutcomeIgnored(4, "not_in_flight"), 0.0),
        (WakeAt(9.0), 0.0),
    ]
    assert writes_for(batch) == []


def test_what_a_batch_holds() -> None:
    accept: Issued = (Accept(1, envelope("j1")), 0.0)
    start: Issued = (_dispatch(2), 0.0)
    finish: Issued = (MarkSucceeded(3, "j3", 1), 0.0)
    assert only_finishes([finish, finish]) and not only_finishes([]) and not only_finishes([finish, accept])
    assert wakes_callers_and_starts([accept, start]) and not wakes_callers_and_starts([accept, finish])


_items = st.one_of(
    st.integers(1, 6).map(lambda n: GiveUp(n, f"j{n}", 4, "retry_exhausted")),
    st.integers(1, 6).map(lambda n: _failed_event(f"j{n}")),
    st.integers(1, 6).map(lambda n: MarkSucceeded(n, f"j{n}", 1)),
    st.integers(1, 6).map(lambda n: Accept(n, envelope(f"j{n}"))),
)


@given(st.lists(st.tuples(_items, st.floats(0, 1e9, allow_nan=False)), max_size=12))
def test_every_give_up_and_every_event_is_written_exactly_once_in_order(batch: list[Issued]) -> None:
    writes = writes_for(batch)
    assert writes == writes_for(list(batch))  # the same batch, the same writes (a retried commit)
    gave_up = [
        w.job_seq
        for w in writes
        if isinstance(w, JobGivenUp) or (isinstance(w, JobFinished) and w.state == "failed")
    ]
    assert gave_up == [c.job_seq for c, _ in batch if isinstance(c, GiveUp)]
    events = [w.event_payload["job_id"] for w in writes if isinstance(w, JobGivenUp)]
    events += [w.payload["job_id"] for w in writes if isinstance(w, RuntimeEventWrite)]
    assert sorted(events) == sorted(c.event.job_id for c, _ in batch if isinstance(c, EmitJobFailed))
    paired = sum(1 for index in range(len(batch)) if is_paired(batch, index))
    assert len(writes) == len(batch) - paired  # one write each, a paired event shares its give-up's
    kinds = [type(c).__name__ for c, _ in batch if not isinstance(c, EmitJobFailed)]
    written = [type(w).__name__ for w in writes if not isinstance(w, RuntimeEventWrite)]
    expected = {"GiveUp": {"JobGivenUp", "JobFinished"}, "MarkSucceeded": {"JobFinished"}}
    expected["Accept"] = {"JobAccepted"}
    assert len(kinds) == len(written) and all(w in expected[k] for k, w in zip(kinds, written, strict=True))
