"""Property test of the group committer's wake-ups, with real threads: callers waiting on their
commit generation, one committer thread committing (and failing) in between.

Hypothesis picks how the callers' jobs arrive (in rounds: some before a commit, some while its
transaction runs, so they wait for the next one) and which commits fail before their transaction.
Real threads wait in ``await_durable`` meanwhile, as ``dispatch`` callers do. Checked on every run:

- a caller returns only once the store holds its job (durable before it is answered);
- every caller returns once the last commit succeeded (nobody is left waiting: nothing lost);
- every job is written exactly once, in acceptance order (nothing written twice, order kept).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.queue.committer import GroupCommitter
from protocol.errors import StorageError
from protocol.queue_rows import JobAccepted, JobWrite

from .helpers import envelope


class _Store:
    """Records the accepted jobs of each commit; fails the commits it is told to, before writing."""

    def __init__(self, fail: Sequence[bool]) -> None:
        self._fail = list(fail)
        self.written: list[int] = []
        self.lock = threading.Lock()
        self.during: Callable[[], None] = lambda: None
        """Runs at the start of each transaction (callers arriving while it runs)."""

    def apply_job_writes(self, writes: Sequence[JobWrite]) -> int:
        self.during()
        if self._fail and self._fail.pop(0):
            raise ConnectionError("store down")
        with self.lock:
            self.written.extend(w.job_seq for w in writes if isinstance(w, JobAccepted))
        return len(writes)


@settings(max_examples=60, deadline=None)
@given(
    rounds=st.lists(
        st.tuples(st.integers(min_value=0, max_value=4), st.integers(min_value=0, max_value=4)),
        min_size=1,
        max_size=6,
    ),
    fail=st.lists(st.booleans(), max_size=6),
)
def test_a_caller_is_answered_only_once_its_job_is_durable_and_every_caller_is(
    rounds: list[tuple[int, int]], fail: list[bool]
) -> None:
    lock = threading.Lock()
    store = _Store(fail)
    committer = GroupCommitter(lock, store)  # type: ignore[arg-type]
    answered: dict[int, bool] = {}  # job seq -> durable when its caller returned
    errors: list[BaseException] = []
    callers: list[threading.Thread] = []

    def caller(job_seq: int, generation: int) -> None:
        try:
            committer.await_durable(generation, timeout_s=10.0)
            with store.lock:
                answered[job_seq] = job_seq in store.written
        except BaseException as exc:  # a StorageError here would be a caller left waiting
            errors.append(exc)

    seq = 0

    def arrive(count: int) -> None:
        nonlocal seq
        for _ in range(count):
            seq += 1
            with lock:
                generation = committer.log.accept(seq, envelope(f"j{seq}"), 0.0)
            thread = threading.Thread(target=caller, args=(seq, generation))
            thread.start()
            callers.append(thread)

    for before, during in rounds:
        arrive(before)
        store.during = lambda during=during: arrive(during)  # type: ignore[misc]
        with contextlib.suppress(ConnectionError):  # the batch went back whole: a later one carries it
            committer.commit(lambda batch: None)
    store.during = lambda: None
    while True:  # the store answers again: commit until everything is written
        try:
            if not committer.commit(lambda batch: None):
                break
        except ConnectionError:
            continue
    for thread in callers:
        thread.join(10.0)
    assert not errors
    assert answered == dict.fromkeys(range(1, seq + 1), True)
    assert store.written == list(range(1, seq + 1))


def test_a_caller_whose_commit_does_not_come_is_told_to_dispatch_again() -> None:
    lock = threading.Lock()
    committer = GroupCommitter(lock, _Store([True]))  # type: ignore[arg-type]
    generation = committer.log.accept(1, envelope("a"), 0.0)
    with contextlib.suppress(ConnectionError):
        committer.commit(lambda batch: None)
    try:
        committer.await_durable(generation, timeout_s=0.05)
    except StorageError as exc:
        assert "dispatch it again" in str(exc)
    else:
        raise AssertionError("a caller returned before its job was durable")
    assert committer.commit(lambda batch: None)  # the store is back: the next commit carries it
    committer.await_durable(generation, timeout_s=0.0)
