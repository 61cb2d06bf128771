"""The search benchmark runs end to end on a small corpus (figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

from bench.search_bench import corpus_material, run_search_bench


def test_small_bench_reports_identical_results_and_all_keys() -> None:
    (row,) = run_search_bench([300], seed=7)
    for key in ("size", "exact_p50_ms", "exact_p99_ms", "like_p50_ms", "like_p99_ms", "projection_p50_ms"):
        assert key in row
    assert row["size"] == 300 and row["identical"] is True and row["projection_p99_ms"] is not None


def test_corpus_falls_back_to_fixtures_without_transcripts(tmp_path: Path) -> None:
    sentences, paths, source = corpus_material(tmp_path / "absent")
    assert source == "fixtures" and sentences and paths
