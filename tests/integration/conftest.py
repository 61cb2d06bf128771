"""One shared real Ray cluster per test session; each test gets its own actor names."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import ray

from cluster.naming import RuntimeNames


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A local Ray cluster sized for a 2-core machine, shared by every integration test."""
    os.environ["OMRAY_HOME"] = str(tmp_path_factory.mktemp("omray-home"))
    ray.init(
        num_cpus=2,
        namespace="omray",
        include_dashboard=False,
        object_store_memory=256 * 1024 * 1024,
        logging_level="WARNING",
        log_to_driver=False,
    )
    yield
    ray.shutdown()


@pytest.fixture
def names(ray_cluster: None) -> Iterator[RuntimeNames]:
    """Unique actor names for one test; the actors are removed afterwards."""
    from cluster.runtime import remove_runtime

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
