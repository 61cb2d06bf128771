"""A group commit in one statement per kind writes what one statement per write writes.

``QueueStore.apply_job_writes`` takes the bulk path (:mod:`persistence.writers.queue_bulk`) for
batches of accepts, starts and finishes, and falls back to one by one when a statement does not
change exactly its rows. The property: from any durable state, any batch (repeats after a lost
reply, keys taken, jobs unknown or finished, bad values included) leaves the same rows, returns the
same count and raises the same error class as writing it one by one, so nothing is lost, nothing
is written twice and a job's writes keep their order.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from persistence.writers.queue_bulk import bulk_plan
from persistence.writers.queue_store import QueueStore
from protocol.queue_rows import JobAccepted, JobFinished, JobStarted, JobWrite
from tests.unit.actors.queue.helpers import envelope

T0 = "2026-07-23T12:00:00+00:00"
T1 = "2026-07-23T12:00:01+00:00"


def _accepted(job_seq: int, key: int) -> JobAccepted:
    # Few keys for several seqs: accepts collide on the unfinished key as well as on the seq.
    return JobAccepted(
        job_seq=job_seq, envelope=envelope(f"job-{key}", db_path="/data/om.sqlite"), accepted_at=T0
    )


SEQS = st.integers(min_value=1, max_value=6)
WRITES: st.SearchStrategy[JobWrite] = st.one_of(
    st.builds(_accepted, SEQS, st.integers(min_value=1, max_value=4)),
    # Bad values (an attempt below 1, a reason that is not a code) now and then, not in most batches.
    st.builds(JobStarted, job_seq=SEQS, attempt=st.sampled_from([1, 1, 1, 2, 3, 0]), started_at=st.just(T1)),
    st.builds(
        JobFinished,
        job_seq=SEQS,
        state=st.sampled_from(["succeeded", "failed"]),
        finished_at=st.just(T1),
        failure_reason=st.sampled_from([None, None, None, "transient_runtime", "Not A Code"]),
    ),
)


@st.composite
def lifecycles(draw: st.DrawFn, *, from_accept: bool = False) -> list[JobWrite]:
    """Jobs going through part of accept -> start -> finish (from the accept: all but the last
    steps), interleaved, each job's writes in order."""
    per_job: list[list[JobWrite]] = []
    # A batch's new jobs usually take new seqs; its starts and finishes, those of earlier batches.
    seqs = SEQS if from_accept else st.integers(min_value=1, max_value=10)
    for seq in draw(st.lists(seqs, min_size=2, max_size=6, unique=True)):
        first = 0 if from_accept or seq > 6 else draw(st.integers(min_value=0, max_value=2))
        last = draw(st.integers(min_value=first, max_value=2))
        stages: list[JobWrite] = [
            _accepted(seq, draw(st.integers(min_value=1, max_value=8))),
            JobStarted(job_seq=seq, attempt=draw(st.integers(min_value=1, max_value=3)), started_at=T1),
            JobFinished(job_seq=seq, state=draw(st.sampled_from(["succeeded", "failed"])), finished_at=T1),
        ]
        per_job.append(stages[first : last + 1])
    turns = draw(st.permutations([i for i, writes in enumerate(per_job) for _ in writes]))
    return [per_job[i].pop(0) for i in turns]


BATCHES = st.one_of(lifecycles(), st.lists(WRITES, min_size=1, max_size=12))


def _rows(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT * FROM omray_job ORDER BY job_seq").fetchall()
    finally:
        conn.close()


def _apply(store: QueueStore, writes: list[JobWrite], *, one_by_one: bool) -> tuple[str, int | None]:
    try:
        applied = store.apply_job_writes_one_by_one(writes) if one_by_one else store.apply_job_writes(writes)
    except Exception as exc:  # the error class is part of what must match
        return type(exc).__name__, None
    return "ok", applied


def _count_fallbacks(store: QueueStore) -> list[int]:
    """Count the bulk store's falls back to one by one (the list grows by one each time)."""
    calls: list[int] = []
    one_by_one = store.apply_job_writes_one_by_one

    def counted(writes: list[JobWrite]) -> int:
        calls.append(1)
        return one_by_one(writes)

    store.apply_job_writes_one_by_one = counted  # type: ignore[method-assign]
    return calls


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    before=st.lists(st.one_of(lifecycles(from_accept=True), BATCHES), max_size=3),
    batch=BATCHES,
)
def test_bulk_commit_writes_what_one_by_one_writes(
    before: list[list[JobWrite]], batch: list[JobWrite]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: Path(tmp) / f"{name}.sqlite" for name in ("bulk", "one_by_one")}
        stores = {name: QueueStore(path) for name, path in paths.items()}
        try:
            for earlier in before:  # the same durable state in both, whatever it is
                for store in stores.values():
                    _apply(store, earlier, one_by_one=True)
            assert _rows(paths["bulk"]) == _rows(paths["one_by_one"])
            fallbacks = _count_fallbacks(stores["bulk"])
            bulk = _apply(stores["bulk"], batch, one_by_one=False)
            path = "one by one only" if bulk_plan(batch) is None else ("fell back" if fallbacks else "bulk")
            event(f"{path}: {bulk[0]}")
            one_by_one = _apply(stores["one_by_one"], batch, one_by_one=True)
            assert bulk == one_by_one
            assert _rows(paths["bulk"]) == _rows(paths["one_by_one"])
            again = _apply(stores["bulk"], batch, one_by_one=False)  # the batch repeated (lost reply)
            assert again == _apply(stores["one_by_one"], batch, one_by_one=True)
            assert _rows(paths["bulk"]) == _rows(paths["one_by_one"])
        finally:
            for store in stores.values():
                store.close()


def test_a_typical_group_commit_takes_one_statement_per_kind(tmp_path: Path) -> None:
    # Three new jobs accepted and started, two earlier ones finished, one started: the shape of a
    # commit with several agents dispatching.
    batch: list[JobWrite] = []
    for seq in (3, 4, 5):
        batch += [_accepted(seq, seq), JobStarted(job_seq=seq, attempt=1, started_at=T1)]
    batch += [
        JobFinished(job_seq=1, state="succeeded", finished_at=T1),
        JobStarted(job_seq=2, attempt=1, started_at=T1),
        JobFinished(job_seq=6, state="succeeded", finished_at=T1),
    ]
    plan = bulk_plan(batch)
    assert plan is not None
    assert [layer.statements() for layer in plan] == [3, 1]
    store = QueueStore(tmp_path / "q.sqlite")
    try:
        store.apply_job_writes([_accepted(seq, seq) for seq in (1, 2, 6)])
        store.apply_job_writes([JobStarted(job_seq=seq, attempt=1, started_at=T0) for seq in (1, 6)])
        assert store.apply_job_writes(batch) == len(batch)
        conn = sqlite3.connect(tmp_path / "q.sqlite")
        states = {
            seq: (state, attempts)
            for seq, state, attempts in conn.execute("SELECT job_seq, state, attempts FROM omray_job")
        }
        conn.close()
    finally:
        store.close()
    assert states == {
        1: ("succeeded", 1),
        2: ("running", 1),
        3: ("running", 1),
        4: ("running", 1),
        5: ("running", 1),
        6: ("succeeded", 1),
    }


def test_a_batch_with_other_writes_or_bad_values_is_written_one_by_one() -> None:
    started = JobStarted(job_seq=1, attempt=1, started_at=T1)
    assert (
        bulk_plan(
            [_accepted(1, 1), started, _accepted(2, 2), JobStarted(job_seq=2, attempt=0, started_at=T1)]
        )
        is None
    )
    bad_reason = JobFinished(job_seq=3, state="failed", finished_at=T1, failure_reason="Not A Code")
    assert bulk_plan([_accepted(1, 1), _accepted(2, 2), bad_reason]) is None
    redrive = JobAccepted(job_seq=2, envelope=envelope("job-2"), accepted_at=T0, redrive_of=1, redrives=1)
    assert bulk_plan([_accepted(1, 1), _accepted(3, 3), redrive]) is None
    assert bulk_plan([started]) is None  # one write: nothing to gather
