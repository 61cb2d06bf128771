"""``omray watch`` in a real pseudo-terminal against a running runtime: read the screen, then Ctrl-C."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import ray

from cluster.client import OmrayClient
from cluster.named_actors import ensure_runtime
from cluster.naming import RuntimeNames
from persistence.writers.store import Store
from protocol.jobs import (
    JobEnvelope,
    SemanticIndexJob,
)
from protocol.records import ActivityRecord
from testkit.handlers import for_every_role
from tests.integration.conftest import assert_eventually

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
ALL_SLOW = for_every_role("testkit.handlers:slow")
STAGE_LINE = "s-watch  Observational memory: observer running on ~1,234-token chunk"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07|\x1b[=>]|\r")


def _job(n: int) -> JobEnvelope:
    # A database each: waiting index jobs of one database would be coalesced into one run.
    payload = SemanticIndexJob(session_id="s-watch", db_path=f"/nonexistent/{n}/om.sqlite").model_dump()
    return JobEnvelope.model_validate(
        {"job_id": f"watch-job-{n:04d}", "correlation_id": "s-watch", "payload": payload}
    )


def _screen(raw: bytes) -> str:
    return _ANSI.sub("", raw.decode("utf-8", errors="replace"))


def _drain(fd: int, raw: bytearray, wait_s: float) -> bool:
    """Read what the terminal has within ``wait_s``; False once the child closed it."""
    ready, _, _ = select.select([fd], [], [], wait_s)
    if not ready:
        return True
    try:
        chunk = os.read(fd, 65536)
    except OSError:  # EIO: the child exited and the pty closed
        return False
    raw.extend(chunk)
    return bool(chunk)


def _command(db_path: Path, names: RuntimeNames) -> list[str]:
    address = ray.get_runtime_context().gcs_address
    return [
        sys.executable,
        "-m",
        "cluster.commands.cli",
        "watch",
        "--db",
        str(db_path),
        "--address",
        address,
        "--prefix",
        names.prefix,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"}


def test_watch_in_a_pseudo_terminal(names: RuntimeNames, tmp_path: Path) -> None:
    ensure_runtime(
        names,
        queue_db=str(tmp_path / "queue.sqlite"),
        handler_paths=ALL_SLOW,
        worker_env={"OMRAY_BENCH_SLOW_S": "120"},  # the first job stays in flight while we look
    )
    client = OmrayClient(names)
    client.dispatch(_job(1))
    client.dispatch(_job(2))
    assert_eventually(lambda: client.status()["in_flight"], timeout_s=60, message="no job started")
    db_path = tmp_path / "om.sqlite"
    with Store(db_path) as store:
        store.upsert_activity(
            ActivityRecord(
                session_id="s-watch",
                job_id="watch-job-0001",
                stage="observer",
                current_tokens=1234,
                updated_at=datetime.now(UTC).isoformat(),
            )
        )

    command, env = _command(db_path, names), _env()
    pid, fd = pty.fork()
    if pid == 0:  # child: become `omray watch` at once
        try:
            # A user's shell starts it with Ctrl-C deliverable; the test process may by now have
            # SIGINT blocked or ignored (libraries of earlier tests), which execve would pass on.
            signal.pthread_sigmask(signal.SIG_SETMASK, [])
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.chdir(REPO)
            os.execve(command[0], command, env)
        finally:
            os._exit(127)
    raw = bytearray()
    try:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
        deadline = time.monotonic() + 120
        wanted = (
            "Queue depth: 1 · in flight: 1/",
            "running watch-job-00  ",
            "semantic_index  attempt 1",
            STAGE_LINE,
        )
        while not all(text in _screen(bytes(raw)) for text in wanted):
            assert time.monotonic() < deadline, (
                f"watch never showed {wanted!r}; screen:\n{_screen(bytes(raw))[-3000:]}"
            )
            assert _drain(fd, raw, 0.5), f"watch exited early; screen:\n{_screen(bytes(raw))[-3000:]}"

        os.write(fd, b"\x03")  # Ctrl-C through the terminal, as a user would
        deadline = time.monotonic() + 60
        status = 0
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            assert time.monotonic() < deadline, "watch did not exit after Ctrl-C"
            _drain(fd, raw, 0.2)
        pid = 0
        assert os.WIFEXITED(status), f"watch ended by signal; screen:\n{_screen(bytes(raw))[-2000:]}"
        assert os.WEXITSTATUS(status) == 0
        assert "Traceback" not in _screen(bytes(raw))
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)

    # The same view as one frame, for scripts.
    once = subprocess.run(
        [*command, "--once", "--session", "s-watch"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert once.returncode == 0, once.stderr[-2000:]
    assert "Queue depth: 1 · in flight: 1" in once.stdout
    assert STAGE_LINE in once.stdout
