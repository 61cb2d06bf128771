"""``omray up`` / ``omray down``: a local Ray head sized for this machine, plus omray's actors.

``omray up`` starts a Ray head (the GCS on port 6380 because Redis uses 6379) with token
authentication on, or joins an existing cluster with ``--address``, then creates the named actors.
The head runs what omray uses: Ray's dashboard (web UI on 127.0.0.1:8265, the state API) with
the modules omray's views need (``cluster.ray_head``), unless ``--no-dashboard``; never the log
monitor (it streams every worker's output to every driver) nor the autoscaler monitor (a local
head does not autoscale). It records the head it started (address, session directory) so
``omray down`` stops exactly that head's processes and nothing else: never ``ray stop``, which
stops every Ray cluster of the machine.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import ray

from cluster.client import init_ray
from cluster.named_actors import ensure_runtime, remove_runtime
from cluster.naming import RuntimeNames, omray_home
from cluster.pools import PoolSizes
from persistence.files.private_dirs import make_private_dirs
from protocol.errors import OmrayError
from protocol.placement import NODE_LABEL, valid_node_name

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
    session_dir: str = ""
    """Session directory of the head ``omray up`` started (its processes name it); ``""`` when joined."""


def _record_path() -> Path:
    return omray_home() / "runtime.json"


def ray_cli() -> str:
    """The `ray` command of this Python environment (else the one on PATH)."""
    local = Path(sys.executable).with_name("ray")
    return str(local) if local.exists() else (shutil.which("ray") or "ray")


def _auth_mode() -> str:
    return "disabled" if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled" else "token"


def _ensure_auth_token(env: dict[str, str]) -> None:
    token_path = Path.home() / ".ray" / "auth_token"
    if not token_path.exists():
        subprocess.run(
            [ray_cli(), "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60
        )
    if token_path.exists():
        token_path.chmod(0o600)  # the token grants code execution on the cluster


def start_head(
    num_cpus: int | None = None,
    *,
    port: int = GCS_PORT,
    dashboard_port: int = DASHBOARD_PORT,
    include_dashboard: bool = True,
) -> RuntimeRecord:
    """Start a local Ray head with token authentication on by default (the dashboard on loopback)."""
    env = dict(os.environ)
    auth = _auth_mode()
    env["RAY_AUTH_MODE"] = auth
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if auth == "token":
        _ensure_auth_token(env)
    command = [
        sys.executable,
        "-m",
        "cluster.ray_head",  # `ray start`, with the dashboard modules omray needs
        "start",
        "--head",
        f"--port={port}",
        f"--dashboard-host={DASHBOARD_HOST}",
        f"--dashboard-port={dashboard_port}",
        f"--include-dashboard={str(include_dashboard).lower()}",
        f"--num-cpus={num_cpus or os.cpu_count() or 2}",
        f"--object-store-memory={OBJECT_STORE_BYTES}",
        "--disable-usage-stats",
        # Actor logs stay in the session's files (the dashboard's Logs page reads them there):
        # nothing streams every worker's output to every driver. A local head does not
        # autoscale, so no autoscaler monitor runs either.
        "--include-log-monitor=false",
        "--no-monitor",
    ]
    label = host_label()
    if label is not None:
        # The memory databases placed on this node name it by this label, so a head started
        # again on this machine (a new Ray node id) gets them back (docs/operations.md).
        command.append(f"--labels={NODE_LABEL}={label}")
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    if result.returncode != 0:
        raise BootstrapError(f"`ray start --head` failed with exit code {result.returncode}")
    return RuntimeRecord(
        address=f"127.0.0.1:{port}",
        started_head=True,
        dashboard_url=f"http://{DASHBOARD_HOST}:{dashboard_port}" if include_dashboard else "",
        auth=auth,
        session_dir=session_dir_of(port),
    )


def host_label() -> str | None:
    """This machine's name as an ``omray-node`` label value, when it is a valid one."""
    name = socket.gethostname().split(".")[0]
    return name if valid_node_name(name) else None


def _processes() -> Any:
    import psutil  # type: ignore[import-untyped]
    import ray  # noqa: F401  # puts Ray's bundled psutil on the path

    return psutil


def session_dir_of(port: int) -> str:
    """Session directory of the GCS serving ``port`` on this machine (``""`` when none is found)."""
    psutil = _processes()
    flag = f"--gcs_server_port={port}"
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if flag in cmdline:
            for arg in cmdline:
                if arg.startswith("--log_dir="):
                    return str(Path(arg.partition("=")[2]).parent)
    return ""


CLIENT_SERVER_MODULE = "ray.util.client.server"
"""Ray's client server (port 10001): ``ray start --head`` starts it naming the GCS address only."""


def names_head(
    cmdline: Sequence[str], session_dir: str, gcs_port: int | None, local_hosts: Collection[str]
) -> bool:
    """Whether a process with ``cmdline`` belongs to the head of ``session_dir`` (pure).

    Most of a head's processes name its session directory. Ray's client server names the GCS
    address instead (``--address=<this machine>:<gcs port>``); only one head of a machine can serve
    a GCS port, so that names this head too.
    """
    if session_dir and any(session_dir in arg for arg in cmdline):
        return True
    if gcs_port is None or CLIENT_SERVER_MODULE not in cmdline:
        return False
    for arg in cmdline:
        if arg.startswith("--address="):
            host, _, port = arg.removeprefix("--address=").rpartition(":")
            if port == str(gcs_port) and host.strip("[]") in local_hosts:
                return True
    return False


def _local_hosts(psutil: Any) -> frozenset[str]:
    """This machine's addresses (a head's GCS address names one of them)."""
    hosts = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
    try:
        for addresses in psutil.net_if_addrs().values():
            hosts.update(address.address.partition("%")[0] for address in addresses)
    except Exception:  # an address list we cannot read: loopback and the host name still count
        pass
    return frozenset(hosts)


def head_processes(session_dir: str, gcs_port: int | None = None) -> list[Any]:
    """The processes of one Ray head: those naming its session directory (or, for Ray's client
    server, its GCS port on this machine), and their descendants.

    Another cluster of the machine has another session directory and GCS port, so it is never among them.
    """
    if not session_dir:
        return []
    psutil = _processes()
    me = os.getpid()
    local = _local_hosts(psutil)
    found: dict[int, Any] = {}
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info.get("cmdline") or []
        if process.pid != me and names_head(cmdline, session_dir, gcs_port, local):
            found[process.pid] = process
            try:
                for child in process.children(recursive=True):
                    found.setdefault(child.pid, child)
            except psutil.Error:
                continue
    found.pop(me, None)
    return list(found.values())


def stop_head(session_dir: str, grace_s: float = 10.0, gcs_port: int | None = None) -> int:
    """Stop the head of ``session_dir`` (SIGTERM, SIGKILL after ``grace_s``); returns the process count."""
    psutil = _processes()
    processes = head_processes(session_dir, gcs_port)
    for process in processes:
        try:
            process.send_signal(signal.SIGTERM)
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for process in alive:
        try:
            process.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(alive, timeout=grace_s)
    return len(processes)


def gcs_port_of(address: str) -> int | None:
    """The port of a ``host:port`` address (``None`` for anything else)."""
    port = address.rpartition(":")[2]
    return int(port) if port.isdigit() else None


def _gcs_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def up(
    address: str | None = None,
    names: RuntimeNames | None = None,
    *,
    port: int = GCS_PORT,
    dashboard_port: int = DASHBOARD_PORT,
    include_dashboard: bool = True,
    pools: PoolSizes | None = None,
    pool_fields: frozenset[str] | None = None,
) -> dict[str, Any]:
    """Start or join Ray, create omray's actors (resuming pending jobs) and record what was done.

    Without ``address`` omray's own head is the one serving ``port`` on this machine: joined when
    it answers, started otherwise. Other Ray clusters of the machine are never joined by guess.
    A head an earlier ``omray up`` started on another port that still runs is an error (a second
    head would orphan it), and so are ``pools`` whose ``pool_fields`` (default: all) differ from
    those of a runtime already running (``omray down`` first): both are checked before anything is
    started or created.
    """
    names = names or RuntimeNames()
    record: RuntimeRecord | None = None
    if address is None:
        local = f"127.0.0.1:{port}"
        earlier = read_record()
        if (
            earlier is not None
            and earlier.started_head
            and earlier.address != local
            and _reachable(earlier.address)
        ):
            raise BootstrapError(
                f"omray already runs its Ray head at {earlier.address}; run `omray down` before "
                f"starting one on port {port}"
            )
        if _gcs_answers(port):
            init_ray(local)
            record = RuntimeRecord(local, False, f"http://{DASHBOARD_HOST}:{dashboard_port}", _auth_mode())
        else:
            token_existed = (Path.home() / ".ray" / "auth_token").exists()
            record = start_head(port=port, dashboard_port=dashboard_port, include_dashboard=include_dashboard)
            _write_record(record)
            if record.auth == "token" and not token_existed:
                # Ray loads the auth token once per process, before the head above created it: join
                # from a fresh process, which finds the running head and the token.
                os.execv(
                    sys.executable, [sys.executable, "-m", "cluster.commands.cli", "up", f"--port={port}"]
                )
            init_ray(local)
    else:
        init_ray(address)
        record = RuntimeRecord(address, False, "", _auth_mode())
    previous = read_record()
    same_head = previous is not None and previous.address == record.address
    if previous is not None and previous.started_head and not record.started_head and same_head:
        record = previous  # joining the head an earlier `omray up` started: keep ownership
    if pools is not None:
        _check_same_pools(names, pools, pool_fields)
    ensure_runtime(names, pools=pools)
    _write_record(record)
    grafana = _install_grafana_dashboard(record.session_dir, names)
    return {
        **asdict(record),
        "namespace": names.namespace,
        "queue": names.queue,
        "grafana_dashboard": str(grafana) if grafana is not None else None,
    }


def _install_grafana_dashboard(session_dir: str, names: RuntimeNames) -> Path | None:
    """Put omray's Grafana dashboard among those Ray generated for this cluster's session (when its
    dashboard runs on this machine), so a Grafana using Ray's provisioning shows it too."""
    from cluster.grafana import write_into_session

    if not session_dir:
        try:  # a cluster omray joined: its session directory, if it is on this machine
            node: Any = ray._private.worker._global_node
            session_dir = str(node.get_session_dir_path())
        except Exception:
            return None
    try:
        return write_into_session(session_dir, names.prefix)
    except OSError as exc:  # the dashboard is a convenience: `omray metrics grafana-dashboard` prints it
        logger.info("grafana dashboard not written", extra={"error_class": type(exc).__name__})
        return None


def _check_same_pools(names: RuntimeNames, pools: PoolSizes, given: frozenset[str] | None = None) -> None:
    """:class:`BootstrapError` when a runtime runs with other pool bounds than ``pools`` in the
    fields ``given`` (the sizes the user set; default: every one)."""
    try:
        queue = ray.get_actor(names.queue, namespace=names.namespace)
    except ValueError:
        return  # none running: these sizes are the ones it starts with
    try:
        answer: Any = ray.get(queue.status.remote(), timeout=30)
        running: dict[str, Any] = dict(answer.get("pools") or {})
    except ray.exceptions.RayError:
        return  # a queue restarting or older than this CLI: nothing to compare with
    differ: list[str] = []
    every = frozenset(field.name for field in fields(PoolSizes))
    for field_name in sorted(given if given is not None else every):
        handler_id, kind, wanted = pools.bound(field_name)
        pool = running.get(handler_id)
        if isinstance(pool, dict) and kind in pool and pool[kind] != wanted:
            differ.append(f"{field_name} {pool[kind]!r} (not {wanted!r})")
    if differ:
        raise BootstrapError(
            f"omray is already up with {', '.join(differ)}; run `omray down` first to change the "
            "pool sizes (`omray status` shows the running ones)"
        )


def _write_record(record: RuntimeRecord) -> None:
    # Data directories 0700, files 0600 (DESIGN.md invariant 8).
    make_private_dirs(omray_home())
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
        data = json.loads(_record_path().read_text(encoding="utf-8"))
        known = {field.name for field in fields(RuntimeRecord)}
        return RuntimeRecord(**{key: value for key, value in data.items() if key in known})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def down(names: RuntimeNames | None = None) -> dict[str, Any]:
    """Remove omray's actors; stop the Ray head only if ``omray up`` started it, and only that head.

    The head is stopped by its recorded session directory: its own processes (GCS, raylet,
    dashboard, monitors), Ray's client server (named by the head's GCS port) and their children
    (workers, agents). Any other Ray cluster on the machine
    keeps running; a cluster omray only joined is left running and named in ``left_running``.
    """
    names = names or RuntimeNames()
    record = read_record()
    address = record.address if record is not None else None
    removed: list[str] = []
    started = time.monotonic()
    try:
        if address is None or address == "auto" or _reachable(address):
            init_ray(address)
            removed = remove_runtime(names)
            ray.shutdown()
    except OmrayError:
        pass  # nothing running
    stopped_processes = 0
    left_running: str | None = None
    if record is not None and record.started_head and record.session_dir:
        stopped_processes = stop_head(record.session_dir, gcs_port=gcs_port_of(record.address))
    elif address is not None:
        left_running = f"the Ray cluster at {address} (omray up did not start it)"
    _record_path().unlink(missing_ok=True)
    return {
        "removed": removed,
        "stopped_head": stopped_processes > 0,
        "stopped_processes": stopped_processes,
        "left_running": left_running,
        "seconds": round(time.monotonic() - started, 1),
    }


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        return True  # not host:port: let Ray decide
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            return True
    except OSError:
        return False
