"""The queue's worker pool under any mix of single and batched starts, answers, malformed answers and
dead workers: every attempt sent ends exactly once, with its own outcome or as lost, and no member
is left counted busy; a job an earlier queue left running on a member goes to that member, alone.
Fake actor handles, real threads for Ray's callbacks; no Ray cluster."""

from __future__ import annotations

import concurrent.futures
import random
import threading
import time
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

import cluster.ray_calls as proxies
from cluster.ray_calls import RayWorkerPool

FATES = ("ok", "ok", "ok", "dead", "malformed", "refused")


class _Ref:
    def __init__(self, future: concurrent.futures.Future[Any]) -> None:
        self._future = future

    def future(self) -> concurrent.futures.Future[Any]:
        return self._future


class _Method:
    def __init__(self, member: _Member, batched: bool) -> None:
        self.member, self.batched = member, batched

    def remote(self, *args: Any) -> _Ref:
        return self.member.call(self.batched, args)


class _Member:
    """A worker actor: answers each call after a short delay, from a thread, as Ray's callbacks do."""

    def __init__(self, name: str, rng: random.Random, lock: threading.Lock, log: list[Any]) -> None:
        self.name, self.rng, self.lock, self.log = name, rng, lock, log
        self.handle = _Method(self, batched=False)
        self.handle_many = _Method(self, batched=True)
        self.threads: list[threading.Thread] = []

    def call(self, batched: bool, args: tuple[Any, ...]) -> _Ref:
        with self.lock:
            fate = self.rng.choice(FATES)
            delay = self.rng.choice([0.0, 0.001, 0.003])
        items = args[0] if batched else [(args[0], args[1])]
        self.log.append((self.name, batched, [envelope["job_id"] for envelope, _ in items], fate))
        if fate == "refused":
            raise RuntimeError("the call could not be submitted")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def answer() -> None:
            time.sleep(delay)
            if fate == "dead":
                future.set_exception(proxies.RayActorError())
                return
            outcomes = [{"kind": "succeeded", "job_id": envelope["job_id"]} for envelope, _ in items]
            if fate == "malformed" and batched:
                outcomes = outcomes[:-1]  # a batch answered with one outcome missing
            future.set_result(outcomes if batched else outcomes[0])

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        self.threads.append(thread)
        return _Ref(future)


BATCHES = st.lists(
    st.lists(st.tuples(st.sampled_from(["observe", "index"]), st.integers(1, 3)), min_size=1, max_size=5),
    min_size=1,
    max_size=8,
)


@settings(max_examples=60, deadline=None)
@given(
    batches=BATCHES,
    seed=st.integers(0, 10_000),
    short=st.booleans(),
    pins=st.dictionaries(st.integers(1, 40), st.integers(0, 1), max_size=6),
    woken=st.booleans(),
)
def test_every_attempt_sent_ends_once_and_no_member_stays_busy(
    batches: list[list[tuple[str, int]]], seed: int, short: bool, pins: dict[int, int], woken: bool
) -> None:
    """``woken``: outcomes are collected only when the pool says they are ready (``on_ready``), as
    the queue's loop does; a missed wake-up would leave an outcome uncollected."""
    with (
        mock.patch.object(proxies, "SHORT_ATTEMPT_S", 10.0 if short else 0.0),
        mock.patch.object(proxies, "RECENT_ATTEMPTS", 2),
    ):
        _drive(batches, seed, short, pins, woken)


def _drive(
    batches: list[list[tuple[str, int]]], seed: int, short: bool, pins: dict[int, int], woken: bool
) -> None:
    rng, lock, log = random.Random(seed), threading.Lock(), []
    members = {
        hid: {i: _Member(f"{hid}.{i}", rng, lock, log) for i in range(2)} for hid in ("observe", "index")
    }
    handler_of = [hid for batch in batches for hid, _ in batch]  # job seq n has handler_of[n - 1]
    running: dict[str, dict[str, int]] = {}
    for seq, member in pins.items():
        if seq <= len(handler_of):  # an attempt of this job still runs on that member
            running.setdefault(handler_of[seq - 1], {})[f"job-{seq}"] = member
    pool = RayWorkerPool(members, running=running)
    sent: dict[int, str] = {}
    outcomes: list[tuple[int, Any]] = []
    unsent: list[int] = []
    collected = threading.Lock()

    def collect() -> None:
        with collected:
            outcomes.extend(pool.poll(0.0))

    if woken:
        pool.on_ready(collect)
    seq = 0
    for batch in batches:
        starts = []
        for handler_id, attempt in batch:
            seq += 1
            sent[seq] = f"job-{seq}"
            starts.append((handler_id, seq, {"job_id": f"job-{seq}"}, attempt))
        unsent.extend(pool.start_many(starts))
        if not woken:
            outcomes.extend(pool.poll(0.0))
    if woken:
        for group in members.values():
            for member in group.values():
                for thread in member.threads:
                    thread.join(10)  # every answer given, so every wake-up made
        assert pool.poll(0.0) == []  # none left behind without a wake-up
    deadline = time.monotonic() + 10
    while len(outcomes) + len(unsent) < len(sent) and time.monotonic() < deadline:
        outcomes.extend(pool.poll(0.05))
    outcomes.extend(pool.poll(0.0))

    ended = [job_seq for job_seq, _ in outcomes] + unsent
    assert sorted(ended) == sorted(sent)  # every attempt ended, none twice
    fates = {job_id: (batched, fate) for _, batched, job_ids, fate in log for job_id in job_ids}
    assert sorted(unsent) == sorted(s for s, job_id in sent.items() if fates[job_id][1] == "refused")
    for job_seq, outcome in outcomes:
        batched, fate = fates[sent[job_seq]]
        if fate == "dead" or (fate == "malformed" and batched):
            assert outcome is None  # lost: the queue retries it
        else:
            assert outcome == {"kind": "succeeded", "job_id": sent[job_seq]}  # its own outcome
    for hid in members:
        assert set(pool.members(hid).values()) == {0}  # nothing left counted in flight
    for hid, jobs in running.items():
        for job_id, member in jobs.items():
            calls = [(name, batched) for name, batched, job_ids, _ in log if job_id in job_ids]
            assert calls == [(f"{hid}.{member}", False)]  # to the member running it, in a call of its own
    if not short:
        assert not any(batched for _, batched, _, _ in log)  # slow pools: one call per attempt


def test_a_pool_of_short_attempts_gets_one_call_per_commit_once_measured() -> None:
    rng, lock, log = random.Random(3), threading.Lock(), []
    rng.choice = lambda options: options[0]  # type: ignore[method-assign]  # always "ok", no delay
    members = {"index": {0: _Member("index.0", rng, lock, log)}}
    pool = RayWorkerPool(members)
    first = [("index", n, {"job_id": f"j{n}"}, 1) for n in range(proxies.RECENT_ATTEMPTS // 2)]
    assert pool.start_many(first) == []
    assert not any(batched for _, batched, _, _ in log)  # nothing measured yet: one call each
    for thread in members["index"][0].threads:
        thread.join()
    pool.poll(0.0)
    assert pool.short_attempts("index")
    assert pool.start_many([("index", 90, {"job_id": "c"}, 1), ("index", 91, {"job_id": "d"}, 1)]) == []
    assert log[-1][1:3] == (True, ["c", "d"])  # one call carried both


def test_a_member_running_an_earlier_queues_attempt_is_not_retired_before_the_job_is_sent_again() -> None:
    rng, lock, log = random.Random(5), threading.Lock(), []
    rng.choice = lambda options: options[0]  # type: ignore[method-assign]  # always "ok", no delay
    members = {"index": {i: _Member(f"index.{i}", rng, lock, log) for i in range(3)}}
    pool = RayWorkerPool(members, running={"index": {"old-job": 1}})
    assert pool.retire("index", 1) is None  # idle here, but it still runs old-job's last attempt
    assert pool.retire("index", 2) is not None
    assert pool.start_many([("index", 7, {"job_id": "old-job"}, 2)]) == []
    assert log[-1][:3] == ("index.1", False, ["old-job"])
    for thread in members["index"][1].threads:
        thread.join()
    pool.poll(0.0)
    assert pool.retire("index", 1) is not None  # sent again and answered: free to go
