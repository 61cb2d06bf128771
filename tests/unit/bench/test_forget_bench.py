"""``omray bench forget`` on a small corpus: a forget is removed in place while searches go on."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from bench.cli import bench_app
from bench.forget_bench import HashingEmbedder, run_forget_bench


def test_a_forget_is_removed_in_place_and_the_baseline_rebuilds() -> None:
    result = run_forget_bench(120, forgets=5, seed=1)
    assert not result.removal_rebuilt and result.removal_embedded_chunks == 0
    assert result.building_during_removal == 0 and result.busy_during_removal == 0
    assert result.forgotten_found == 0 and result.kept_found == result.kept_queries
    assert result.rebuild_embedded_chunks > 0  # the baseline re-embeds what the removal did not


def test_the_hashing_embedder_is_deterministic_and_never_zero() -> None:
    first, second = HashingEmbedder().embed(["same words", ""]), HashingEmbedder().embed(["same words", ""])
    assert first == second and len(first[0]) == 384 and first[1][0] > 0


def test_the_command_prints_json() -> None:
    outcome = CliRunner().invoke(bench_app, ["forget", "--size", "60", "--forgets", "2", "--json"])
    assert outcome.exit_code == 0, outcome.output
    assert json.loads(outcome.output.splitlines()[0])["forgets"] == 2
