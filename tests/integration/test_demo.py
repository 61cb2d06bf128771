"""`omray demo --json` end to end: the README's first command, on the shared test cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import ray

pytestmark = pytest.mark.integration


def test_demo_runs_every_stage_offline(ray_cluster: object) -> None:
    # The shared cluster's own address: "auto" could pick another cluster of this machine, or a
    # stopped head that a test before this one left as Ray's latest.
    env = {**os.environ, "RAY_ADDRESS": ray.get_runtime_context().gcs_address}
    result = subprocess.run(
        [sys.executable, "-m", "cluster.commands.cli", "demo", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout)
    for key in (
        "session_id",
        "events",
        "observations",
        "coverage_end",
        "last_seq",
        "generations",
        "reflections",
    ):
        assert key in data
    assert data["coverage_end"] == data["last_seq"] == data["events"]
    assert data["observations"] >= 5
    assert data["generations"] >= 1 and data["reflections"] >= 1
    assert data["projection_chars"] > 0 and data["search"]["ok"] is True
    assert data["hybrid_search"]["ok"] is True and data["hybrid_search"]["count"] >= 1
    assert data["job_failed_events"] == 0 and data["drained"] is True
