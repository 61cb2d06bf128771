"""``omray down`` finds every process of its head, Ray's client server included (issue 33: its
command line names the GCS address, not the session directory, and it kept running)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from cluster.up_down import CLIENT_SERVER_MODULE, gcs_port_of, head_processes, names_head, stop_head

LOCAL = frozenset({"127.0.0.1", "10.1.2.3"})
SESSION = "/tmp/ray/session_2026-12-02_12-00-00_000000_1"


def _client_server(port: int) -> list[str]:
    # As ray._private.services.start_ray_client_server builds it.
    return [
        sys.executable,
        "/x/ray/_private/workers/setup_worker.py",
        "-m",
        CLIENT_SERVER_MODULE,
        f"--address=10.1.2.3:{port}",
        "--host=0.0.0.0",
        "--port=10001",
        "--mode=proxy",
        "--language=PYTHON",
        "--runtime-env-agent-address=http://10.1.2.3:55000",
        "--node-id=ab" * 14,
    ]


def test_names_head_takes_the_session_dir_or_the_client_server_of_its_gcs_port() -> None:
    assert names_head(["raylet", f"--session_dir={SESSION}"], SESSION, 6390, LOCAL)
    assert names_head(_client_server(6390), SESSION, 6390, LOCAL)
    assert not names_head(_client_server(6391), SESSION, 6390, LOCAL)  # another head's
    assert not names_head(_client_server(6390), SESSION, None, LOCAL)  # no port known
    remote = [*_client_server(6390)[:4], "--address=192.0.2.9:6390"]
    assert not names_head(remote, SESSION, 6390, LOCAL)  # a GCS elsewhere
    assert not names_head(["python", "worker.py", "--address=10.1.2.3:6390"], SESSION, 6390, LOCAL)
    assert not names_head(["raylet", "--session_dir=/tmp/ray/other"], SESSION, 6390, LOCAL)


def test_gcs_port_of() -> None:
    assert gcs_port_of("127.0.0.1:6390") == 6390
    assert gcs_port_of("auto") is None and gcs_port_of("[::1]:7") == 7


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def stand_ins() -> Iterator[dict[int, subprocess.Popen[bytes]]]:
    """Sleeping processes whose command lines are client servers of two free GCS ports (no real
    head on this machine serves them, so stopping "ours" can only stop the stand-in)."""
    processes = {
        port: subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time; time.sleep(120)",
                "-m",
                CLIENT_SERVER_MODULE,
                f"--address=127.0.0.1:{port}",
                "--port=10001",
            ]
        )
        for port in (_free_port(), _free_port())
    }
    yield processes
    for process in processes.values():
        process.kill()
        process.wait()


def test_stop_head_stops_the_client_server_of_its_port_only(
    stand_ins: dict[int, subprocess.Popen[bytes]],
) -> None:
    ours, theirs = list(stand_ins)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until the command lines are readable
        found = {process.pid for process in head_processes(SESSION, gcs_port=ours)}
        if stand_ins[ours].pid in found:
            break
        time.sleep(0.05)
    assert stand_ins[ours].pid in found and stand_ins[theirs].pid not in found
    assert stop_head(SESSION, grace_s=5, gcs_port=ours) == 1
    assert stand_ins[ours].wait(timeout=10) is not None
    assert stand_ins[theirs].poll() is None  # another head's client server keeps running
