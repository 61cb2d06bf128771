"""``omray bench up``: the time of ``omray up``, the idle runtime's memory, the time of ``omray down``.

Each variant runs ``python -m cluster.commands.cli up`` on a free port with its own ``OMRAY_HOME``, waits
for the runtime to settle, sums PSS and RSS (``/proc/<pid>/smaps_rollup``, Linux) of every process
of that head by kind (GCS, raylet, dashboard and its module processes, agents, each actor class,
idle workers), counts the actors, then runs ``omray down`` and checks that no process of the head
is left. The baseline variant ``ray-start`` is a plain ``ray start --head`` (Ray's defaults: the
whole dashboard, both monitors; no omray actors), timed and measured the same way and stopped by
its session directory. Every variant runs in one invocation, so the figures share a machine state.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from pydantic import BaseModel

ACTOR_KINDS = ("QueueRuntime", "ObserverActor", "ReflectorActor", "IndexerActor", "StoreActor")
"""``ray::<class>`` process titles of omray's actors."""


class KindMemory(BaseModel):
    """Idle memory of one process kind."""

    processes: int
    pss_mb: float
    rss_mb: float


class UpRun(BaseModel):
    """One ``omray up`` / idle / ``omray down`` cycle (or ``ray start --head`` / idle / stop)."""

    variant: str
    command: str
    up_s: float
    down_s: float
    actors: int
    pss_mb: float
    rss_mb: float
    by_kind: dict[str, KindMemory]
    dashboard_modules: list[str]
    left_after_down: int


class UpBenchResult(BaseModel):
    """Every variant of one invocation."""

    settle_s: float
    runs: list[UpRun]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rpartition(")")[2].split()[1])


def head_pids(session_dir: str) -> set[int]:
    """Processes naming the head's session directory and all their descendants."""
    pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    found = {pid for pid in pids if pid != os.getpid() and any(session_dir in a for a in _cmdline(pid))}
    parents = {pid: _parent(pid) for pid in pids}
    grew = True
    while grew:
        children = {pid for pid, parent in parents.items() if parent in found and pid not in found}
        found |= children
        grew = bool(children)
    return found


def _memory_kb(pid: int) -> tuple[int, int]:
    pss = rss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                pss = int(line.split()[1])
            elif line.startswith("Rss:"):
                rss = int(line.split()[1])
    except OSError:
        pass
    return pss, rss


def process_kind(cmdline: list[str]) -> str:
    """A short kind for a Ray process: ``gcs_server``, ``raylet``, ``dashboard``, ``ray::<class>``..."""
    if not cmdline:
        return "other"
    first = cmdline[0]
    if first.startswith("ray::"):
        return first.split()[0]
    if first.startswith("ray-dashboard-"):
        return "dashboard module"
    name = Path(first).name
    if name in ("gcs_server", "raylet"):
        return name
    scripts = [Path(arg).name for arg in cmdline[1:3] if arg.endswith(".py")]
    if scripts:
        return scripts[0]
    if "multiprocessing" in " ".join(cmdline):
        return "dashboard module"
    return "other"


def dashboard_module_name(cmdline: list[str]) -> str | None:
    """``NodeHead`` for the process of the dashboard's ``NodeHead`` module (``ray-dashboard-NodeHead-0``)."""
    first = cmdline[0] if cmdline else ""
    if not first.startswith("ray-dashboard-"):
        return None
    return first.split()[0].removeprefix("ray-dashboard-").rpartition("-")[0] or None


def measure(session_dir: str) -> tuple[dict[str, KindMemory], int, list[str]]:
    """Idle memory by kind, the number of omray actors and the dashboard's module processes of one head."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    modules: set[str] = set()
    for pid in head_pids(session_dir):
        pss, rss = _memory_kb(pid)
        cmdline = _cmdline(pid)
        module = dashboard_module_name(cmdline)
        if module is not None:
            modules.add(module)
        entry = totals[process_kind(cmdline)]
        entry[0] += 1
        entry[1] += pss
        entry[2] += rss
    by_kind = {
        kind: KindMemory(processes=n, pss_mb=round(pss / 1024, 1), rss_mb=round(rss / 1024, 1))
        for kind, (n, pss, rss) in sorted(totals.items(), key=lambda item: -item[1][1])
    }
    actors = sum(
        memory.processes for kind, memory in by_kind.items() if kind.removeprefix("ray::") in ACTOR_KINDS
    )
    return by_kind, actors, sorted(modules)


def _run(command: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        raise RuntimeError(f"`{' '.join(command[:4])} ...` failed with exit code {result.returncode}")
    return time.monotonic() - started


def _environment(home: Path) -> dict[str, str]:
    env = {**os.environ, "OMRAY_HOME": str(home)}
    env.pop("RAY_ADDRESS", None)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    return env


def _omray(home: Path, *args: str) -> float:
    return _run([sys.executable, "-m", "cluster.commands.cli", *args], _environment(home))


def _ray_start_head(home: Path) -> tuple[float, str]:
    """``ray start --head`` with Ray's defaults on free ports; its time and session directory."""
    from cluster.up_down import ray_cli, session_dir_of

    port = _free_port()
    seconds = _run(
        [
            ray_cli(),
            "start",
            "--head",
            f"--port={port}",
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={_free_port()}",
            "--disable-usage-stats",
        ],
        _environment(home),
    )
    return seconds, session_dir_of(port)


def _stop_ray_head(session_dir: str) -> float:
    from cluster.up_down import stop_head

    started = time.monotonic()
    stop_head(session_dir)
    return time.monotonic() - started


def run_variant(variant: str, settle_s: float) -> UpRun:
    """Start, let it settle, measure, stop."""
    up_args = VARIANTS[variant]
    with tempfile.TemporaryDirectory(prefix="omray-bench-up-") as directory:
        home = Path(directory)
        if up_args is None:
            command = "ray start --head"
            up_s, session_dir = _ray_start_head(home)
        else:
            command = " ".join(["omray up", *up_args])
            up_s = _omray(home, "up", f"--port={_free_port()}", f"--dashboard-port={_free_port()}", *up_args)
            session_dir = str(json.loads((home / "runtime.json").read_text())["session_dir"])
        try:
            time.sleep(settle_s)
            by_kind, actors, modules = measure(session_dir)
        finally:
            down_s = _omray(home, "down") if up_args is not None else _stop_ray_head(session_dir)
        return UpRun(
            variant=variant,
            command=command,
            up_s=round(up_s, 1),
            down_s=round(down_s, 1),
            actors=actors,
            pss_mb=round(sum(m.pss_mb for m in by_kind.values()), 1),
            rss_mb=round(sum(m.rss_mb for m in by_kind.values()), 1),
            by_kind=by_kind,
            dashboard_modules=modules,
            left_after_down=len(head_pids(session_dir)),
        )


VARIANTS: dict[str, list[str] | None] = {"ray-start": None, "default": [], "no-dashboard": ["--no-dashboard"]}
"""The baseline (plain ``ray start --head``, ``None``), ``omray up`` as shipped (the dashboard on)
and ``omray up --no-dashboard``: their ``omray up`` arguments."""


def run_up_bench(variants: list[str] | None = None, settle_s: float = 15.0) -> UpBenchResult:
    """Every variant in turn, in one invocation; :class:`ValueError` for an unknown variant."""
    chosen = variants or list(VARIANTS)
    unknown = sorted(set(chosen) - set(VARIANTS))
    if unknown:
        raise ValueError(f"unknown variants {unknown!r}; known: {sorted(VARIANTS)!r}")
    return UpBenchResult(settle_s=settle_s, runs=[run_variant(name, settle_s) for name in chosen])
