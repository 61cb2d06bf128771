"""``omray bench chaos --real``: SIGKILL the runtime's actors while real jobs run; memory must not change.

The workload of :mod:`bench.chaos_workload` (agents through the public client, the scripted model
through the real ``openai`` client, scripted embeddings) runs once without faults, the *baseline*,
and then once per seed on a fresh runtime while a seeded schedule SIGKILLs the QueueActor, the
ObserverActor, the ReflectorActor, the IndexerActor and the memory database's StoreActor. Each
run's memory is read with :func:`testkit.memory_snapshot.memory_snapshot` and compared with the
baseline's.

The kill schedule (:func:`plan_kills`) is drawn from the seed and the baseline's request counts:
each kind is killed ``kills_per_kind`` times, each time ``delay_s`` (0 to twice the model latency)
after the ``n``-th request its trigger counts arrives at the scripted server, so the kill lands
while that request is in flight, or while its answer is being committed. A worker is triggered by
requests of its own role (the Observer's, the Reflector's and Dropper's, the embeddings of the
Indexer), the queue and the store by requests of any kind. The killer waits for each killed actor
to answer again before the next kill, and tries an actor that does not answer again for up to
:data:`KILL_WAIT_S`; a trigger the run never reaches is not delivered (``kills`` counts delivered
ones, ``missed_kills`` the others, by kind).

Per seed:

- ``memory_identical``: every section of the snapshot equals the baseline's (see
  :mod:`testkit.memory_snapshot` for what is compared and what is left out).
- ``lost``: observations, coverage rows and reflections of the baseline that the run lacks, plus
  input events the run's coverage does not reach.
- ``duplicated``: observations, coverage rows and reflections the run has and the baseline lacks
  (an observation recorded twice, a range covered again by another plan). Coverage rows that
  overlap by design (a tool call and its result packed into different chunks, as in the original)
  are in the baseline too, so they do not count.
- ``failed_jobs``: jobs that used up their attempts (each kill costs the jobs it hits one attempt).

The runs need a Ray cluster this process is connected to (``omray bench`` starts a private one).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import ray

from bench.chaos_bench import kill_actor
from bench.chaos_workload import (
    CountingServer,
    RequestKind,
    Workload,
    drive,
    last_seqs,
    uncovered_events,
    wait_settled,
)
from bench.queue_bench import BenchError, MachineInfo, _Frozen, machine_info
from cluster.client import OmrayClient
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames
from cluster.pools import PoolSizes
from testkit.memory_snapshot import MemorySnapshot, compare_memory, memory_snapshot

logger = logging.getLogger("omray.bench")

KillKind = Literal["queue", "observer", "reflector", "indexer", "store"]
"""What the real chaos benchmark kills (``store``: the memory database's StoreActor)."""
KILL_KINDS: tuple[KillKind, ...] = get_args(KillKind)
"""Every kind, in the order above."""
TRIGGER_OF: dict[KillKind, str] = {
    "queue": "any",
    "observer": "observer",
    "reflector": "reflector",
    "indexer": "embeddings",
    "store": "any",
}
"""The request count that triggers each kind's kills."""
CLUSTER_STOP_TIMEOUT_S = 900.0
"""Upper bound of the whole-cluster stop run (two heads started, the workload, one head stopped)."""
ITEM_SECTIONS = ("observations", "coverage", "reflections")
"""Snapshot sections whose rows count as memory items for ``lost`` and ``duplicated``."""
KILL_WAIT_S = 30.0
"""How long the killer keeps trying to kill an actor that does not answer (it may be restarting)."""
CHAOS_POOLS = PoolSizes(observers=1, reflectors=1, indexers=1, observer_slots=4, reflector_slots=2)
"""One worker per role, so a kill hits every job of that role in flight."""


@dataclass(frozen=True)
class KillPoint:
    """Kill ``kind`` ``delay_s`` after the ``after_requests``-th request counted by ``trigger``."""

    kind: KillKind
    """What to kill."""
    trigger: str
    """``observer``, ``reflector``, ``embeddings`` or ``any``."""
    after_requests: int
    """1-based request number of the trigger."""
    delay_s: float
    """Pause between the request's arrival and the kill."""


def plan_kills(
    seed: int, requests: Mapping[str, int], kills_per_kind: int = 1, max_delay_s: float = 0.3
) -> tuple[KillPoint, ...]:
    """The seeded schedule: ``kills_per_kind`` distinct trigger points per kind within ``requests``.

    ``requests`` are the baseline's request counts by trigger; a kind whose trigger saw no
    request gets no kill. Points of one kind are in request order.
    """
    if kills_per_kind < 0 or max_delay_s < 0:
        raise BenchError(
            f"need kills_per_kind >= 0 and max_delay_s >= 0, got {kills_per_kind!r}, {max_delay_s!r}"
        )
    rng = random.Random(seed)
    points: list[KillPoint] = []
    for kind in KILL_KINDS:
        trigger = TRIGGER_OF[kind]
        available = int(requests.get(trigger, 0))
        chosen = sorted(rng.sample(range(1, available + 1), min(kills_per_kind, max(available, 0))))
        points.extend(KillPoint(kind, trigger, n, round(rng.uniform(0.0, max_delay_s), 3)) for n in chosen)
    return tuple(points)


class Killer(threading.Thread):
    """Delivers a kill schedule: the scripted server reports requests, this thread kills, one at a time."""

    def __init__(self, names: RuntimeNames, db_path: Path, schedule: tuple[KillPoint, ...]) -> None:
        super().__init__(name="omray-chaos-killer", daemon=True)
        self._names = names
        self._db_path = str(db_path.resolve())
        # The queue and the store share a trigger: two kinds may be due at one request.
        self._due: dict[tuple[str, int], list[KillPoint]] = {}
        for point in schedule:
            self._due.setdefault((point.trigger, point.after_requests), []).append(point)
        self._scheduled: Counter[str] = Counter(point.kind for point in schedule)
        self._fired: queue.Queue[KillPoint | None] = queue.Queue()
        self.kills: Counter[str] = Counter()

    def on_request(self, kind: RequestKind, count: int) -> None:
        """Called by the server as a request arrives: queue the kill it triggers, if any."""
        for point in self._due.pop((kind, count), []):
            self._fired.put(point)

    def _actor_name(self, kind: KillKind) -> str:
        names = self._names
        if kind == "store":
            return names.store(self._db_path)
        return names.queue if kind == "queue" else names.worker(kind, 0)

    def run(self) -> None:
        while (point := self._fired.get()) is not None:
            time.sleep(point.delay_s)
            if self._kill(point.kind):
                self.kills[point.kind] += 1

    def _kill(self, kind: KillKind, wait_s: float = KILL_WAIT_S) -> bool:
        """Kill one actor of ``kind``; one that does not answer its ping (restarting after a kill
        of another kind, or busy) is looked up and tried again for up to ``wait_s``."""
        deadline = time.monotonic() + wait_s
        while True:
            handle = self._find(kind, max(0.0, deadline - time.monotonic()))
            if handle is not None and kill_actor(handle, time.monotonic() + 120.0):
                return True
            if time.monotonic() > deadline:
                logger.warning("chaos kill not delivered", extra={"kind": kind})
                return False
            time.sleep(0.2)

    def _find(self, kind: KillKind, wait_s: float = 10.0) -> Any:
        """The actor to kill; one created on demand (a StoreActor) or being restarted after an
        earlier kill may be missing for a moment, so look again for a while; ``None`` if it never
        appears."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                return ray.get_actor(self._actor_name(kind), namespace=self._names.namespace)
            except ValueError:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.05)

    def finish(self) -> dict[str, int]:
        """Deliver the kills already triggered, stop, and return the kills by kind."""
        self._fired.put(None)
        self.join(timeout=300)
        return {kind: self.kills[kind] for kind in KILL_KINDS}

    def missed(self) -> dict[str, int]:
        """Scheduled kills not delivered, by kind: their trigger request never came (the run made
        fewer requests than the baseline), the actor could not be killed, or the killer was still
        busy when :meth:`finish` gave up waiting. Call after :meth:`finish`."""
        missed = self._scheduled - self.kills
        return {kind: missed[kind] for kind in KILL_KINDS if missed[kind]}


@dataclass
class RunRecord:
    """One run of the workload on a fresh runtime."""

    snapshot: MemorySnapshot
    """Its memory, read after the runtime was removed."""
    kills: dict[str, int]
    """Kills delivered, by kind."""
    missed_kills: dict[str, int]
    """Scheduled kills not delivered, by kind (see :meth:`Killer.missed`)."""
    requests: dict[str, int]
    """Requests the scripted server received, by kind (and ``any``)."""
    job_counts: dict[str, int]
    """Durable job counts by state at the end."""
    uncovered: int
    """Input events the coverage does not reach."""
    settled: bool
    """Every round settled in time."""
    seconds: float
    """First turn to the end of the run."""


def run_workload(
    workload: Workload, directory: Path, schedule: tuple[KillPoint, ...] = (), retry_base_delay_s: float = 0.1
) -> RunRecord:
    """Run the workload once on a fresh runtime in ``directory``, delivering ``schedule``'s kills."""
    if not ray.is_initialized():
        raise BenchError("not connected to Ray: call ray.init() (or use `omray bench`) first")
    names = RuntimeNames(prefix=f"chaos{uuid.uuid4().hex[:8]}")
    project = directory / "project"
    project.mkdir(parents=True)
    killer = Killer(names, project / "om.sqlite", schedule)
    started = time.monotonic()
    with CountingServer(workload.model_latency_s, on_request=killer.on_request) as server:
        client = OmrayClient(names, settings=workload.settings(project, server.base_url), cwd=project)
        try:
            ensure_runtime(
                names,
                queue_db=str(directory / "queue.sqlite"),
                handler_paths=DEFAULT_HANDLERS,
                retry_base_delay_s=retry_base_delay_s,
                pools=CHAOS_POOLS,
            )
            for role in ("observer", "reflector", "indexer"):  # started lazily: not billed to the run
                ray.get(ray.get_actor(names.worker(role, 0), namespace=names.namespace).ping.remote())
            killer.start()
            result = drive(client, project, workload)
            kills = killer.finish()
            # A kill triggered by the last requests may have landed after the last round settled.
            settled = wait_settled(client, result.last_seqs, workload.settle_timeout_s)
            settled = settled and result.rounds_settled == workload.turns + 1
            counts = client.job_counts()
            seconds = time.monotonic() - started
        finally:
            client.close()
            remove_runtime(names)
        requests = dict(server.counts)
    return RunRecord(
        snapshot=memory_snapshot(project / "om.sqlite"),
        kills=kills,
        missed_kills=killer.missed(),
        requests=requests,
        job_counts={k: int(v) for k, v in counts.items()},
        uncovered=uncovered_events(project, workload),
        settled=settled,
        seconds=round(seconds, 2),
    )


# --- results ------------------------------------------------------------------------------------------


class MemoryAudit(_Frozen):
    """How one run's memory compares with the baseline's (definitions in the module docstring)."""

    lost: int
    """Baseline memory items the run lacks, plus input events its coverage does not reach."""
    duplicated: int
    """Memory items the run has and the baseline lacks."""
    memory_identical: bool
    """Every snapshot section equals the baseline's."""
    differing: list[str]
    """Snapshot sections that differ."""
    failed_jobs: int
    """Jobs that used up their attempts."""
    settled: bool
    """Every round settled before its timeout."""
    seconds: float
    """First turn to the end of the run."""


class SeedResult(MemoryAudit):
    """One seed: its kill schedule delivered while the workload ran."""

    seed: int
    """Seed of the kill schedule."""
    kills: dict[str, int]
    """Kills delivered, by kind."""
    missed_kills: dict[str, int]
    """Scheduled kills not delivered, by kind: the trigger never came or the actor did not die."""


class ClusterStopResult(MemoryAudit):
    """The whole Ray cluster stopped mid-run (every process of its head) and started again."""

    stopped_processes: int
    """Processes of the head that were stopped."""
    restarted: bool
    """The second ``omray up`` succeeded."""
    restart_seconds: float
    """From the stop to the end of the second ``omray up``."""


class RealChaosResult(_Frozen):
    """``omray bench chaos --real``: memory after seeded kills, compared with an uninterrupted run."""

    bench: Literal["chaos_real"] = "chaos_real"
    """Which benchmark."""
    sessions: int
    """Sessions of the workload."""
    turns: int
    """Turns per session."""
    events: int
    """Events appended per run."""
    kills_per_kind: int
    """Kills scheduled per kind and seed."""
    lost: int
    """Summed over every seed and the cluster stop."""
    duplicated: int
    """Summed over every seed and the cluster stop."""
    memory_identical: bool
    """True when every seed's memory (and the cluster stop's) equals the baseline's."""
    kills: dict[str, int]
    """Kills delivered over all seeds, by kind (``cluster``: whole-cluster stops)."""
    seeds: list[SeedResult]
    """Per seed."""
    cluster_stop: ClusterStopResult | None
    """The whole-cluster stop run (None when skipped)."""
    baseline: dict[str, Any]
    """The uninterrupted run: memory sizes, requests by kind, jobs, seconds."""
    machine: MachineInfo
    """Where it ran."""


def audit_memory(run: RunRecord, reference: MemorySnapshot) -> dict[str, Any]:
    """The :class:`MemoryAudit` fields of one run against the baseline's memory."""
    diff = compare_memory(run.snapshot, reference)
    return {
        "lost": sum(diff.missing.get(name, 0) for name in ITEM_SECTIONS) + run.uncovered,
        "duplicated": sum(diff.extra.get(name, 0) for name in ITEM_SECTIONS),
        "memory_identical": diff.identical,
        "differing": list(diff.differing),
        "failed_jobs": int(run.job_counts.get("failed", 0)),
        "settled": run.settled,
        "seconds": run.seconds,
    }


def run_real_chaos(
    workload: Workload,
    seeds: list[int],
    *,
    kills_per_kind: int = 1,
    cluster_stop: bool = True,
    workdir: str | Path | None = None,
) -> RealChaosResult:
    """The baseline, one chaos run per seed, and (``cluster_stop``) the whole-cluster stop run."""
    if not seeds:
        raise BenchError("need at least one seed")
    with tempfile.TemporaryDirectory(prefix="omray-chaos-real-", dir=workdir) as tmp:
        directory = Path(tmp)
        baseline = run_workload(workload, directory / "baseline")
        if not baseline.settled or baseline.uncovered or baseline.job_counts.get("failed", 0):
            raise BenchError("the uninterrupted run did not finish its work; nothing to compare with")
        results: list[SeedResult] = []
        for seed in seeds:
            schedule = plan_kills(seed, baseline.requests, kills_per_kind, 2 * workload.model_latency_s)
            run = run_workload(workload, directory / f"seed-{seed}", schedule)
            results.append(
                SeedResult(
                    seed=seed,
                    kills=run.kills,
                    missed_kills=run.missed_kills,
                    **audit_memory(run, baseline.snapshot),
                )
            )
        stop = (
            run_cluster_stop(workload, seeds[0], baseline, directory / "cluster-stop")
            if cluster_stop
            else None
        )
    kills: dict[str, int] = {kind: sum(r.kills.get(kind, 0) for r in results) for kind in KILL_KINDS}
    if stop is not None:
        kills["cluster"] = 1 if stop.stopped_processes else 0
    audited: list[MemoryAudit] = [*results, *([stop] if stop is not None else [])]
    return RealChaosResult(
        sessions=workload.sessions,
        turns=workload.turns,
        events=sum(last_seqs(workload).values()),
        kills_per_kind=kills_per_kind,
        lost=sum(r.lost for r in audited),
        duplicated=sum(r.duplicated for r in audited),
        memory_identical=all(r.memory_identical for r in audited),
        kills=kills,
        seeds=results,
        cluster_stop=stop,
        baseline={
            "memory": {name: baseline.snapshot.count(name) for name in sorted(baseline.snapshot.sections)},
            "requests": baseline.requests,
            "jobs": baseline.job_counts.get("succeeded", 0),
            "seconds": baseline.seconds,
        },
        machine=machine_info(),
    )


def run_cluster_stop(
    workload: Workload, seed: int, baseline: RunRecord, directory: Path
) -> ClusterStopResult:
    """Run :mod:`bench.cluster_stop` in a subprocess (own ``OMRAY_HOME``); audit it against ``baseline``."""
    total = int(baseline.requests.get("any", 0))
    after = random.Random(seed).randint(max(total // 4, 1), max(3 * total // 4, 1))
    directory.mkdir(parents=True)
    env = {
        **os.environ,
        "OMRAY_HOME": str(directory / "home"),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        **{
            f"OMRAY_{field.name.upper()}": str(getattr(CHAOS_POOLS, field.name))
            for field in dataclasses.fields(CHAOS_POOLS)
        },
    }
    env.pop("RAY_ADDRESS", None)  # its own head, never the benchmark's private cluster
    spec = {
        "workload": dataclasses.asdict(workload),
        "stop_after_requests": after,
        "directory": str(directory),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.cluster_stop", json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=CLUSTER_STOP_TIMEOUT_S,
        check=False,
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise BenchError(f"the cluster-stop run failed with exit code {done.returncode}")
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    run = RunRecord(
        snapshot=MemorySnapshot.from_json(report["snapshot"]),
        kills={},
        missed_kills={},
        requests=report["requests"],
        job_counts=report["job_counts"],
        uncovered=int(report["uncovered"]),
        settled=bool(report["settled"]),
        seconds=float(report["seconds"]),
    )
    return ClusterStopResult(
        stopped_processes=int(report["stopped_processes"]),
        restarted=bool(report["restarted"]),
        restart_seconds=float(report["restart_seconds"]),
        **audit_memory(run, baseline.snapshot),
    )
