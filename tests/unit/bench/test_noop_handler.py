"""The queue benchmarks' no-op handler applies each job's effect at most once, whoever runs it."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from bench import queue_bench
from bench.queue_bench import EFFECTS_ENV, _mark_once, bench_job, idempotent_noop
from testkit.handlers import LEDGER_ENV, read_ledger


def test_a_marker_is_made_once_and_then_found(tmp_path: Path) -> None:
    assert _mark_once(tmp_path, "job-1") is True
    assert _mark_once(tmp_path, "job-1") is False
    assert _mark_once(tmp_path, "job-2") is True
    assert (tmp_path / "job-1").exists() and (tmp_path / "job-2").exists()


def test_racing_executions_of_one_job_apply_it_once(tmp_path: Path) -> None:
    results: list[bool] = []
    lock = threading.Lock()
    gate = threading.Barrier(8)

    def run() -> None:
        gate.wait()
        for n in range(50):
            created = _mark_once(tmp_path, f"job-{n}")
            with lock:
                results.append(created)

    threads = [threading.Thread(target=run) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 50
    assert len(results) == 400


def test_a_full_template_falls_back_to_a_file_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(src: object, dst: object) -> None:
        raise OSError(errno.EMLINK, "too many links")

    monkeypatch.setattr(queue_bench.os, "link", full)
    assert _mark_once(tmp_path, "job-1") is True
    assert _mark_once(tmp_path, "job-1") is False
    assert (tmp_path / "job-1").is_file()


def test_another_link_error_is_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(src: object, dst: object) -> None:
        raise PermissionError(errno.EACCES, "denied")

    monkeypatch.setattr(queue_bench.os, "link", denied)
    with pytest.raises(PermissionError):
        _mark_once(tmp_path, "job-1")


def test_the_handler_logs_applied_then_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    effects = tmp_path / "effects"
    effects.mkdir()
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    monkeypatch.setenv(EFFECTS_ENV, str(effects))
    job = bench_job("run", 3)
    assert idempotent_noop(job, 1, None) == {"effect": "applied"}
    assert idempotent_noop(job, 2, None) == {"effect": "skipped"}
    events = [(line["attempt"], line["event"]) for line in read_ledger(str(ledger))]
    assert events == [(1, "start"), (1, "applied"), (1, "end"), (2, "start"), (2, "skipped"), (2, "end")]
    assert all(line["pid"] == os.getpid() for line in read_ledger(str(ledger)))
