"""One shared real Ray cluster per test session; each test gets its own actor names."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray

from cluster.naming import RuntimeNames


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class ClusterInfo:
    """Where the shared test cluster serves its dashboard and Prometheus metrics."""

    dashboard_url: str
    """``http://127.0.0.1:<port>`` of the Ray dashboard (state API under ``/api/v0``)."""
    metrics_url: str
    """``http://127.0.0.1:<port>/metrics`` of this node's Prometheus exporter."""


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    """A local Ray cluster sized for a 2-core machine, shared by every integration test."""
    from cluster.ray_head import patch_dashboard_command

    os.environ["OMRAY_HOME"] = str(tmp_path_factory.mktemp("omray-home"))
    dashboard_port, metrics_port = free_port(), free_port()
    patch_dashboard_command()  # the dashboard modules `omray up` runs, not Ray's whole set
    ray.init(
        # "local": always a new cluster of its own, never a `ray start` head that happens to run
        # on this machine (an `omray up`, or the heads test_restart.py starts and stops).
        address="local",
        num_cpus=2,
        namespace="omray",
        include_dashboard=True,
        dashboard_host="127.0.0.1",
        dashboard_port=dashboard_port,
        _metrics_export_port=metrics_port,
        object_store_memory=256 * 1024 * 1024,
        logging_level="WARNING",
        log_to_driver=False,
        # Metrics reach the node's endpoint within a second, not Ray's default ten (a Prometheus
        # test waits for them).
        _system_config={"metrics_report_interval_ms": 1000},
    )
    yield ClusterInfo(f"http://127.0.0.1:{dashboard_port}", f"http://127.0.0.1:{metrics_port}/metrics")
    ray.shutdown()


@pytest.fixture
def names(ray_cluster: ClusterInfo) -> Iterator[RuntimeNames]:
    """Unique actor names for one test; the actors are removed afterwards."""
    from cluster.named_actors import remove_runtime

    runtime_names = RuntimeNames(prefix=f"t{uuid.uuid4().hex[:10]}")
    yield runtime_names
    remove_runtime(runtime_names)


def assert_eventually(
    predicate: Callable[[], Any], timeout_s: float = 60.0, interval_s: float = 0.05, message: str = ""
) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail with ``message`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval_s)
    raise AssertionError(message or f"condition not met within {timeout_s}s (last value {last!r})")


@pytest.fixture
def ledger(tmp_path: Path) -> Path:
    """A ledger file the bench handlers append one line to per execution."""
    return tmp_path / "ledger.jsonl"
