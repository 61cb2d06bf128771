"""The benchmark pages cite only what a reader can rerun from this repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAGES = ("docs/benchmarks.md", "docs/benchmarks-history.md")
SCRIPT = re.compile(r"`((?:[A-Za-z0-9_.-]+/)+[A-Za-z0-9_.-]+\.(?:py|sh))(?::[A-Za-z0-9_.]+)?`")
BENCH = re.compile(r"omray bench ([a-z][a-z-]*)")


@pytest.mark.parametrize("page", PAGES)
def test_every_script_a_benchmark_page_cites_is_in_the_repository(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    missing = sorted({path for path in SCRIPT.findall(text) if not (REPO / path).is_file()})
    assert missing == []
    assert "/work/exp" not in text


@pytest.mark.parametrize("page", PAGES)
def test_every_bench_command_a_benchmark_page_names_exists(page: str) -> None:
    from bench.cli import bench_app

    commands = {command.name for command in bench_app.registered_commands}
    named = set(BENCH.findall((REPO / page).read_text(encoding="utf-8")))
    assert named, page
    assert sorted(named - commands) == []


def test_the_current_page_is_one_page() -> None:
    """docs/benchmarks.md holds current figures only (the notebook is benchmarks-history.md)."""
    lines = (REPO / "docs/benchmarks.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 220
