"""The whole-cluster stop of ``omray bench chaos --real``: stop the Ray head mid-run, ``omray up`` again.

Ray allows one cluster connection per process and the benchmark's own process is a driver of its
private cluster, so this run happens in a subprocess (``python -m bench.cluster_stop``) that is
no Ray driver at all, like an agent: it starts its own head with ``omray up`` on free ports and a
private ``OMRAY_HOME``, joins it through :func:`cluster.connect` (whose client rejoins a restarted
runtime by itself), and drives the workload of :mod:`bench.chaos_workload`. When the seeded
request arrives at the scripted server (a model call is in flight), it stops exactly that head:
:func:`cluster.up_down.stop_head` SIGTERMs, then SIGKILLs, every process of the head's session
(GCS, raylet, workers, actors), as ``ray stop`` would, but no other cluster of the machine. Then
``omray up`` starts a new head on the same port, which resumes the pending jobs from
``OMRAY_HOME``, and the driver goes on. At the end ``omray down`` stops the head and the process
prints one JSON line: the memory snapshot and the run's figures.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.chaos_workload import CountingServer, RequestKind, Workload, drive, uncovered_events, wait_settled
from testkit.memory_snapshot import memory_snapshot

CALL_TIMEOUT_S = 10.0
"""Deadline of the driver's calls into the runtime: a call into the stopped cluster gives up by then
and the client's next call joins the new head."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _omray(*args: str, timeout_s: float = 240.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cluster.commands.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def _session_dir() -> str:
    from cluster.naming import omray_home

    try:
        record = json.loads((omray_home() / "runtime.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(record.get("session_dir") or "")


class _Stopper(threading.Thread):
    """Stops the head when the ``after_requests``-th request arrives, then starts it again."""

    def __init__(self, after_requests: int, up_args: list[str]) -> None:
        super().__init__(name="omray-chaos-cluster-stop", daemon=True)
        self._after = after_requests
        self._up_args = up_args
        self._go = threading.Event()
        self._done = threading.Event()
        self.stopped_processes = 0
        self.restarted = False
        self.restart_seconds = 0.0

    def on_request(self, kind: RequestKind, count: int) -> None:
        if kind == "any" and count == self._after:
            self._go.set()

    def run(self) -> None:
        while not self._go.wait(0.1):
            if self._done.is_set():
                return
        from cluster.up_down import stop_head

        started = time.monotonic()
        self.stopped_processes = stop_head(_session_dir(), grace_s=5.0)
        self.restarted = _omray("up", *self._up_args).returncode == 0
        self.restart_seconds = round(time.monotonic() - started, 2)

    def finish(self) -> None:
        self._done.set()
        self.join(timeout=600)


def main(argv: list[str]) -> None:
    """Run the scenario described by the JSON in ``argv[0]``; print one JSON line."""
    from cluster.client import connect
    from cluster.up_down import stop_head

    spec = json.loads(argv[0])
    workload = Workload(**spec["workload"])
    directory = Path(spec["directory"])
    project = directory / "project"
    project.mkdir(parents=True)
    port = _free_port()
    up_args = [f"--port={port}", f"--dashboard-port={_free_port()}", "--no-dashboard"]
    stopper = _Stopper(int(spec["stop_after_requests"]), up_args)
    started = time.monotonic()
    try:
        first = _omray("up", *up_args)
        if first.returncode != 0:
            raise RuntimeError(f"omray up failed with exit code {first.returncode}")
        with CountingServer(workload.model_latency_s, on_request=stopper.on_request) as server:
            client = connect(
                f"127.0.0.1:{port}",
                settings=workload.settings(project, server.base_url),
                cwd=project,
                call_timeout_s=CALL_TIMEOUT_S,
            )
            try:
                stopper.start()
                result = drive(client, project, workload)
                stopper.finish()
                settled = wait_settled(client, result.last_seqs, workload.settle_timeout_s)
                settled = settled and result.rounds_settled == workload.turns + 1
                counts = client.job_counts()
            finally:
                client.close()
            requests = dict(server.counts)
        seconds = time.monotonic() - started
    finally:
        stopper.finish()
        session_dir = _session_dir()
        _omray("down", timeout_s=120.0)
        stop_head(session_dir, grace_s=5.0)  # nothing left when `omray down` stopped it
    report = {
        "snapshot": memory_snapshot(project / "om.sqlite").to_json(),
        "requests": requests,
        "job_counts": {key: int(value) for key, value in counts.items()},
        "uncovered": uncovered_events(project, workload),
        "settled": settled,
        "seconds": round(seconds, 2),
        "stopped_processes": stopper.stopped_processes,
        "restarted": stopper.restarted,
        "restart_seconds": stopper.restart_seconds,
    }
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
