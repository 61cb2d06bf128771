"""Exact ``memory_search`` benchmark: omray's planned search against the plain LIKE scan.

For each corpus size it builds a temporary memory database through :class:`persistence.writers.store.Store`
(observer parts, plus one promoted generation per session so projections have reflections and a
retained pool), then measures, over the same query set (common and rare substrings, 1-2 character
queries, ``%``/``_`` literals, mixed case, date filters):

* ``exact_*``: :func:`actors.read.service.exact_search` with the default ``auto`` strategy (per
  table: trigram pre-filter for rare phrases, a walk of the result-order index for common ones and
  narrow date ranges, the scan otherwise; see ``persistence.search.reader``);
* ``like_*``: the same call forced to the plain escaped ``LIKE`` scan (the original's method);
* ``identical``: every query's answer was the same for both;
* ``by_class``: p50 of both per query class (``common``, ``rare``, ``short``, ``dated``);
* ``observation_plans``: how often ``auto`` chose each plan on ``om_observation``;
* ``projection_*``: :func:`actors.read.service.project` for the corpus's sessions.

The corpus (texts and database) is built by :mod:`bench.search_corpus`. Figures are printed, never
asserted.
"""

from __future__ import annotations

import json
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from actors.read.projector import render_active_memory
from actors.read.search_arguments import validate_search_arguments
from actors.read.service import exact_search, project, reader_for
from bench.measure import percentile
from bench.search_corpus import ACTIVE_REFLECTIONS, ACTIVE_SESSION, build_active_session, build_corpus
from persistence.search.reader import SearchReader
from persistence.search.request import SearchRequest

QUERY_REPEATS = 3
"""Executions of each query per strategy."""

PROJECTION_SESSIONS = 10
"""Sessions projected per size (each projected ``QUERY_REPEATS`` times)."""

PROJECTION_REPEATS = 20
"""Warm projections of the large active-memory session, per size."""

COLD_PROCESSES = 5
"""Fresh processes started per size for the cold projection (one projection each)."""

# ------------------------------------------------------------------------------------------ queries


def _rare_substring(sentences: Sequence[str], rng: random.Random) -> str:
    sentence = rng.choice(sentences)
    length = min(len(sentence), 16)
    start = rng.randint(0, len(sentence) - length)
    return sentence[start : start + length].strip() or sentence


QueryClass = Literal["common", "rare", "short", "dated"]
"""What a benchmark query exercises: a frequent substring, a rare one, 1-2 characters, date bounds."""


def classified_query_set(
    sentences: Sequence[str], paths: Sequence[str], seed: int
) -> list[tuple[QueryClass, dict[str, object]]]:
    """The benchmark's ``memory_search`` argument objects, each with its class."""
    rng = random.Random(seed + 1)
    common = ["the", "error", "file", "test", "User:", "Assistant: I'll", "README"]
    rare = [_rare_substring(sentences, rng) for _ in range(6)] + [rng.choice(paths), "zqxj-no-such-text"]
    rare += ["100%", "tool_name", "MapToolArguments", "2510"]
    short = ["a", "ts", "é", "%", "_", "x_"]
    queries: list[tuple[QueryClass, dict[str, object]]] = [("common", {"query": q}) for q in common]
    queries += [("rare", {"query": q}) for q in rare]
    queries += [("short", {"query": q}) for q in short]
    queries += [
        ("dated", {"query": "the", "after": "2026-02-01", "before": "2026-03-15"}),
        ("dated", {"query": "error", "after": "2026-04-01 12:00"}),
        ("dated", {"query": "a", "before": "2026-01-10"}),
        ("dated", {"query": rare[0], "after": "2026-01-01", "before": "2026-12-31", "limit": 50}),
        ("common", {"query": "file", "limit": 5}),
    ]
    return queries


def query_set(sentences: Sequence[str], paths: Sequence[str], seed: int) -> list[dict[str, object]]:
    """The benchmark's ``memory_search`` argument objects."""
    return [arguments for _, arguments in classified_query_set(sentences, paths, seed)]


def _timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, result


def _measure_size(db_path: Path, size: int, seed: int) -> dict[str, object]:
    build_started = time.perf_counter()
    sessions, sentences, paths, source = build_corpus(db_path, size, seed)
    build_s = time.perf_counter() - build_started
    requests: list[tuple[QueryClass, SearchRequest]] = []
    for query_class, arguments in classified_query_set(sentences, paths, seed):
        request = validate_search_arguments(arguments)
        if isinstance(request, SearchRequest):
            requests.append((query_class, request))
    exact_ms: dict[QueryClass, list[float]] = {}
    like_ms: dict[QueryClass, list[float]] = {}
    plans: Counter[str] = Counter()
    identical = True
    for query_class, request in requests:
        exact_search(db_path, request)  # warm the page cache for both strategies alike
        plans[reader_for(db_path).exact_search(request).observation_strategy] += 1
        for _ in range(QUERY_REPEATS):
            fast_time, fast = _timed(lambda r=request: exact_search(db_path, r))
            scan_time, scan = _timed(lambda r=request: exact_search(db_path, r, "scan"))
            exact_ms.setdefault(query_class, []).append(fast_time)
            like_ms.setdefault(query_class, []).append(scan_time)
            identical = identical and fast == scan
    projection_ms: list[float] = []
    for session_id in sessions[:PROJECTION_SESSIONS]:
        for _ in range(QUERY_REPEATS):
            elapsed, _text = _timed(lambda s=session_id: project(db_path, s))
            projection_ms.append(elapsed)
    active = (
        measure_active_projection(db_path.with_name("active.sqlite"), size, seed) if size <= 50_000 else {}
    )
    all_exact = [value for values in exact_ms.values() for value in values]
    all_like = [value for values in like_ms.values() for value in values]
    return {
        "size": size,
        "sessions": len(sessions),
        "queries": len(requests),
        "corpus_source": source,
        "build_s": round(build_s, 2),
        "exact_p50_ms": round(percentile(all_exact, 0.5), 3),
        "exact_p99_ms": round(percentile(all_exact, 0.99), 3),
        "like_p50_ms": round(percentile(all_like, 0.5), 3),
        "like_p99_ms": round(percentile(all_like, 0.99), 3),
        "exact_mean_ms": round(statistics.fmean(all_exact), 3),
        "like_mean_ms": round(statistics.fmean(all_like), 3),
        "identical": identical,
        "by_class": {
            query_class: {
                "queries": len(exact_ms[query_class]) // QUERY_REPEATS,
                "exact_p50_ms": round(percentile(exact_ms[query_class], 0.5), 3),
                "like_p50_ms": round(percentile(like_ms[query_class], 0.5), 3),
            }
            for query_class in exact_ms
        },
        "observation_plans": dict(sorted(plans.items())),
        "projection_p50_ms": round(percentile(projection_ms, 0.5), 3),
        "projection_p99_ms": round(percentile(projection_ms, 0.99), 3),
        **active,
    }


_COLD_SCRIPT = (
    "import sys, time\n"
    "from actors.read.service import project\n"
    "started = time.perf_counter()\n"
    "project(sys.argv[1], sys.argv[2])\n"
    "print((time.perf_counter() - started) * 1000)\n"
)


def _cold_projection_ms(db_path: Path) -> float:
    """One projection in a fresh process (imports done before the clock starts), in ms."""
    done = subprocess.run(
        [sys.executable, "-c", _COLD_SCRIPT, str(db_path), ACTIVE_SESSION],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return float(done.stdout.strip().splitlines()[-1])


def full_record_projection(db_path: Path, session_id: str) -> str:
    """The projection as main computed it: a fresh reader, SQLAlchemy, full pydantic records (baseline)."""
    memory = SearchReader(db_path).active_memory(session_id)
    return render_active_memory(memory.reflections, memory.candidates.observations)


def _commit_elsewhere(db_path: Path) -> None:
    """A commit by another connection (a row in a bench-only table): every memoized read is stale."""
    connection = sqlite3.connect(db_path)
    try:
        with connection:
            connection.execute("CREATE TABLE IF NOT EXISTS bench_tick (tick INTEGER)")
            connection.execute("INSERT INTO bench_tick (tick) VALUES (1)")
    finally:
        connection.close()


def _after_commit_ms(db_path: Path) -> float:
    _commit_elsewhere(db_path)
    return _timed(lambda: project(db_path, ACTIVE_SESSION))[0]


def measure_active_projection(db_path: Path, size: int, seed: int) -> dict[str, object]:
    """Projection of one session with ``size`` active memories: cold process, warm process, baseline.

    Warm: repeated calls in this process (answered from the per-snapshot memo); after a commit: the
    same process and connection right after another connection committed, so it reads again.
    """
    build_active_session(db_path, size, seed)
    cold = [_cold_projection_ms(db_path) for _ in range(COLD_PROCESSES)]
    first_ms, text = _timed(lambda: project(db_path, ACTIVE_SESSION))
    warm = [_timed(lambda: project(db_path, ACTIVE_SESSION))[0] for _ in range(PROJECTION_REPEATS)]
    after_commit = [_after_commit_ms(db_path) for _ in range(PROJECTION_REPEATS)]
    baseline_ms, baseline_text = _timed(lambda: full_record_projection(db_path, ACTIVE_SESSION))
    baseline = [baseline_ms] + [
        _timed(lambda: full_record_projection(db_path, ACTIVE_SESSION))[0] for _ in range(4)
    ]
    return {
        "active_memories": size + ACTIVE_REFLECTIONS,
        "active_projection_identical": text == baseline_text,
        "active_projection_cold_p50_ms": round(percentile(cold, 0.5), 3),
        "active_projection_cold_max_ms": round(percentile(cold, 1.0), 3),
        "active_projection_first_in_process_ms": round(first_ms, 3),
        "active_projection_warm_p50_ms": round(percentile(warm, 0.5), 3),
        "active_projection_warm_p99_ms": round(percentile(warm, 0.99), 3),
        "active_projection_after_commit_p50_ms": round(percentile(after_commit, 0.5), 3),
        "active_projection_after_commit_p99_ms": round(percentile(after_commit, 0.99), 3),
        "active_projection_baseline_p50_ms": round(percentile(baseline, 0.5), 3),
        "active_projection_baseline_max_ms": round(percentile(baseline, 1.0), 3),
    }


def run_search_bench(sizes: list[int], seed: int = 0) -> list[dict[str, object]]:
    """Build one corpus per size in a temporary directory and measure it (see the module docstring)."""
    results: list[dict[str, object]] = []
    for size in sizes:
        if size < 1:
            raise ValueError(f"corpus size must be positive, got {size!r}")
        with tempfile.TemporaryDirectory(prefix="omray-search-bench-") as directory:
            results.append(_measure_size(Path(directory) / "om.sqlite", size, seed))
    return results


def _parse_sizes(raw: str) -> list[int]:
    try:
        sizes = [int(part) for part in raw.split(",") if part.strip()]
    except ValueError:
        raise typer.BadParameter("sizes must be comma-separated integers, e.g. 5000,50000") from None
    if not sizes or any(size < 1 for size in sizes):
        raise typer.BadParameter("sizes must be positive integers")
    return sizes


def bench_search_command(
    sizes: Annotated[str, typer.Option("--sizes", help="Comma-separated corpus sizes.")] = "5000,50000",
    seed: Annotated[int, typer.Option("--seed", help="Random seed of corpus and queries.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON.")] = False,
) -> None:
    """Exact memory_search: planned search vs the plain LIKE scan, per query class; projection latency."""
    results = run_search_bench(_parse_sizes(sizes), seed)
    if as_json:
        typer.echo(json.dumps(results, indent=2))
        return
    for row in results:
        typer.echo(
            f"size={row['size']:>7} exact p50/p99={row['exact_p50_ms']}/{row['exact_p99_ms']} ms  "
            f"like p50/p99={row['like_p50_ms']}/{row['like_p99_ms']} ms  identical={row['identical']}  "
            f"projection p50/p99={row['projection_p50_ms']}/{row['projection_p99_ms']} ms  "
            f"({row['corpus_source']}, built in {row['build_s']} s)"
        )
        by_class = row["by_class"]
        for query_class, figures in by_class.items() if isinstance(by_class, dict) else ():
            typer.echo(
                f"    {query_class:<6} p50 exact/like={figures['exact_p50_ms']}/{figures['like_p50_ms']} ms "
                f"({figures['queries']} queries)"
            )
        typer.echo(f"    observation plans: {row['observation_plans']}")
        if "active_memories" in row:
            figures = {key.removeprefix("active_projection_"): value for key, value in row.items()}
            typer.echo(
                f"    projection of {row['active_memories']} active memories: "
                f"cold p50/max={figures['cold_p50_ms']}/{figures['cold_max_ms']} ms  "
                f"warm p50/p99={figures['warm_p50_ms']}/{figures['warm_p99_ms']} ms  "
                f"after a commit p50/p99={figures['after_commit_p50_ms']}/"
                f"{figures['after_commit_p99_ms']} ms  "
                f"baseline (full records) p50={figures['baseline_p50_ms']} ms  "
                f"identical={figures['identical']}"
            )


if __name__ == "__main__":
    typer.run(bench_search_command)
