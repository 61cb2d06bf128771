"""The runtime on a two-node Ray cluster (``ray.cluster_utils.Cluster``), run in a subprocess.

Ray allows one cluster connection per driver process and the session cluster already holds this
one, so the scenario (``multinode_scenario.py``) builds and tears down its own cluster elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scenario() -> dict[str, Any]:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)  # the scenario must build its own cluster, never join the session one
    done = subprocess.run(
        [sys.executable, "-m", "tests.integration.multinode_scenario"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_every_job_completes_once_in_fifo_order(scenario: dict[str, Any]) -> None:
    assert scenario["idle"] is True
    assert scenario["counts"] == {"pending": 0, "running": 0, "succeeded": scenario["jobs"], "failed": 0}
    assert scenario["executions"] == scenario["jobs"]
    assert scenario["fifo"] is True


def test_store_and_queue_run_on_the_node_that_holds_the_file(scenario: dict[str, Any]) -> None:
    assert scenario["nodes"] == 2
    assert scenario["store_node"] == scenario["head_node"]
    assert scenario["queue_node"] == scenario["head_node"]


def test_workers_run_on_the_other_node(scenario: dict[str, Any]) -> None:
    second = scenario["second_node"]
    assert second is not None and second != scenario["head_node"]
    workers_there = [name for name, node in scenario["actor_nodes"].items() if node == second]
    assert any(name.endswith(".observer") for name in workers_there)
    assert any(name.endswith(".indexer") for name in workers_there)
