"""``omray bench cluster`` on its own small cluster (a subprocess: Ray allows one cluster per driver)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_cluster_bench_runs_both_layouts_and_prints_one_json_object() -> None:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cluster.commands.cli",
            "bench",
            "cluster",
            "--nodes",
            "2",
            "--sessions",
            "1",
            "--json",
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1  # figures only on stdout
    result = json.loads(lines[0])
    assert [run["placement"] for run in result["runs"]] == ["spread", "one-node"]
    for run in result["runs"]:
        assert run["failed"] == 0 and run["jobs"] > 0
        assert run["embedded_chunks"] > 0 and run["visible_lag_p50_s"] > 0
    assert result["nodes"] == 2 and result["projects"] == 1 and result["sessions"] == 1
