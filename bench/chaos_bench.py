"""``omray bench chaos``: the queue's guarantees while its actors are SIGKILLed.

The same runtime harness, no-op handler and audit as the throughput benchmark
(:mod:`bench.queue_bench`, whose docstring defines every figure), with a seeded schedule of SIGKILLs
of the queue (its database writer too) and of workers while the jobs run.
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

import ray
from ray.exceptions import RayError

from bench.queue_bench import (
    CALL_TIMEOUT_S,
    BenchError,
    _AuditedRun,
    _close_workspace,
    _Dispatcher,
    _get,
    _open_workspace,
    _wait_drained,
    _Workspace,
    machine_info,
)

ActorKind = Literal["queue", "worker"]
"""What the chaos benchmark kills."""
ACTOR_KINDS: tuple[ActorKind, ...] = ("queue", "worker")
"""The queue's database has no StoreActor of its own: killing the queue kills its writer too."""


class ChaosBenchResult(_AuditedRun):
    """``omray bench chaos``: the queue's guarantees while its actors are SIGKILLed."""

    bench: Literal["chaos"] = "chaos"
    """Which benchmark."""
    kills: dict[str, int]
    """SIGKILLs delivered, by actor kind (``queue``, ``worker``)."""
    seed: int
    """Seed of the kill schedule."""
    timed_out: bool
    """The queue did not drain before the timeout (unfinished jobs then count as lost)."""
    seconds: float
    """First dispatch to drained queue (or to the timeout)."""


class _Killer:
    """SIGKILLs one actor of a runtime by the pid its ``ping`` reports, then waits for its restart."""

    def __init__(self, ws: _Workspace, rng: random.Random) -> None:
        self._ws = ws
        self._rng = rng

    def _handle(self, kind: ActorKind) -> Any:
        names = self._ws.names
        actor_name = {
            "queue": names.queue,
            "worker": self._rng.choice([names.observer, names.reflector, names.indexer]),
        }[kind]
        return ray.get_actor(actor_name, namespace=names.namespace)

    def kill(self, kind: ActorKind, deadline: float) -> bool:
        """Kill one actor of ``kind`` and wait until it answers again; False if it could not be killed."""
        return kill_actor(self._handle(kind), deadline)


def kill_actor(handle: Any, deadline: float) -> bool:
    """SIGKILL the actor behind ``handle`` by the pid its ``ping`` reports, then wait for its restart.

    False when it could not be killed: no answer in time, it died on its own meanwhile, or it runs
    on another node.
    """
    try:
        pid = int(_get(handle.ping.remote())["pid"])
        os.kill(pid, signal.SIGKILL)
    except (RayError, ProcessLookupError):
        return False
    while time.monotonic() < deadline:
        try:
            _get(handle.ping.remote(), 5.0)  # the restarted actor (restarts take about a second)
            break
        except RayError:
            continue
    return True


def run_chaos_bench(
    jobs: int,
    *,
    seed: int = 0,
    max_kills: int = 3,
    hold_s: float = 0.02,
    timeout_s: float = 180.0,
    workdir: str | Path | None = None,
) -> ChaosBenchResult:
    """Dispatch ``jobs`` jobs while SIGKILLing the queue (and its database writer) and workers at random.

    At most ``max_kills`` kills (each kind once before any repeats, in a seeded order), each after
    a random pause of 0.1–0.6 s and only while jobs are still unfinished; the run ends when the
    queue has drained or ``timeout_s`` has passed, whichever comes first.
    """
    if jobs < 1 or max_kills < 0:
        raise BenchError(f"need jobs >= 1 and max_kills >= 0, got {jobs!r} and {max_kills!r}")
    rng = random.Random(seed)
    plan: list[ActorKind] = []
    while len(plan) < max_kills:
        plan.extend(rng.sample(ACTOR_KINDS, len(ACTOR_KINDS)))
    plan = plan[:max_kills]
    kills: dict[str, int] = dict.fromkeys(ACTOR_KINDS, 0)
    with tempfile.TemporaryDirectory(prefix="omray-chaos-", dir=workdir) as tmp:
        ws = _open_workspace(Path(tmp), hold_s=hold_s, retry_base_delay_s=0.05)
        deadline = time.monotonic() + timeout_s
        dispatcher = _Dispatcher(ws, jobs, deadline)
        killer = _Killer(ws, rng)
        started = time.perf_counter()
        try:
            dispatcher.start()
            for kind in plan:
                pause_until = time.monotonic() + rng.uniform(0.1, 0.6)
                if _wait_drained(ws, dispatcher.accepted_count, dispatcher.finished.is_set, pause_until):
                    break  # nothing left to disturb
                if killer.kill(kind, deadline):
                    kills[kind] += 1
            drained = _wait_drained(ws, dispatcher.accepted_count, dispatcher.finished.is_set, deadline)
            seconds = time.perf_counter() - started
            dispatcher.join(timeout=CALL_TIMEOUT_S)
        finally:
            audit = _close_workspace(ws, list(dispatcher.accepted), jobs)
    return ChaosBenchResult(
        jobs=jobs,
        completed=audit.completed,
        failed=audit.failed,
        lost=audit.lost,
        rejected=jobs - audit.accepted,
        duplicated=audit.duplicated,
        redelivered=audit.redelivered,
        order_kept=audit.order_kept,
        kills=kills,
        seed=seed,
        timed_out=not drained,
        seconds=round(seconds, 3),
        machine=machine_info(),
    )
