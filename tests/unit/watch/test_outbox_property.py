"""The outbox under any mix of sessions, refusals and deadlines: nothing lost, one session's jobs in
order and never two of them in flight, whichever path (straight to a sender, or the loop) each took."""

from __future__ import annotations

import random
import threading
import time
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.link import Outbox, RuntimeUnavailableError

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

    def send(self, envelope: Any, timeout_s: float) -> str:
        session = envelope.payload.run_id
        with self.lock:
            self.in_flight[session] = self.in_flight.get(session, 0) + 1
            self.overlap = self.overlap or self.in_flight[session] > 1
            refused = self.random.random() < self.refuse
            delay = self.random.choice([0.001, 0.004, 0.008])
        time.sleep(delay)
        with self.lock:
            self.in_flight[session] -= 1
            if refused:
                raise RuntimeUnavailableError("busy")
            if envelope.job_id not in self.accepted:
                self.accepted.append(envelope.job_id)
        return str(envelope.job_id)


def _job(job_id: str, session: str) -> Any:
    return SimpleNamespace(job_id=job_id, payload=SimpleNamespace(db_path="/d", run_id=session))


@settings(max_examples=40, deadline=None)
@given(submits=SUBMITS, seed=st.integers(0, 1000), refuse=st.sampled_from([0.0, 0.25]))
def test_every_job_is_accepted_once_in_session_order(
    submits: list[tuple[str, float]], seed: int, refuse: float
) -> None:
    queue = _Queue(seed, refuse)
    outbox = Outbox(queue.send, call_timeout_s=1.0, parallel=2)
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
