"""The runtime on a two-node Ray cluster (``ray.cluster_utils.Cluster``), run in a subprocess.

Ray allows one cluster connection per driver process and the session cluster already holds this
one, so the scenario (``multinode_scenario.py``) builds and tears down its own cluster elsewhere.
The data node is not the driver's node; real observe, reflect and index jobs run there.
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
        timeout=420,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_every_actor_runs_on_the_data_node(scenario: dict[str, Any]) -> None:
    assert scenario["data_node"] != scenario["driver_node"]
    nodes = scenario["actor_nodes"]
    roles = {name.split(".")[1] for name in nodes}
    assert {"queue", "store", "observer", "reflector", "indexer"} <= roles
    # Workers, queue and every StoreActor (also the one hybrid search asked for from the driver).
    assert set(nodes.values()) == {scenario["data_node"]}


def test_real_jobs_finish_and_memory_matches_a_single_node_run(scenario: dict[str, Any]) -> None:
    assert scenario["counts"]["failed"] == 0 and scenario["counts"]["pending"] == 0
    assert scenario["counts"]["succeeded"] > 0
    assert scenario["observations"] > 0 and scenario["reflections"] > 0
    assert scenario["index_state"] == [[0, 1]]  # clean and complete
    assert scenario["search_ok"] == "True"
    assert scenario["memory_identical"] is True
