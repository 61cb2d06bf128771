"""``omray bench queue`` and ``omray bench chaos`` on the shared session cluster, and their audit."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from bench.chaos_bench import run_chaos_bench
from bench.cli import bench_app
from bench.queue_bench import JobRow, audit_jobs, run_queue_bench

pytestmark = pytest.mark.integration


def test_queue_bench_completes_every_job_once(ray_cluster: object) -> None:
    result = run_queue_bench(50)
    # 50 jobs from 8 agents at once, then 50 probes dispatched by one agent in turn.
    assert (result.jobs, result.probe_jobs) == (100, 50)
    assert (result.completed, result.lost, result.duplicated, result.failed) == (100, 0, 0, 0)
    assert result.redelivered == 0 and result.order_kept
    assert result.jobs_per_s > 0 and result.baseline_jobs_per_s is not None
    assert result.baseline_call_ms_p50_concurrent is not None
    assert 0 < result.dispatch_overhead_ms_p50 <= result.dispatch_overhead_ms_p99
    assert 0 < result.dispatch_ms_p50_concurrent <= result.dispatch_ms_p99_concurrent
    assert result.machine.cores >= 1


def test_chaos_bench_loses_and_duplicates_nothing(ray_cluster: object) -> None:
    result = run_chaos_bench(40, seed=7, max_kills=3, timeout_s=90)
    assert not result.timed_out
    assert sum(result.kills.values()) >= 1
    assert (result.completed, result.lost, result.duplicated, result.rejected) == (40, 0, 0, 0)


def test_bench_queue_command_prints_one_json_object(ray_cluster: object) -> None:
    result = CliRunner().invoke(bench_app, ["queue", "--jobs", "12", "--json", "--no-baseline"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1
    figures = json.loads(lines[0])
    assert {"jobs", "completed", "lost", "duplicated", "jobs_per_s", "dispatch_overhead_ms_p50"} <= set(
        figures
    )
    assert (figures["jobs"], figures["completed"], figures["baseline_jobs_per_s"]) == (24, 24, None)
    assert figures["probe_jobs"] == 12 and figures["dispatch_ms_p50_concurrent"] > 0
    # It leads with many agents at once next to plain Ray's as many callers, not one agent alone.
    assert list(figures)[:3] == [
        "dispatchers",
        "dispatch_ms_p50_concurrent",
        "baseline_call_ms_p50_concurrent",
    ]
    assert {"cores", "memory_gb"} <= set(figures["machine"])


# --- the audit's definitions, on hand-made records (no cluster needed) ---------------------------------


def _line(job_id: str, event: str, t: float, attempt: int = 1) -> dict[str, Any]:
    return {"job_id": job_id, "event": event, "t": t, "attempt": attempt}


def _run(job_id: str, t: float, effect: str = "applied", attempt: int = 1) -> list[dict[str, Any]]:
    return [
        _line(job_id, "start", t, attempt),
        _line(job_id, effect, t, attempt),
        _line(job_id, "end", t, attempt),
    ]


def test_audit_counts_a_clean_run_as_completed() -> None:
    rows = [JobRow("a", "succeeded", 10.0), JobRow("b", "succeeded", 20.0)]
    audit = audit_jobs(2, ["a", "b"], rows, _run("a", 5.0) + _run("b", 15.0))
    assert (audit.completed, audit.lost, audit.duplicated, audit.redelivered) == (2, 0, 0, 0)
    assert audit.order_kept


def test_audit_counts_unfinished_and_never_started_jobs_as_lost() -> None:
    rows = [JobRow("a", "running", None), JobRow("b", "succeeded", 20.0)]
    audit = audit_jobs(3, ["a", "b", "c"], rows, _run("a", 5.0))
    assert (audit.completed, audit.lost) == (0, 3)


def test_audit_tells_redelivery_from_duplication() -> None:
    redelivered = _run("a", 5.0) + _run("a", 6.0, "skipped", attempt=2)
    audit = audit_jobs(1, ["a"], [JobRow("a", "succeeded", 10.0)], redelivered)
    assert (audit.completed, audit.duplicated, audit.redelivered) == (1, 0, 1)

    started_after_success = _run("a", 5.0) + _run("a", 11.0, "skipped", attempt=2)
    audit = audit_jobs(1, ["a"], [JobRow("a", "succeeded", 10.0)], started_after_success)
    assert (audit.duplicated, audit.redelivered) == (1, 0)

    finished_twice = [JobRow("a", "succeeded", 10.0), JobRow("a", "succeeded", 12.0)]
    assert audit_jobs(1, ["a"], finished_twice, _run("a", 5.0) + _run("a", 11.0, "skipped")).duplicated == 1

    applied_twice = _run("a", 5.0) + _run("a", 6.0, attempt=2)
    assert audit_jobs(1, ["a"], [JobRow("a", "succeeded", 10.0)], applied_twice).duplicated == 1


def test_audit_reports_failed_jobs_and_order() -> None:
    rows = [JobRow("a", "failed", 10.0), JobRow("b", "succeeded", 4.0)]
    audit = audit_jobs(2, ["a", "b"], rows, _run("b", 3.0) + _run("a", 5.0))
    assert (audit.completed, audit.failed, audit.lost) == (1, 1, 0)
    assert not audit.order_kept
