"""``omray up`` / ``omray down``: a local Ray head sized for this machine, plus omray's actors.

``omray up`` starts a Ray head (dashboard on 127.0.0.1:8265, the GCS on port 6380 because Redis
uses 6379) with token authentication on, or joins an existing cluster with ``--address``, then
creates the named actors. It records whether it started the head so ``omray down`` stops only
what ``omray up`` started.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import ray

from cluster.client import init_ray
from cluster.naming import RuntimeNames, omray_home
from cluster.runtime import ensure_runtime, remove_runtime
from protocol.errors import OmrayError

logger = logging.getLogger("omray.bootstrap")

GCS_PORT = 6380
"""Port of the Ray head's GCS (6379 is Redis's)."""
DASHBOARD_HOST = "127.0.0.1"
"""The dashboard listens on loopback only."""
DASHBOARD_PORT = 8265
"""Ray's default dashboard port."""
OBJECT_STORE_BYTES = 512 * 1024 * 1024
"""omray moves small payloads only; a small object store leaves memory to the models."""


class BootstrapError(OmrayError):
    """The Ray head could not be started or joined."""


@dataclass(frozen=True)
class RuntimeRecord:
    """What ``omray up`` did, kept in ``$OMRAY_HOME/runtime.json`` for ``omray down``."""

    address: str
    """Address clients join."""
    started_head: bool
    """True when ``omray up`` started the Ray head itself."""
    dashboard_url: str
    """Where the Ray dashboard is."""
    auth: str
    """``token`` or ``disabled``."""


def _record_path() -> Path:
    return omray_home() / "runtime.json"


def _ray_cli() -> str:
    local = Path(sys.executable).with_name("ray")
    return str(local) if local.exists() else (shutil.which("ray") or "ray")


def _auth_mode() -> str:
    return "disabled" if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled" else "token"


def _ensure_auth_token(env: dict[str, str]) -> None:
    token_path = Path.home() / ".ray" / "auth_token"
    if not token_path.exists():
        subprocess.run(
            [_ray_cli(), "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60
        )
    if token_path.exists():
        token_path.chmod(0o600)  # the token grants code execution on the cluster


def start_head(num_cpus: int | None = None) -> RuntimeRecord:
    """Start a local Ray head with the dashboard on loopback and token authentication on by default."""
    env = dict(os.environ)
    auth = _auth_mode()
    env["RAY_AUTH_MODE"] = auth
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if auth == "token":
        _ensure_auth_token(env)
    command = [
        _ray_cli(),
        "start",
        "--head",
        f"--port={GCS_PORT}",
        f"--dashboard-host={DASHBOARD_HOST}",
        f"--dashboard-port={DASHBOARD_PORT}",
        f"--num-cpus={num_cpus or os.cpu_count() or 2}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        "--disable-usage-stats",
    ]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        raise BootstrapError(f"`ray start --head` failed with exit code {result.returncode}")
    return RuntimeRecord(
        address=f"127.0.0.1:{GCS_PORT}",
        started_head=True,
        dashboard_url=f"http://{DASHBOARD_HOST}:{DASHBOARD_PORT}",
        auth=auth,
    )


def _local_head_running() -> bool:
    """True when a Ray head started on this machine is recorded and its GCS port answers."""
    import socket

    from ray._private.utils import read_ray_address

    current = read_ray_address()
    if not current:
        return False
    host, _, port = current.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def up(address: str | None = None, names: RuntimeNames | None = None) -> dict[str, Any]:
    """Start or join Ray, create omray's actors (resuming pending jobs) and record what was done."""
    names = names or RuntimeNames()
    record: RuntimeRecord | None = None
    if address is None:
        if _local_head_running():
            init_ray("auto")
            record = RuntimeRecord("auto", False, f"http://{DASHBOARD_HOST}:{DASHBOARD_PORT}", _auth_mode())
        else:
            record = start_head()
            _write_record(record)
            # Ray loads the auth token once per process, before the head above created it: join
            # from a fresh process, which finds the running head and the token.
            os.execv(sys.executable, [sys.executable, "-m", "cluster.cli", "up"])
    else:
        init_ray(address)
        record = RuntimeRecord(address, False, "", _auth_mode())
    previous = read_record()
    if previous is not None and previous.started_head and not record.started_head:
        record = previous  # joining the head an earlier `omray up` started: keep ownership
    ensure_runtime(names)
    _write_record(record)
    return {**asdict(record), "namespace": names.namespace, "queue": names.queue}


def _write_record(record: RuntimeRecord) -> None:
    # Data directories 0700, files 0600 (DESIGN.md invariant 8): mkdir's mode is filtered by the
    # umask and parents=True ignores it, so each directory created here is chmod-ed explicitly.
    home = omray_home()
    missing: list[Path] = []
    current = home
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
    path = _record_path()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, json.dumps(asdict(record)).encode("utf-8"))
    finally:
        os.close(fd)
    os.replace(temporary, path)


def read_record() -> RuntimeRecord | None:
    """The record of the last ``omray up``, if any."""
    try:
        return RuntimeRecord(**json.loads(_record_path().read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def down(names: RuntimeNames | None = None) -> dict[str, Any]:
    """Remove omray's actors and stop the Ray head if ``omray up`` started it."""
    names = names or RuntimeNames()
    record = read_record()
    removed: list[str] = []
    try:
        init_ray("auto")
        removed = remove_runtime(names)
        ray.shutdown()
    except OmrayError:
        pass  # nothing running
    stopped = False
    if record is not None and record.started_head:
        subprocess.run([_ray_cli(), "stop"], capture_output=True, timeout=120)
        stopped = True
    _record_path().unlink(missing_ok=True)
    return {"removed": removed, "stopped_head": stopped}
