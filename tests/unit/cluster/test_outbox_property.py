"""The outbox under any mix of sessions, refusals and deadlines: nothing lost, one session's jobs in
order and never two of them in flight, whichever path (straight to a sender, or the loop) each took,
sent one by one or in batches (``send_many``), batches refused whole or rejected."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.outbox import Outbox
from cluster.runtime_connection import RuntimeMethodMissingError, RuntimeUnavailableError
from protocol.errors import InvalidPayloadError

# Mostly hooks that do not wait: the next turn arrives while the last one is still being sent.
SUBMITS = st.lists(st.tuples(st.sampled_from("ABC"), st.sampled_from([0.0, 0.0, 0.001, 0.03])), max_size=14)


class _Queue:
    """A fake queue: refuses some sends, answers after a short delay, records what it accepted."""

    def __init__(self, seed: int, refuse: float) -> None:
        self.random = random.Random(seed)
        self.refuse = refuse
        self.lock = threading.Lock()
        self.accepted: list[str] = []
        self.in_flight: dict[str, int] = {}
        self.overlap = False

        self.batches: list[int] = []

    def send(self, envelope: Any, timeout_s: float) -> str:
        return self.send_many([envelope], timeout_s, single=True)[0]

    def send_many(self, envelopes: list[Any], timeout_s: float, single: bool = False) -> list[str]:
        sessions = [envelope.payload.session_id for envelope in envelopes]
        with self.lock:
            for session in sessions:
                self.in_flight[session] = self.in_flight.get(session, 0) + 1
                self.overlap = self.overlap or self.in_flight[session] > 1
            refused = self.random.random() < self.refuse
            # A batch may also be rejected (as a queue rejects a bad envelope): the outbox then sends
            # its jobs one by one, which this fake takes.
            rejected = not single and self.random.random() < 0.2
            delay = self.random.choice([0.001, 0.004, 0.008])
            if not single:
                self.batches.append(len(envelopes))
        time.sleep(delay)
        with self.lock:
            for session in sessions:
                self.in_flight[session] -= 1
            if refused:
                raise RuntimeUnavailableError("busy")
            if rejected:  # a bad envelope, or (now and then) no dispatch_many on the runtime
                error = RuntimeMethodMissingError if self.random.random() < 0.3 else InvalidPayloadError
                raise error("rejected")
            for envelope in envelopes:
                if envelope.job_id not in self.accepted:
                    self.accepted.append(envelope.job_id)
        return [str(envelope.job_id) for envelope in envelopes]


def _job(job_id: str, session: str) -> Any:
    return SimpleNamespace(job_id=job_id, payload=SimpleNamespace(db_path="/d", session_id=session))


@settings(max_examples=60, deadline=None)
@given(
    submits=SUBMITS,
    seed=st.integers(0, 1000),
    refuse=st.sampled_from([0.0, 0.25]),
    batched=st.booleans(),
    parallel=st.sampled_from([2, 4]),
)
def test_every_job_is_accepted_once_in_session_order(
    submits: list[tuple[str, float]], seed: int, refuse: float, batched: bool, parallel: int
) -> None:
    queue = _Queue(seed, refuse)
    with mock.patch("cluster.outbox.BATCH_PAUSE_S", 0.005):  # batching comes back within the example
        _check_every_job_accepted_once(queue, submits, batched, parallel)


def _check_every_job_accepted_once(
    queue: _Queue, submits: list[tuple[str, float]], batched: bool, parallel: int
) -> None:
    if batched:
        outbox = Outbox(queue.send, 1.0, parallel=parallel, send_many=queue.send_many, batch=3, senders=1)
    else:
        outbox = Outbox(queue.send, call_timeout_s=1.0, parallel=parallel)
    order: dict[str, list[str]] = {}
    answers: dict[str, str | None] = {}
    for n, (session, deadline) in enumerate(submits):
        job_id = f"{session}{n}"
        order.setdefault(session, []).append(job_id)
        answers[job_id] = outbox.submit(job_id, _job(job_id, session), deadline)
    assert outbox.wait_empty(30)
    assert sorted(queue.accepted) == sorted(job for jobs in order.values() for job in jobs)  # none lost
    for session, jobs in order.items():
        assert [job for job in queue.accepted if job.startswith(session)] == jobs  # in submission order
    assert not queue.overlap  # one send of a session at a time
    for job_id, answer in answers.items():
        assert answer in (None, job_id)  # a hook gets its own job id or nothing
    assert all(size <= 3 for size in queue.batches)  # never more than ``batch`` in one call


def test_a_burst_goes_out_in_batches() -> None:
    """Hooks that do not wait while the one sender is busy: the next call carries all of them."""
    queue = _Queue(seed=1, refuse=0.0)
    queue.random.random = lambda: 0.5  # type: ignore[method-assign]  # neither refused nor rejected
    outbox = Outbox(queue.send, 1.0, parallel=8, send_many=queue.send_many, senders=1)
    for n, session in enumerate("ABCDEFG"):
        outbox.submit(f"{session}{n}", _job(f"{session}{n}", session), 0.0)
    assert outbox.wait_empty(10)
    assert sorted(queue.accepted) == sorted(f"{s}{n}" for n, s in enumerate("ABCDEFG"))
    assert queue.batches and max(queue.batches) > 1


def test_a_runtime_without_dispatch_many_still_gets_every_job() -> None:
    """A client newer than the runtime it talks to: the batch call fails, the jobs go one by one."""
    queue = _Queue(seed=1, refuse=0.0)
    queue.random.random = lambda: 0.5  # type: ignore[method-assign]  # neither refused nor rejected

    def old_runtime(envelopes: list[Any], timeout_s: float) -> list[str]:
        raise AttributeError("dispatch_many")

    outbox = Outbox(queue.send, 1.0, parallel=8, send_many=old_runtime, senders=1)
    for n, session in enumerate("ABCDEFG"):
        outbox.submit(f"{session}{n}", _job(f"{session}{n}", session), 0.0)
    assert outbox.wait_empty(10)
    assert sorted(queue.accepted) == sorted(f"{s}{n}" for n, s in enumerate("ABCDEFG"))


def test_after_a_runtime_refuses_dispatch_many_the_outbox_sends_job_by_job_for_a_while() -> None:
    """The links report a runtime without ``dispatch_many`` as :class:`RuntimeMethodMissingError`: every
    job still goes out, and the next burst does not try a batch first (one wasted call per burst)."""
    queue = _Queue(seed=2, refuse=0.0)
    queue.random.random = lambda: 0.5  # type: ignore[method-assign]  # neither refused nor rejected
    batch_calls: list[int] = []
    first = threading.Event()

    def send(envelope: Any, timeout_s: float) -> str:
        if not first.is_set():
            first.set()
            time.sleep(0.05)  # the burst's other jobs queue up behind the first: they form a batch
        return queue.send(envelope, timeout_s)

    def old_runtime(envelopes: list[Any], timeout_s: float) -> list[str]:
        batch_calls.append(len(envelopes))
        raise RuntimeMethodMissingError("the running omray queue has no method 'dispatch_many'")

    outbox = Outbox(send, 1.0, parallel=8, send_many=old_runtime, senders=1)
    for burst in ("ABCD", "EFGH"):
        for n, session in enumerate(burst):
            outbox.submit(f"{session}{n}", _job(f"{session}{n}", session), 0.0)
        time.sleep(0.01)
        assert outbox.wait_empty(10)
    assert sorted(queue.accepted) == sorted(f"{s}{n}" for b in ("ABCD", "EFGH") for n, s in enumerate(b))
    assert len(batch_calls) == 1 and batch_calls[0] > 1  # the second burst went job by job


def test_a_refused_job_is_retried_ahead_of_its_session_until_the_runtime_takes_it() -> None:
    """A runtime of another version refuses a session's job (the client validated it): the job is
    sent again after a pause, the session's next job waits behind it, another session goes on, and
    once the runtime takes it (upgraded) both arrive in order."""
    accepted: list[str] = []
    upgraded = threading.Event()

    def send(envelope: Any, timeout_s: float) -> str:
        if envelope.job_id == "A0" and not upgraded.is_set():
            raise InvalidPayloadError("invalid job envelope (ValidationError)")
        accepted.append(envelope.job_id)
        return str(envelope.job_id)

    outbox = Outbox(send, 1.0, parallel=4)
    assert outbox.submit("A0", _job("A0", "A"), 0.05) is None
    assert outbox.submit("A1", _job("A1", "A"), 0.0) is None
    assert outbox.submit("B0", _job("B0", "B"), 5.0) == "B0"  # another session is not held up
    time.sleep(0.3)
    assert accepted == ["B0"] and len(outbox) == 2  # A's jobs wait, in order, none lost
    upgraded.set()
    assert outbox.wait_empty(10)
    assert accepted == ["B0", "A0", "A1"]
