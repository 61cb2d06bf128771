"""Issue 19 on real clusters: a hook across a whole-cluster restart, and `omray down` scoped to its head.

Each test starts its own omray head (`python -m cluster.commands.cli up` on a free port, no dashboard) in
subprocesses, because this process is already a driver of the shared session cluster, which plays
the unrelated Ray cluster that must survive `omray down`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray

from cluster.up_down import head_processes, stop_head
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import settings_from_mapping
from tests.integration.conftest import ClusterInfo, assert_eventually, free_port
from tests.integration.restart_agent import SESSION, SETTINGS

pytestmark = pytest.mark.integration

HOOK_TIMEOUT_S = 3.0
MARGIN_S = 7.0  # generous: a loaded 2-core CI machine


def omray(home: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMRAY_HOME": str(home), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "cluster.commands.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def record(home: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((home / "runtime.json").read_text(encoding="utf-8"))
    return data


@pytest.fixture
def omray_home(tmp_path: Path, ray_cluster: ClusterInfo) -> Iterator[Path]:
    """An OMRAY_HOME whose head is stopped after the test, whatever happened."""
    home = tmp_path / "home"
    yield home
    if (home / "runtime.json").exists():
        session_dir = record(home).get("session_dir") or ""
        omray(home, "down", timeout=120)
        stop_head(session_dir, grace_s=5)  # no-op when down already stopped it


def _cmdline(process: Any) -> list[str]:
    try:
        return list(process.cmdline())
    except Exception:  # the process ended meanwhile
        return []


def _client_servers(gcs_port: int) -> list[Any]:
    """Ray client server processes serving the GCS on ``gcs_port``."""
    import psutil  # type: ignore[import-untyped]

    found = []
    for process in psutil.process_iter(["cmdline"]):
        words = process.info.get("cmdline") or []
        if "ray.util.client.server" in words and any(
            word.startswith("--address=") and word.endswith(f":{gcs_port}") for word in words
        ):
            found.append(process)
    return found


def covered_end(project: Path) -> int:
    settings = settings_from_mapping(SETTINGS)
    db = project / "om.sqlite"
    if not db.exists():
        return 0
    try:
        end = MemoryReader(db).contiguous_covered_end(
            SESSION, settings.renderer_version, settings.observer_schema_version
        )
    except Exception:  # the store may be migrating it right now
        return 0
    return end or 0


class Agent:
    def __init__(self, home: Path, address: str, project: Path) -> None:
        env = {**os.environ, "OMRAY_HOME": str(home), "RAY_AUTH_MODE": "disabled"}
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.restart_agent",
                address,
                str(project),
                str(HOOK_TIMEOUT_S),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert self.answer() == {"ready": True}

    def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the agent process ended"
        data: dict[str, Any] = json.loads(line)
        return data

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.answer()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)


def test_hook_returns_within_its_deadline_across_a_whole_cluster_restart(
    omray_home: Path, tmp_path: Path
) -> None:
    port = free_port()
    project = tmp_path / "project"
    project.mkdir()
    started = omray(omray_home, "up", f"--port={port}", "--no-dashboard")
    assert started.returncode == 0, started.stderr[-2000:]
    agent = Agent(omray_home, f"127.0.0.1:{port}", project)
    try:
        first = agent.ask("turn 1")
        assert first["job_id"] is not None and first["seconds"] <= HOOK_TIMEOUT_S + MARGIN_S
        assert_eventually(lambda: covered_end(project) >= first["end_seq"], timeout_s=120)

        # The whole cluster goes away under the connected agent (as `ray stop --force` would do),
        # then `omray up` starts a new head on the same port; pending jobs live in OMRAY_HOME.
        assert stop_head(record(omray_home)["session_dir"], grace_s=5) > 0
        restarted = omray(omray_home, "up", f"--port={port}", "--no-dashboard")
        assert restarted.returncode == 0, restarted.stderr[-2000:]

        second = agent.ask("turn 2")
        assert second["seconds"] <= HOOK_TIMEOUT_S + MARGIN_S  # returned, accepted or not
        assert second["end_seq"] > first["end_seq"]
        assert agent.ask("drain 120") == {"drained": True}
        assert_eventually(
            lambda: covered_end(project) >= second["end_seq"],
            timeout_s=120,
            message="the turn after the restart was not observed",
        )
    finally:
        agent.stop()


def test_hook_never_raises_and_keeps_the_turn_while_the_runtime_is_down(
    omray_home: Path, tmp_path: Path
) -> None:
    port = free_port()
    project = tmp_path / "project"
    project.mkdir()
    assert omray(omray_home, "up", f"--port={port}", "--no-dashboard").returncode == 0
    agent = Agent(omray_home, f"127.0.0.1:{port}", project)
    try:
        assert stop_head(record(omray_home)["session_dir"], grace_s=5) > 0
        down = agent.ask("turn 1")  # nothing answers on the port now
        assert down["job_id"] is None and down["seconds"] <= HOOK_TIMEOUT_S + MARGIN_S
        assert omray(omray_home, "up", f"--port={port}", "--no-dashboard").returncode == 0
        assert agent.ask("drain 120") == {"drained": True}
        assert_eventually(lambda: covered_end(project) >= down["end_seq"], timeout_s=120)
    finally:
        agent.stop()


def test_down_stops_only_the_head_up_started(omray_home: Path) -> None:
    shared_session = ray._private.worker._global_node.get_session_dir_path()
    shared_before = {process.pid for process in head_processes(shared_session)}
    assert shared_before, "the shared test cluster should be running"

    port = free_port()
    started = omray(omray_home, "up", f"--port={port}", f"--dashboard-port={free_port()}")
    assert started.returncode == 0, started.stderr[-2000:]
    ours = record(omray_home)["session_dir"]
    assert ours and ours != shared_session
    assert head_processes(ours)
    # The dashboard runs by default, with the modules omray's views need and no monitors; omray's
    # Grafana dashboard lies next to the ones Ray generated; `omray status` shows real states.
    commands = [" ".join(_cmdline(process)) for process in head_processes(ours)]
    modules = {
        c.split()[0].removeprefix("ray-dashboard-").rpartition("-")[0]
        for c in commands
        if c.startswith("ray-dashboard-")
    }
    assert {"NodeHead", "StateHead", "ReportHead", "MetricsHead"} <= modules
    assert not modules & {"JobHead", "ServeHead", "TrainHead", "DataHead"}
    assert not [c for c in commands if "monitor.py" in c]
    assert (Path(ours) / "metrics" / "grafana" / "dashboards" / "omray_grafana_dashboard.json").is_file()
    status = omray(omray_home, "status", "--json", f"--address=127.0.0.1:{port}")
    assert status.returncode == 0, status.stderr[-2000:]
    actors = json.loads(status.stdout)["actors"]
    assert "omray.queue" in {actor["name"] for actor in actors}
    assert {actor["state"] for actor in actors} == {"ALIVE"}

    # Ray's client server names the GCS address, not the session directory (issue 33: it was left).
    client_servers = _client_servers(port)
    assert client_servers, "ray start --head starts Ray's client server"
    # the session directory alone (what `omray down` stopped before) misses it
    assert not {p.pid for p in client_servers} & {p.pid for p in head_processes(ours)}
    assert {p.pid for p in client_servers} <= {p.pid for p in head_processes(ours, gcs_port=port)}

    stopped = omray(omray_home, "down")
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert "stopped the Ray head omray up started: True" in stopped.stdout
    assert head_processes(ours) == []
    assert _client_servers(port) == []
    assert not (omray_home / "runtime.json").exists()
    # The unrelated cluster is untouched: the same processes, and it still runs work.
    assert shared_before <= {process.pid for process in head_processes(shared_session)}
    assert ray.get(ray.remote(num_cpus=0)(lambda: 41 + 1).remote(), timeout=60) == 42


def test_down_leaves_a_cluster_it_only_joined_running(omray_home: Path) -> None:
    port = free_port()
    assert omray(omray_home, "up", f"--port={port}", "--no-dashboard").returncode == 0
    head = record(omray_home)["session_dir"]
    # Without the dashboard the head runs no dashboard modules and no monitors, and `omray status`
    # still names the actors (their state needs the dashboard's state API).
    commands = [" ".join(_cmdline(process)) for process in head_processes(head)]
    assert not [c for c in commands if "ray-dashboard-" in c or "monitor.py" in c]
    status = omray(omray_home, "status", "--json", f"--address=127.0.0.1:{port}")
    assert status.returncode == 0, status.stderr[-2000:]
    assert {actor["state"] for actor in json.loads(status.stdout)["actors"]} == {"UNKNOWN"}
    joined_home = omray_home.parent / "joined-home"
    try:
        joined = omray(joined_home, "up", f"--address=127.0.0.1:{port}")
        assert joined.returncode == 0, joined.stderr[-2000:]
        left = omray(joined_home, "down")
        assert "left running: the Ray cluster at 127.0.0.1:" in left.stdout
        assert head_processes(head)
    finally:
        omray(joined_home, "down")
