"""Queue benchmarks: throughput of the durable FIFO, and its guarantees under SIGKILL chaos.

Both benchmarks run a runtime with unique actor names and a temporary queue database on the Ray
cluster this process is connected to, dispatch ``N`` jobs whose handler is :func:`idempotent_noop`,
wait until the queue is drained, then audit the outcome from two independent records: the queue's
durable rows (``omray_job``, read after the runtime is removed, so no writer is left) and a ledger
the handler appends to (one JSON line per step of every execution).

The no-op handler's effect is idempotent the way real handlers are: it creates a per-job marker file
with ``O_EXCL``; an execution that finds the marker already there skips the effect. Each execution
writes ``start``, then ``applied`` or ``skipped``, then ``end``.

Definitions (per accepted job, i.e. a job whose ``dispatch`` returned its id):

- ``completed``: its durable row finished ``succeeded``.
- ``failed``: its durable row finished ``failed`` (retries exhausted).
- ``lost``: it never finished (no ``succeeded`` or ``failed`` row), or it finished without any
  execution having started (no ``start`` line).
- ``duplicated``: it finished more than once (two finished rows), or its effect was applied more
  than once, or an execution of it started after its success was durably recorded (the queue
  handed out a job it had already completed). At-least-once plus idempotency must keep this 0.
- ``redelivered``: extra executions that started before its success was recorded (a worker or the
  queue died mid-job); at-least-once delivery allows them.
- ``order_kept``: within each lane (a session, or one database's index work), the first handler
  executions started in acceptance order. Lanes run in parallel, so there is no order across
  lanes. The queue orders *attempts*; an attempt that dies before reaching the handler lets a
  later job of its lane reach the handler first, so a chaos run may report ``false``.

``jobs_per_s`` is the jobs accepted in the throughput run (``--jobs``, from :data:`DISPATCHERS`
agents at once) divided by the time from its first dispatch to a drained queue.
``dispatch_overhead_ms_p50``/``p99`` is the latency of one ``dispatch`` call (the job is durable
when it returns) by one agent alone: :data:`PROBE_JOBS` more jobs dispatched in turn once the
throughput run drained, so ``jobs`` counts ``--jobs`` plus the probes. The same calls during the
throughput run are ``dispatch_ms_p50_concurrent``/``p99``. The baseline sends the same jobs as
plain calls to one Ray actor that runs the same handler with no queue and no durability, pipelined,
one caller at a time, and from :data:`DISPATCHERS` callers at once.

The audit compares timestamps written by workers and by the queue, so it assumes they share a
clock (one machine, or well-synchronized nodes), and the ledger must be on a filesystem every
worker can append to.

Length: over 600 lines, on purpose: the runtime harness and the audit the definitions above describe
are read together. ``omray bench chaos`` (:mod:`bench.chaos_bench`) runs on the same harness.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import os
import sqlite3
import tempfile
import threading
import time
import uuid
import zlib
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar, Literal

import ray
from pydantic import BaseModel, ConfigDict
from ray.exceptions import GetTimeoutError, RayActorError, RayError

from bench.measure import percentile
from cluster.named_actors import ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames
from cluster.pools import ROLE_NAMES, PoolSizes
from protocol.errors import OmrayError
from protocol.jobs import (
    OBSERVE_BOUNDARY_HANDLER,
    REFLECT_GENERATION_HANDLER,
    SEMANTIC_INDEX_HANDLER,
    JobEnvelope,
)
from testkit.handlers import LEDGER_ENV, read_ledger

logger = logging.getLogger("omray.bench")

EFFECTS_ENV = "OMRAY_BENCH_EFFECTS"
"""Directory of the no-op handler's per-job effect markers."""
HOLD_ENV = "OMRAY_BENCH_HOLD_S"
"""Seconds the no-op handler holds its worker before applying its effect (default 0)."""

NOOP_HANDLER_PATH = "bench.queue_bench:idempotent_noop"
"""Import path of the benchmark handler, as the worker actors load it."""
BENCH_HANDLERS: dict[str, str] = {
    OBSERVE_BOUNDARY_HANDLER: NOOP_HANDLER_PATH,
    REFLECT_GENERATION_HANDLER: NOOP_HANDLER_PATH,
    SEMANTIC_INDEX_HANDLER: NOOP_HANDLER_PATH,
}
"""Every handler id runs the no-op, so jobs of all three kinds exercise all three workers."""

CALL_TIMEOUT_S = 30.0
"""Upper bound of one driver-side call; a call that times out is retried until the deadline."""


class BenchError(OmrayError):
    """A benchmark could not run (no Ray connection, bad arguments)."""


# --- the handler (runs inside worker actors) --------------------------------------------------------


def _append_line(path: str, record: Mapping[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (json.dumps(dict(record)) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


EFFECT_TEMPLATES = 64
"""Files the effect markers are hard links of (a file takes at most some 65,000 links on ext4)."""


def _mark_once(effects: Path, job_id: str) -> bool:
    """Create the marker of ``job_id`` unless it exists (atomic across processes); True if created.

    The marker is a hard link to one of a few template files, not a file of its own: a link adds a
    directory entry and no inode, and on a filesystem that has just freed many inodes (every run of
    this benchmark frees one per job) allocating one costs a scan of them each time, measured at
    0.24 ms per marker in a busy ``/tmp`` against 0.008 ms elsewhere on the same disk. That would
    bill the benchmark's own bookkeeping to the queue it measures.
    """
    marker = effects / job_id
    template = effects / f".template-{zlib.crc32(job_id.encode()) % EFFECT_TEMPLATES}"
    try:
        try:
            os.link(template, marker)
        except FileNotFoundError:  # the first marker of this template
            os.close(os.open(template, os.O_WRONLY | os.O_CREAT, 0o600))
            os.link(template, marker)
    except FileExistsError:
        return False  # an earlier execution already applied it: idempotent redelivery
    except OSError as exc:
        if exc.errno != errno.EMLINK:
            raise
        try:  # the template is full: a file of its own
            os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            return False
    return True


def idempotent_noop(envelope: JobEnvelope, attempt: int, context: Any) -> Mapping[str, Any]:
    """Apply a per-job effect at most once (an ``O_EXCL`` marker file) and log each step."""
    ledger = os.environ[LEDGER_ENV]
    effects = Path(os.environ[EFFECTS_ENV])
    base = {"job_id": envelope.job_id, "attempt": attempt, "pid": os.getpid()}
    _append_line(ledger, {**base, "event": "start", "t": time.time()})
    hold_s = float(os.environ.get(HOLD_ENV, "0") or 0)
    if hold_s > 0:
        time.sleep(hold_s)
    effect = "applied" if _mark_once(effects, envelope.job_id) else "skipped"
    _append_line(ledger, {**base, "event": effect, "t": time.time()})
    _append_line(ledger, {**base, "event": "end", "t": time.time()})
    return {"effect": effect}


# --- results ----------------------------------------------------------------------------------------


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MachineInfo(_Frozen):
    """The machine the driver runs on."""

    cores: int
    """Logical CPUs (``os.cpu_count``)."""
    memory_gb: float
    """Physical memory in GiB."""
    cluster_cpus: float
    """CPUs the connected Ray cluster advertises."""


class JobAudit(_Frozen):
    """What happened to the accepted jobs, from the durable rows and the handler's ledger."""

    jobs: int
    """Jobs the benchmark tried to dispatch."""
    accepted: int
    """Jobs whose ``dispatch`` returned their id."""
    completed: int
    """Accepted jobs whose durable row finished ``succeeded``."""
    failed: int
    """Accepted jobs whose durable row finished ``failed``."""
    lost: int
    """Accepted jobs that never finished, or finished without ever starting."""
    duplicated: int
    """Jobs finished twice, applied twice, or started again after their success was recorded."""
    redelivered: int
    """Extra executions before a job's success was recorded (allowed by at-least-once)."""
    executions: int
    """Handler executions started in total."""
    order_kept: bool
    """First handler executions started in acceptance order (see the module docstring)."""


class _AuditedRun(_Frozen):
    """The audit figures every queue benchmark reports (see :class:`JobAudit`)."""

    jobs: int
    """Jobs dispatched (and audited)."""
    completed: int
    """See :class:`JobAudit`."""
    failed: int
    """See :class:`JobAudit`."""
    lost: int
    """See :class:`JobAudit`."""
    rejected: int
    """Jobs whose ``dispatch`` never returned before the deadline (not accepted, so not lost)."""
    duplicated: int
    """See :class:`JobAudit`."""
    redelivered: int
    """See :class:`JobAudit`."""
    order_kept: bool
    """See :class:`JobAudit`."""
    machine: MachineInfo
    """Where it ran."""


class QueueBenchResult(_AuditedRun):
    """``omray bench queue``: throughput and dispatch latency of the durable queue vs plain Ray.

    Headline: what one ``dispatch`` costs while :data:`DISPATCHERS` agents dispatch at once, next to
    a plain Ray actor call with as many callers; then throughput next to plain Ray's. The single
    agent on a drained queue (``dispatch_overhead_ms_*``) is the best case, reported after them.
    """

    HEADLINE: ClassVar[tuple[str, ...]] = (
        "dispatchers",
        "dispatch_ms_p50_concurrent",
        "baseline_call_ms_p50_concurrent",
        "dispatch_ms_p99_concurrent",
        "jobs_per_s",
        "baseline_jobs_per_s",
    )
    """Figures ``omray bench queue`` prints first."""

    bench: Literal["queue"] = "queue"
    """Which benchmark."""
    seconds: float
    """First dispatch to drained queue."""
    jobs_per_s: float
    """Accepted jobs per second through the durable queue."""
    dispatch_overhead_ms_p50: float
    """Median latency of one durable ``dispatch`` call by one agent alone on a drained queue (the
    best case: ``probe_jobs`` calls in turn after the throughput run; compare
    ``baseline_call_ms_p50``)."""
    dispatch_overhead_ms_p99: float
    """99th percentile of the same calls."""
    dispatch_ms_p50_concurrent: float
    """Median latency of one ``dispatch`` call during the throughput run, with :data:`DISPATCHERS`
    agents dispatching at once (compare ``baseline_call_ms_p50_concurrent``)."""
    dispatch_ms_p99_concurrent: float
    """99th percentile of the same calls."""
    probe_jobs: int
    """Jobs dispatched one at a time for the single-agent latency (audited with the others)."""
    dispatchers: int
    """Agents dispatching at once in the throughput run."""
    pools: dict[str, int]
    """Workers x slots of each pool in this run (fixed, :data:`THROUGHPUT_POOLS`)."""
    baseline_jobs_per_s: float | None
    """The same jobs as pipelined calls on one plain Ray actor (no durability); None when skipped."""
    baseline_call_ms_p50: float | None
    """Median round trip of one synchronous plain actor call by one caller; None when skipped."""
    baseline_call_ms_p50_concurrent: float | None
    """Median round trip of one plain actor call with :data:`DISPATCHERS` callers at once; None when
    skipped."""


# --- helpers ----------------------------------------------------------------------------------------


def machine_info() -> MachineInfo:
    """Cores and memory of this machine, and the CPUs of the connected cluster."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = 0
    resources: dict[str, Any] = ray.cluster_resources() if ray.is_initialized() else {}  # type: ignore[no-untyped-call]
    cpus = float(resources.get("CPU", 0.0))
    return MachineInfo(cores=os.cpu_count() or 1, memory_gb=round(memory / 2**30, 1), cluster_cpus=cpus)


BENCH_LANES = 16
"""Sessions the benchmark jobs are spread over (lanes of the queue)."""


def bench_lane(job_id: str) -> str:
    """The lane of a benchmark job, from its id (see :func:`bench_job`); other ids share one lane."""
    bench_run, _, number = job_id.rpartition("-")
    if not number.isdigit():
        return "other"
    n = int(number)
    if (n // BENCH_LANES) % 3 == 0:
        return f"index:{job_id}"
    return f"{bench_run}-lane{n % BENCH_LANES}"


def bench_job(bench_run: str, n: int) -> JobEnvelope:
    """Job number ``n``, with paths that no handler opens.

    Jobs go round-robin over :data:`BENCH_LANES` sessions; within a session the kinds alternate
    so that no two observe jobs are adjacent, and every index job has a database (a lane) of its
    own, so nothing is coalesced and every accepted job runs its handler.
    """
    kind = ("semantic_index", "observe_boundary", "reflect_generation")[(n // BENCH_LANES) % 3]
    job_id = f"{bench_run}-{n:06d}"
    session = f"{bench_run}-lane{n % BENCH_LANES}"
    db_path = f"/nonexistent/{n}/om.sqlite" if kind == "semantic_index" else "/nonexistent/om.sqlite"
    payload: dict[str, Any] = {"kind": kind, "session_id": session, "db_path": db_path}
    if kind == "observe_boundary":
        payload |= {
            "terminal_end_seq": n + 1,
            "terminal_status": "completed",
            "renderer_version": "1",
            "observer_schema_version": "1",
            "events_path": "/nonexistent/events.jsonl",
        }
    elif kind == "reflect_generation":
        payload |= {
            "generation_id": f"{n:064x}",
            "observation_set_hash": f"{n + 1:064x}",
            "reflector_model": "bench/noop",
            "reflector_schema_version": "1",
        }
    return JobEnvelope.model_validate({"job_id": job_id, "session_id": session, "payload": payload})


@dataclass(frozen=True)
class JobRow:
    """One durable ``omray_job`` row, as the audit needs it."""

    job_id: str
    """Job id."""
    state: str
    """``pending``, ``running``, ``succeeded`` or ``failed``."""
    finished_at: float | None
    """Epoch seconds of the finish, if finished."""


def read_job_rows(queue_db: str) -> list[JobRow]:
    """Every row of the queue database, read-only (call it after the StoreActor is gone)."""
    if not Path(queue_db).exists():
        return []
    # A post-mortem audit read: the writer (StoreActor) has been removed, so nothing else writes.
    conn = sqlite3.connect(f"file:{queue_db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT job_id, state, finished_at FROM omray_job ORDER BY job_seq").fetchall()
    finally:
        conn.close()
    return [
        JobRow(
            job_id=r[0], state=r[1], finished_at=datetime.fromisoformat(r[2]).timestamp() if r[2] else None
        )
        for r in rows
    ]


def audit_jobs(jobs: int, accepted: list[str], rows: list[JobRow], ledger: list[dict[str, Any]]) -> JobAudit:
    """Count completed, lost, duplicated and redelivered jobs (definitions in the module docstring)."""
    rows_by_job: dict[str, list[JobRow]] = defaultdict(list)
    for row in rows:
        rows_by_job[row.job_id].append(row)
    starts: dict[str, list[float]] = defaultdict(list)
    applied: dict[str, int] = defaultdict(int)
    first_start_order: list[str] = []
    for line in ledger:
        job_id = str(line["job_id"])
        if line["event"] == "start":
            if job_id not in starts:
                first_start_order.append(job_id)
            starts[job_id].append(float(line["t"]))
        elif line["event"] == "applied":
            applied[job_id] += 1
    completed = failed = lost = duplicated = redelivered = 0
    for job_id in accepted:
        finished = [r for r in rows_by_job.get(job_id, []) if r.state in ("succeeded", "failed")]
        succeeded_at = [
            r.finished_at for r in finished if r.state == "succeeded" and r.finished_at is not None
        ]
        job_starts = starts.get(job_id, [])
        if not finished or not job_starts:
            lost += 1
        elif any(r.state == "succeeded" for r in finished):
            completed += 1
        else:
            failed += 1
        success_at = min(succeeded_at) if succeeded_at else None
        before = [t for t in job_starts if success_at is None or t <= success_at]
        after = len(job_starts) - len(before)
        if len(finished) > 1 or applied.get(job_id, 0) > 1 or after > 0:
            duplicated += 1
        redelivered += max(len(before) - 1, 0)
    accepted_set = set(accepted)
    order = [job_id for job_id in first_start_order if job_id in accepted_set]
    expected = [job_id for job_id in accepted if job_id in starts]
    order_kept = all(
        [job_id for job_id in order if bench_lane(job_id) == lane]
        == [job_id for job_id in expected if bench_lane(job_id) == lane]
        for lane in {bench_lane(job_id) for job_id in expected}
    )
    return JobAudit(
        jobs=jobs,
        accepted=len(accepted),
        completed=completed,
        failed=failed,
        lost=lost,
        duplicated=duplicated,
        redelivered=redelivered,
        executions=sum(len(v) for v in starts.values()),
        order_kept=order_kept,
    )


def _get(ref: Any, timeout_s: float = CALL_TIMEOUT_S) -> Any:
    return ray.get(ref, timeout=timeout_s)


def _retrying(call: Callable[[], Any], deadline: float) -> Any:
    """``call()`` until it answers; Ray retries the queue's methods across restarts, this bounds it."""
    while True:
        try:
            return call()
        except (GetTimeoutError, RayActorError):
            if time.monotonic() > deadline:
                raise


@dataclass
class _Workspace:
    """A runtime with unique names, its temporary files, and its handles."""

    names: RuntimeNames
    directory: Path
    queue_db: str
    ledger: str
    queue: Any = None
    bench_run: str = field(default_factory=lambda: f"bench-{uuid.uuid4().hex[:8]}")


def fixed_pools(workers: int, slots: int) -> PoolSizes:
    """Every role at exactly ``workers`` actors (minimum = maximum: the autoscaler starts no process
    mid-run), each running ``slots`` jobs at once."""
    return PoolSizes(
        observers=workers,
        reflectors=workers,
        indexers=workers,
        observer_slots=slots,
        reflector_slots=slots,
        indexer_slots=slots,
        max_observers=workers,
        max_reflectors=workers,
        max_indexers=workers,
    )


THROUGHPUT_POOLS = fixed_pools(workers=2, slots=8)
"""Worker pools of the throughput run: fixed (no process starts mid-run) and with slots enough for every
lane, so the figure is the queue's own rate, not that of a one-slot pool running no-op jobs in turn
(the production pools give index work one slot, since real index work is CPU-bound)."""


def _open_workspace(
    directory: Path, hold_s: float, retry_base_delay_s: float, pools: PoolSizes | None = None
) -> _Workspace:
    if not ray.is_initialized():
        raise BenchError("not connected to Ray: call ray.init() (or use `omray bench`) first")
    names = RuntimeNames(prefix=f"bench{uuid.uuid4().hex[:10]}")
    effects = directory / "effects"
    effects.mkdir(parents=True, exist_ok=True)
    ws = _Workspace(
        names=names,
        directory=directory,
        queue_db=str(directory / "queue.sqlite"),
        ledger=str(directory / "ledger.jsonl"),
    )
    ws.queue = ensure_runtime(
        names,
        queue_db=ws.queue_db,
        handler_paths=BENCH_HANDLERS,
        worker_env={LEDGER_ENV: ws.ledger, EFFECTS_ENV: str(effects), HOLD_ENV: str(hold_s)},
        retry_base_delay_s=retry_base_delay_s,
        pools=pools,
    )
    # Workers start lazily: wait until each answers so startup is not billed to the first jobs.
    for actor_name in (names.observer, names.reflector, names.indexer):
        _get(ray.get_actor(actor_name, namespace=names.namespace).ping.remote(), 120.0)
    return ws


def _durably_drained(ws: _Workspace, accepted: int) -> bool:
    # The in-memory check first: it takes no SQL and no store lock, so polling it every few ms does
    # not load the queue being measured; the durable counts decide once it says idle.
    if not _get(ws.queue.is_idle.remote()):
        return False
    counts = _get(ws.queue.job_counts.remote())
    finished = int(counts["succeeded"]) + int(counts["failed"])
    return int(counts["pending"]) == 0 and int(counts["running"]) == 0 and finished >= accepted


def _wait_drained(
    ws: _Workspace, accepted: Callable[[], int], done: Callable[[], bool], deadline: float
) -> bool:
    while time.monotonic() < deadline:
        try:
            if done() and _durably_drained(ws, accepted()):
                return True
        except (GetTimeoutError, RayActorError):
            pass  # the queue is restarting: ask again
        time.sleep(0.02)
    return False


def _close_workspace(ws: _Workspace, accepted: list[str], jobs: int) -> JobAudit:
    remove_runtime(ws.names)
    return audit_jobs(jobs, accepted, read_job_rows(ws.queue_db), read_ledger(ws.ledger))


DISPATCHERS = 8
"""Concurrent dispatching agents (each owns the lanes ``n % DISPATCHERS`` of its jobs)."""

PROBE_JOBS = 200
"""Jobs one agent dispatches in turn, after the throughput run, for the single-agent latency."""


class _Dispatcher(threading.Thread):
    """Dispatches the jobs from :data:`DISPATCHERS` threads, like concurrent agents, timing each call.

    Thread ``i`` dispatches jobs ``n`` with ``n % DISPATCHERS == i`` in order; since lanes are
    ``n % BENCH_LANES`` (a multiple of the thread count), each lane is fed by one thread, in order.
    """

    def __init__(self, ws: _Workspace, jobs: int, deadline: float, threads: int = DISPATCHERS) -> None:
        super().__init__(name="omray-bench-dispatch", daemon=True)
        if BENCH_LANES % threads:
            raise BenchError(f"dispatch threads must divide {BENCH_LANES}, got {threads!r}")
        self._ws = ws
        self._jobs = jobs
        self._deadline = deadline
        self._threads = threads
        self._lock = threading.Lock()
        self.accepted: list[str] = []
        self.latencies_ms: list[float] = []
        self.finished = threading.Event()

    def accepted_count(self) -> int:
        with self._lock:
            return len(self.accepted)

    def _dispatch_once(self, job: JobEnvelope) -> Any:
        return _get(self._ws.queue.dispatch.remote(job))

    def _feed(self, first: int) -> None:
        self.feed(range(first, self._jobs, self._threads))

    def feed(self, numbers: range) -> None:
        """Dispatch jobs ``numbers`` in order from the calling thread, timing each call."""
        for n in numbers:
            job = bench_job(self._ws.bench_run, n)
            started = time.perf_counter()
            try:
                job_id = _retrying(functools.partial(self._dispatch_once, job), self._deadline)
            except RayError as exc:
                logger.warning(
                    "dispatch gave up", extra={"job_id": job.job_id, "error_class": type(exc).__name__}
                )
                continue
            with self._lock:
                self.latencies_ms.append((time.perf_counter() - started) * 1000.0)
                self.accepted.append(str(job_id))

    def run(self) -> None:
        try:
            feeders = [
                threading.Thread(target=self._feed, args=(i,), daemon=True) for i in range(self._threads)
            ]
            for feeder in feeders:
                feeder.start()
            for feeder in feeders:
                feeder.join()
        finally:
            self.finished.set()


# --- baseline -----------------------------------------------------------------------------------------


class _PlainActor:
    """One plain Ray actor running the same handler: no queue, no store, no durability."""

    def __init__(self, directory: str) -> None:
        os.environ[LEDGER_ENV] = str(Path(directory) / "baseline-ledger.jsonl")
        os.environ[EFFECTS_ENV] = str(Path(directory) / "baseline-effects")
        Path(os.environ[EFFECTS_ENV]).mkdir(parents=True, exist_ok=True)

    def handle(self, envelope_data: Mapping[str, Any], attempt: int) -> Mapping[str, Any]:
        return idempotent_noop(JobEnvelope.model_validate(envelope_data), attempt, None)


@dataclass
class Baseline:
    """Plain Ray figures of one run (see :func:`run_baseline`)."""

    jobs_per_s: float
    call_ms_p50: float
    call_ms_p50_concurrent: float


def run_baseline(jobs: int, directory: Path, probes: int) -> Baseline:
    """Plain-actor throughput (pipelined calls), and the median synchronous call in ms, alone and
    with :data:`DISPATCHERS` callers at once (the actor runs that many calls at a time)."""
    actor: Any = (
        ray.remote(_PlainActor).options(num_cpus=0, max_concurrency=DISPATCHERS).remote(str(directory))
    )
    try:
        envelopes = [bench_job("baseline", n).model_dump() for n in range(jobs)]
        _get(actor.handle.remote(envelopes[0], 0), 120.0)  # warm up: process start and imports
        started = time.perf_counter()
        _get([actor.handle.remote(e, 1) for e in envelopes], 300.0)
        jobs_per_s = jobs / max(time.perf_counter() - started, 1e-9)
        calls: list[float] = []
        for envelope in envelopes[:probes]:
            t0 = time.perf_counter()
            _get(actor.handle.remote(envelope, 2))
            calls.append((time.perf_counter() - t0) * 1000.0)
        concurrent: list[float] = []
        lock = threading.Lock()

        def call_in_turn(first: int) -> None:
            for envelope in envelopes[first::DISPATCHERS]:
                t0 = time.perf_counter()
                _get(actor.handle.remote(envelope, 3))
                with lock:
                    concurrent.append((time.perf_counter() - t0) * 1000.0)

        callers = [threading.Thread(target=call_in_turn, args=(i,), daemon=True) for i in range(DISPATCHERS)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join()
        return Baseline(jobs_per_s, percentile(calls, 0.5), percentile(concurrent, 0.5))
    finally:
        ray.kill(actor, no_restart=True)


# --- the benchmarks -----------------------------------------------------------------------------------


def run_queue_bench(
    jobs: int,
    *,
    workdir: str | Path | None = None,
    timeout_s: float = 600.0,
    baseline: bool = True,
) -> QueueBenchResult:
    """Dispatch ``jobs`` no-op jobs through a fresh durable runtime and measure it (Ray must be connected)."""
    if jobs < 1:
        raise BenchError(f"jobs must be at least 1, got {jobs!r}")
    with tempfile.TemporaryDirectory(prefix="omray-bench-", dir=workdir) as tmp:
        directory = Path(tmp)
        ws = _open_workspace(directory, hold_s=0.0, retry_base_delay_s=0.05, pools=THROUGHPUT_POOLS)
        deadline = time.monotonic() + timeout_s
        dispatcher = _Dispatcher(ws, jobs, deadline)
        probes = min(jobs, PROBE_JOBS)
        prober = _Dispatcher(ws, jobs + probes, deadline, threads=1)
        started = time.perf_counter()
        try:
            dispatcher.start()
            _wait_drained(ws, dispatcher.accepted_count, dispatcher.finished.is_set, deadline)
            seconds = time.perf_counter() - started
            dispatcher.join(timeout=CALL_TIMEOUT_S)
            # One agent alone: the same kind of jobs, dispatched in turn on the drained queue.
            prober.feed(range(jobs, jobs + probes))
            _wait_drained(ws, lambda: len(dispatcher.accepted) + len(prober.accepted), lambda: True, deadline)
        finally:
            audit = _close_workspace(ws, list(dispatcher.accepted) + list(prober.accepted), jobs + probes)
        base = run_baseline(jobs, directory, probes) if baseline else None
    latencies = sorted(dispatcher.latencies_ms)
    alone = sorted(prober.latencies_ms)
    return QueueBenchResult(
        jobs=jobs + probes,
        completed=audit.completed,
        failed=audit.failed,
        lost=audit.lost,
        rejected=jobs + probes - audit.accepted,
        duplicated=audit.duplicated,
        redelivered=audit.redelivered,
        order_kept=audit.order_kept,
        seconds=round(seconds, 3),
        jobs_per_s=round(len(dispatcher.accepted) / max(seconds, 1e-9), 1),
        dispatch_overhead_ms_p50=round(percentile(alone, 0.5), 3),
        dispatch_overhead_ms_p99=round(percentile(alone, 0.99), 3),
        dispatch_ms_p50_concurrent=round(percentile(latencies, 0.5), 3),
        dispatch_ms_p99_concurrent=round(percentile(latencies, 0.99), 3),
        probe_jobs=probes,
        dispatchers=DISPATCHERS,
        pools={
            role: THROUGHPUT_POOLS.max_of(h) * THROUGHPUT_POOLS.slots_of(h) for h, role in ROLE_NAMES.items()
        },
        baseline_jobs_per_s=None if base is None else round(base.jobs_per_s, 1),
        baseline_call_ms_p50=None if base is None else round(base.call_ms_p50, 3),
        baseline_call_ms_p50_concurrent=None if base is None else round(base.call_ms_p50_concurrent, 3),
        machine=machine_info(),
    )
