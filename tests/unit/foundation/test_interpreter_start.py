"""Each agent hook and each MCP server start is a new Python interpreter running the installed omray.
What the installation adds to every interpreter start is paid on every agent turn, so the checkout's
editable install must be a plain path, not an import hook that runs at start-up."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_packages_are_declared_at_the_top_of_the_checkout() -> None:
    # With ``package-dir`` said, setuptools' editable install writes the checkout's path into a .pth
    # file; without it, it installs a finder that imports pathlib, urllib and ipaddress at start-up.
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    assert setuptools["package-dir"] == {"": "."}


def test_an_interpreter_start_imports_no_editable_install_hook() -> None:
    started = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import cluster.commands.entry"],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",  # not the checkout: what an agent's hook sees from any project
    )
    imported = [line.rsplit("|", 1)[-1].strip() for line in started.stderr.splitlines() if "|" in line]
    assert "cluster.commands.entry" in imported
    assert not [name for name in imported if name.startswith("__editable__")]
