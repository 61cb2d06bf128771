"""The Ray runtime end to end: durable FIFO, crash recovery, retries, typed errors."""

from __future__ import annotations

import itertools
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster.client import OmrayClient
from cluster.named_actors import ensure_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from protocol.errors import RuntimeNotRunningError
from protocol.jobs import (
    SEMANTIC_INDEX_HANDLER,
    JobEnvelope,
    SemanticIndexJob,
)
from testkit.handlers import LEDGER_ENV, for_every_role, read_ledger
from tests.integration.conftest import assert_eventually

pytestmark = pytest.mark.integration


def _job(session_id: str, n: int, kind: str = "semantic_index") -> JobEnvelope:
    payload: dict[str, object]
    if kind == "observe_boundary":
        payload = {
            "kind": kind,
            "run_id": session_id,
            "terminal_end_seq": n + 1,
            "terminal_status": "completed",
            "renderer_version": "1",
            "observer_schema_version": "1",
            "db_path": "/nonexistent/om.sqlite",
            "events_path": "/nonexistent/events.jsonl",
        }
    elif kind == "reflect_generation":
        payload = {
            "kind": kind,
            "run_id": session_id,
            "generation_id": f"{n:064x}",
            "observation_set_hash": "b" * 64,
            "reflector_model": "builtin/extractive",
            "reflector_schema_version": "1",
            "db_path": "/nonexistent/om.sqlite",
        }
    else:
        # Each index job gets a database, hence a lane, of its own: no coalescing between them.
        payload = SemanticIndexJob(session_id=session_id, db_path=f"/nonexistent/{n}/om.sqlite").model_dump()
    return JobEnvelope.model_validate(
        {"job_id": f"job-{n:04d}", "correlation_id": session_id, "payload": payload}
    )


def _start(
    names: RuntimeNames, tmp_path: Path, ledger: Path, handlers: dict[str, str], **kw: object
) -> OmrayClient:
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=handlers,
        worker_env={LEDGER_ENV: str(ledger), "OMRAY_BENCH_SLOW_S": "0.05"},
        retry_base_delay_s=0.05,
        **kw,  # type: ignore[arg-type]
    )
    return OmrayClient(names)


def _starts(ledger: Path) -> list[str]:
    return [line["job_id"] for line in read_ledger(str(ledger)) if line["event"] == "start"]


def _lane_runs(ledger: Path, lane_of_job: dict[str, str]) -> dict[str, list[tuple[float, float]]]:
    """Per lane, the (start, end) times of each execution, in start order."""
    opened: dict[tuple[str, int], float] = {}
    runs: dict[str, list[tuple[float, float]]] = {}
    for line in read_ledger(str(ledger)):
        key = (line["job_id"], line["attempt"])
        if line["event"] == "start":
            opened[key] = line["t"]
        elif line["event"] == "end":
            runs.setdefault(lane_of_job[line["job_id"]], []).append((opened.pop(key), line["t"]))
    return {lane: sorted(spans) for lane, spans in runs.items()}


def test_lanes_keep_their_order_over_200_jobs_and_run_side_by_side(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    handlers = for_every_role("testkit.handlers:slow")
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=handlers,
        worker_env={LEDGER_ENV: str(ledger), "OMRAY_BENCH_SLOW_S": "0.02"},
        retry_base_delay_s=0.05,
        pools=PoolSizes(observers=1, reflectors=3, indexers=1),
    )
    client = OmrayClient(names)
    sessions = ["s1", "s2", "s3", "s4"]
    # Reflect jobs never coalesce, so every one of them runs on its own.
    jobs = [_job(sessions[n % 4], n, "reflect_generation") for n in range(200)]
    lane_of_job = {job.job_id: job.payload.session_id for job in jobs}
    job_ids = [client.dispatch(job) for job in jobs]
    assert client.wait_idle(timeout_s=180)
    assert client.job_counts()["succeeded"] == 200
    starts = _starts(ledger)
    assert sorted(starts) == sorted(job_ids)  # each job ran exactly once
    for session in sessions:
        accepted = [job_id for job_id in job_ids if lane_of_job[job_id] == session]
        assert [job_id for job_id in starts if lane_of_job[job_id] == session] == accepted
    runs = _lane_runs(ledger, lane_of_job)
    for spans in runs.values():  # one session's jobs never overlap
        assert all(end <= next_start for (_, end), (next_start, _) in itertools.pairwise(spans))
    everything = sorted((start, end, lane) for lane, spans in runs.items() for start, end in spans)
    overlapping = any(
        later_start < end and lane != other
        for (_, end, lane), (later_start, _, other) in itertools.pairwise(everything)
    )
    assert overlapping  # different sessions' jobs ran at the same time


def test_pending_job_id_is_not_queued_twice(names: RuntimeNames, tmp_path: Path, ledger: Path) -> None:
    client = _start(names, tmp_path, ledger, {SEMANTIC_INDEX_HANDLER: "testkit.handlers:slow"})
    first = [client.dispatch(_job("s1", n)) for n in range(3)]
    again = client.dispatch(_job("s1", 2))  # still pending behind the slow ones
    assert again == first[2]
    assert client.wait_idle(timeout_s=60)
    counts = client.job_counts()
    assert counts["succeeded"] == 3


def test_queue_sigkill_mid_run_every_job_completes_once(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    client = _start(names, tmp_path, ledger, {SEMANTIC_INDEX_HANDLER: "testkit.handlers:slow"})
    job_ids = [client.dispatch(_job("s1", n)) for n in range(40)]
    assert_eventually(lambda: len(_starts(ledger)) >= 10, message="jobs did not start")
    pid = ray.get(client.queue_handle().ping.remote())["pid"]
    os.kill(pid, signal.SIGKILL)
    assert client.wait_idle(timeout_s=120)
    counts = client.job_counts()
    assert counts == {"pending": 0, "running": 0, "succeeded": 40, "failed": 0}
    assert set(_starts(ledger)) == set(job_ids)
    assert ray.get(client.queue_handle().ping.remote())["pid"] != pid


def test_queue_sigkill_while_an_attempt_runs_never_overlaps_two_attempts(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    handlers = {SEMANTIC_INDEX_HANDLER: "testkit.handlers:slow"}
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=handlers,
        worker_env={LEDGER_ENV: str(ledger), "OMRAY_BENCH_SLOW_S": "3"},
        retry_base_delay_s=0.05,
    )
    client = OmrayClient(names)
    client.dispatch(_job("s1", 1))
    assert_eventually(lambda: len(_starts(ledger)) == 1, message="job did not start")
    os.kill(ray.get(client.queue_handle().ping.remote())["pid"], signal.SIGKILL)  # the worker lives on
    assert client.wait_idle(timeout_s=60)
    lines = read_ledger(str(ledger))
    # The restarted queue redelivers the job; the redelivery runs only after the old attempt ended.
    assert [(line["attempt"], line["event"]) for line in lines] == [
        (1, "start"),
        (1, "end"),
        (2, "start"),
        (2, "end"),
    ]
    assert client.job_counts()["succeeded"] == 1


def test_a_restarted_queue_redelivers_to_the_pool_member_still_running_the_old_attempt(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    """Two index workers of one slot each: job 2 runs on the second while the first is free, the
    queue dies, and the restarted queue (whose pool counts every member idle) sends job 2's next
    attempt to the member still running attempt 1, where it waits for it: one lane, no overlap."""
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths={SEMANTIC_INDEX_HANDLER: "testkit.handlers:slow"},
        worker_env={LEDGER_ENV: str(ledger), "OMRAY_BENCH_SLOW_S": "8"},
        retry_base_delay_s=0.05,
        pools=PoolSizes(indexers=2, max_indexers=2, indexer_slots=1),
    )
    client = OmrayClient(names)
    first, second = _job("s1", 1), _job("s2", 2)  # two databases: two lanes
    client.dispatch(first)
    assert_eventually(lambda: _starts(ledger) == [first.job_id], message="job 1 did not start")
    # Job 2 then still runs for 6 s once job 1 has ended: time for the queue to restart and ask.
    time.sleep(6)
    client.dispatch(second)  # the first member is busy: the second runs it
    assert_eventually(lambda: len(_starts(ledger)) == 2, message="job 2 did not start")

    def ended(job_id: str) -> bool:
        return any(line["event"] == "end" and line["job_id"] == job_id for line in read_ledger(str(ledger)))

    assert_eventually(lambda: ended(first.job_id), timeout_s=30, message="job 1 did not end")
    assert not ended(second.job_id)
    os.kill(ray.get(client.queue_handle().ping.remote())["pid"], signal.SIGKILL)  # job 2 still runs
    assert client.wait_idle(timeout_s=60)
    lines = [line for line in read_ledger(str(ledger)) if line["job_id"] == second.job_id]
    assert [(line["attempt"], line["event"]) for line in lines] == [
        (1, "start"),
        (1, "end"),
        (2, "start"),
        (2, "end"),
    ]
    assert len({line["pid"] for line in lines}) == 1  # both attempts in the member that ran the first
    assert client.job_counts()["succeeded"] == 2


def test_worker_sigkill_mid_job_is_retried(names: RuntimeNames, tmp_path: Path, ledger: Path) -> None:
    handlers = {SEMANTIC_INDEX_HANDLER: "testkit.handlers:slow"}
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=handlers,
        worker_env={LEDGER_ENV: str(ledger), "OMRAY_BENCH_SLOW_S": "3"},
        retry_base_delay_s=0.5,
    )
    client = OmrayClient(names)
    client.dispatch(_job("s1", 1))
    assert_eventually(lambda: len(_starts(ledger)) == 1, message="job did not start")
    os.kill(read_ledger(str(ledger))[0]["pid"], signal.SIGKILL)  # the worker process, mid-job
    assert client.wait_idle(timeout_s=60)
    events = [(line["attempt"], line["event"]) for line in read_ledger(str(ledger))]
    # Attempt 1 died mid-job. An attempt sent while Ray was still restarting the worker is lost
    # too (it costs one attempt); the first attempt that reaches the new process finishes the job.
    assert events[0] == (1, "start") and (1, "end") not in events
    final = events[-1][0]
    assert 2 <= final <= 4 and events[-2:] == [(final, "start"), (final, "end")]
    assert [event for event in events if event[1] == "end"] == [(final, "end")]
    assert client.job_counts() == {"pending": 0, "running": 0, "succeeded": 1, "failed": 0}


def test_always_failing_handler_gets_four_attempts_and_one_event(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    client = _start(names, tmp_path, ledger, {SEMANTIC_INDEX_HANDLER: "testkit.handlers:always_fail"})
    session_id = f"session-{uuid.uuid4().hex[:6]}"
    client.dispatch(_job(session_id, 7))
    assert client.wait_idle(timeout_s=60)
    assert [line["attempt"] for line in read_ledger(str(ledger))] == [1, 2, 3, 4]
    assert client.runtime_events(session_id) == []  # the job's database is not this client's
    events = client.runtime_events(session_id, db_path="/nonexistent/7/om.sqlite")
    assert len(events) == 1 and events[0]["db_path"] == "/nonexistent/7/om.sqlite"
    payload = events[0]["payload"]
    assert events[0]["event_type"] == "extension_agent.job_failed"
    assert payload["attempts"] == 4 and payload["retry_count"] == 3
    assert payload["job_id"] == "job-0007" and payload["handler_id"] == SEMANTIC_INDEX_HANDLER
    assert "always fails" not in str(events)  # no raw exception text
    assert client.job_counts()["failed"] == 1
    assert client.status()["recent_failures"][0]["job_id"] == "job-0007"


def test_dispatch_without_a_runtime_raises_the_typed_error(ray_cluster: object) -> None:
    client = OmrayClient(RuntimeNames(prefix=f"missing{uuid.uuid4().hex[:6]}"))
    with pytest.raises(RuntimeNotRunningError, match="omray up"):
        client.dispatch(_job("s1", 1))


def test_pending_jobs_resume_after_the_whole_runtime_stops(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    from cluster.named_actors import remove_runtime

    handlers = {SEMANTIC_INDEX_HANDLER: "testkit.handlers:slow"}
    client = _start(names, tmp_path, ledger, handlers)
    job_ids = [client.dispatch(_job("s1", n)) for n in range(30)]
    assert_eventually(lambda: len(_starts(ledger)) >= 3, message="jobs did not start")
    remove_runtime(names)  # every actor gone, as after a cluster stop; only the queue file remains
    with pytest.raises(RuntimeNotRunningError):
        client.status()
    client = _start(names, tmp_path, ledger, handlers)  # what `omray up` does
    assert client.wait_idle(timeout_s=120)
    assert client.job_counts() == {"pending": 0, "running": 0, "succeeded": 30, "failed": 0}
    assert set(_starts(ledger)) == set(job_ids)


def test_queue_sigkill_with_many_lanes_in_flight_loses_nothing(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=for_every_role("testkit.handlers:slow"),
        worker_env={LEDGER_ENV: str(ledger), "OMRAY_BENCH_SLOW_S": "0.1"},
        retry_base_delay_s=0.05,
        pools=PoolSizes(observers=1, reflectors=3, indexers=1),
    )
    client = OmrayClient(names)
    jobs = [_job(f"lane-{n % 6}", n, "reflect_generation") for n in range(60)]
    job_ids = [client.dispatch(job) for job in jobs]
    assert_eventually(lambda: len(_starts(ledger)) >= 6, message="jobs did not start")
    os.kill(ray.get(client.queue_handle().ping.remote())["pid"], signal.SIGKILL)
    assert client.wait_idle(timeout_s=180)
    assert client.job_counts() == {"pending": 0, "running": 0, "succeeded": 60, "failed": 0}
    assert set(_starts(ledger)) == set(job_ids)
    lane_of_job = {job.job_id: job.payload.session_id for job in jobs}
    for lane in {job.payload.session_id for job in jobs}:  # a redelivery never overlaps the lane's order
        started = [job_id for job_id in dict.fromkeys(_starts(ledger)) if lane_of_job[job_id] == lane]
        assert started == [job_id for job_id in job_ids if lane_of_job[job_id] == lane]


def test_sessions_of_two_projects_with_one_job_id_both_run(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    client = _start(names, tmp_path, ledger, for_every_role("testkit.handlers:noop"))
    one = _job("shared-session", 5, "observe_boundary")
    two = JobEnvelope(
        job_id=one.job_id,
        correlation_id="shared-session",
        payload=one.payload.model_copy(update={"db_path": "/other-project/om.sqlite"}),
    )
    assert client.dispatch(one) == client.dispatch(two) == one.job_id
    assert client.wait_idle(timeout_s=60)
    assert client.job_counts()["succeeded"] == 2
    assert _starts(ledger) == [one.job_id, one.job_id]


def test_memory_work_runs_below_the_queue_and_workers_warm_on_request(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    from cluster.data_node import BACKGROUND_NICENESS, store_handle
    from cluster.named_actors import INDEX_NICENESS, QUEUE_NICENESS

    def pid_of(handle: Any) -> int:
        info: dict[str, Any] = ray.get(handle.ping.remote())
        return int(info["pid"])

    from protocol.jobs import OBSERVE_BOUNDARY_HANDLER

    client = _start(
        names,
        tmp_path,
        ledger,
        {SEMANTIC_INDEX_HANDLER: "testkit.handlers:slow", OBSERVE_BOUNDARY_HANDLER: "testkit.handlers:slow"},
    )
    worker: Any = ray.get_actor(names.worker("indexer", 0), namespace=names.namespace)
    store = store_handle(names, tmp_path / "om.sqlite")
    queue_nice = os.getpriority(os.PRIO_PROCESS, pid_of(client.queue_handle()))
    assert queue_nice == QUEUE_NICENESS  # started at the agents' priority, not Ray's 15
    observer: Any = ray.get_actor(names.worker("observer", 0), namespace=names.namespace)
    for pid in (pid_of(observer), pid_of(store)):  # a role worker and the one writer of a memory file
        assert os.getpriority(os.PRIO_PROCESS, pid) == BACKGROUND_NICENESS > queue_nice
    # The indexer's embedding is the runtime's one CPU-bound work: below the other memory work.
    assert os.getpriority(os.PRIO_PROCESS, pid_of(worker)) == INDEX_NICENESS > BACKGROUND_NICENESS
    warmed = ray.get(worker.warm.remote())
    assert warmed["handler_id"] == SEMANTIC_INDEX_HANDLER and warmed["warm_ms"] >= 0


def test_batched_dispatches_and_starts_run_every_job_once(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    """``dispatch_many`` over Ray, the outbox's batched hook sends, and starts of one commit sent to
    a worker in one call once its attempts are known to be short: every job runs once."""
    from protocol.jobs import REFLECT_GENERATION_HANDLER

    client = _start(
        names,
        tmp_path,
        ledger,
        for_every_role("testkit.handlers:noop"),
        pools=PoolSizes(reflectors=1, max_reflectors=1, reflector_slots=8),
    )
    first = [_job(f"s{n}", n, "reflect_generation") for n in range(16)]
    assert client.link.call("dispatch_many", (first,), 30.0) == [job.job_id for job in first]
    assert client.wait_idle(timeout_s=60)  # the pool has measured its attempts: short ones
    second = [_job(f"s{n}", n, "reflect_generation") for n in range(16, 32)]
    for job in second:  # hooks that do not wait: the outbox sends what is waiting together
        client.outbox.submit(job.job_id, job, 0.0)
    assert client.outbox.wait_empty(30)
    assert client.wait_idle(timeout_s=60)
    assert sorted(_starts(ledger)) == sorted(job.job_id for job in first + second)  # each ran once
    assert client.job_counts()["succeeded"] == 32
    reflect = ray.get(client.queue_handle().status.remote(), timeout=30)["pools"][REFLECT_GENERATION_HANDLER]
    assert reflect["attempts"] == 32
    assert reflect["calls"] < reflect["attempts"]  # some starts shared a call


class _QueueBeforeDispatchMany:
    """A queue actor as runtimes before ``dispatch_many`` had it: single dispatches only."""

    def __init__(self) -> None:
        self.accepted: list[str] = []

    def dispatch(self, envelope: dict[str, Any]) -> str:
        self.accepted.append(str(envelope["job_id"]))
        return str(envelope["job_id"])

    def ping(self) -> str:
        return "pong"

    def accepted_ids(self) -> list[str]:
        return list(self.accepted)


def test_rejections_through_the_child_link_keep_their_type_and_the_connection(
    names: RuntimeNames, tmp_path: Path, ledger: Path
) -> None:
    """Through the driver child process that agents' clients use: a batch with a bad envelope raises
    ``InvalidPayloadError`` (not "not running") and accepts nothing; a runtime without
    ``dispatch_many`` raises ``RuntimeMethodMissingError`` and the outbox still delivers every job. Neither
    costs a new child (a Ray connection)."""
    from actors.queue.intake import MAX_DISPATCH_BATCH
    from cluster.runtime_connection import ChildLink, RuntimeMethodMissingError
    from protocol.errors import InvalidPayloadError

    client = _start(names, tmp_path, ledger, for_every_role("testkit.handlers:noop"))
    address = ray.get_runtime_context().gcs_address
    link = ChildLink(address, names.queue, names.namespace)
    old_names = RuntimeNames(prefix=f"old{uuid.uuid4().hex[:8]}")
    old_queue = (
        ray.remote(_QueueBeforeDispatchMany)
        .options(name=old_names.queue, namespace=old_names.namespace, num_cpus=0)
        .remote()
    )
    old_link = ChildLink(address, old_names.queue, old_names.namespace)
    try:
        good = _job("s1", 1, "reflect_generation")
        bad = {"job_id": "job-bad", "correlation_id": "s2", "payload": {"kind": "no_such_kind"}}
        with pytest.raises(InvalidPayloadError, match="index 1"):  # refused before it is sent
            link.call("dispatch_many", ([good.model_dump(), bad],), 60.0)
        too_many = [_job(f"s{n}", n, "reflect_generation") for n in range(MAX_DISPATCH_BATCH + 1)]
        with pytest.raises(InvalidPayloadError):  # refused by the queue, raised in the child
            link.call("dispatch_many", (too_many,), 60.0)
        assert sum(client.job_counts().values()) == 0  # all or nothing
        assert link.call("dispatch_many", ([good],), 60.0) == [good.job_id]
        assert link.children_started == 1

        with pytest.raises(RuntimeMethodMissingError, match="dispatch_many"):
            old_link.call("dispatch_many", ([good],), 60.0)
        old_client = OmrayClient(old_names, link=old_link)
        jobs = [_job(f"s{n}", n, "reflect_generation") for n in range(8)]
        for job in jobs:  # hooks that do not wait: what is waiting goes out together, or one by one
            old_client.outbox.submit(job.job_id, job, 0.0)
        assert old_client.outbox.wait_empty(60)
        assert sorted(ray.get(old_queue.accepted_ids.remote(), timeout=30)) == sorted(j.job_id for j in jobs)
        assert old_link.children_started == 1
    finally:
        link.close()
        old_link.close()
        ray.kill(old_queue, no_restart=True)
