"""How long an agent waits for ``omray hook claude-code``: wall time of one hook call, as Claude Code runs it.

Each call is a fresh process started exactly as the ``omray`` console script starts
(``cluster.entry.main``), with the hook JSON on stdin, in a temporary project:

* ``stop``: a ``Stop`` hook on a transcript (the project's Claude Code fixture, or ``--transcript``):
  records a mark and starts the background dispatcher (which finds the project's dispatch lock held
  by this benchmark and exits, so no runtime is needed and nothing is dispatched);
* ``session_start``: ``SessionStart`` with source ``compact``: reads and prints the projection of a
  session with ``--memories`` observations and a few reflections (``bench.search_bench``'s).

Baselines from the same run: ``python -c pass`` (the interpreter alone) and ``omray --help`` (the
whole command line's start). Runs are spaced so each dispatcher ends before the next call. Figures
are printed, never asserted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated

import typer
from filelock import FileLock
from pydantic import BaseModel

from bench.search_bench import ACTIVE_SESSION, build_active_session

FIXTURE = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "transcripts" / "claude-code-session.jsonl"
)
SESSION = ACTIVE_SESSION
OMRAY = [sys.executable, "-c", "import sys; from cluster.entry import main; sys.exit(main())"]


class HookBenchResult(BaseModel):
    """Medians and 90th percentiles of one hook call's wall time, in seconds, next to the baselines."""

    runs: int
    interpreter_start_s: float
    cli_help_median_s: float
    stop_median_s: float
    stop_p90_s: float
    session_start_median_s: float
    session_start_p90_s: float
    projection_chars: int
    transcript_bytes: int
    load_average_1m: float


def _p90(values: Sequence[float]) -> float:
    return round(sorted(values)[max(0, int(len(values) * 0.9 + 0.5) - 1)], 3)


def _timed(argv: list[str], stdin: str, cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(argv, input=stdin, text=True, capture_output=True, cwd=cwd, check=True, timeout=60)
    return time.perf_counter() - started


def run_hook_bench(runs: int, transcript: Path, memories: int, spacing_s: float = 1.0) -> HookBenchResult:
    """Time ``runs`` calls of each hook and of the baselines in a temporary project."""
    from actors.read.service import project

    with tempfile.TemporaryDirectory(prefix="omray-hook-bench-") as tmp:
        root = Path(tmp)
        (root / "omray.yaml").write_text("observational_memory:\n  storage:\n    database: om.sqlite\n")
        build_active_session(root / "om.sqlite", memories, seed=0)
        (root / ".hatfield").mkdir()
        base = {"session_id": SESSION, "transcript_path": str(transcript), "cwd": str(root)}
        stop = json.dumps({**base, "hook_event_name": "Stop", "stop_hook_active": False})
        start = json.dumps({**base, "hook_event_name": "SessionStart", "source": "compact"})
        interpreter, help_times, stop_times, start_times = [], [], [], []
        with FileLock(str(root / ".hatfield" / "omray-hook.dispatch.lock")):
            for _ in range(runs):
                interpreter.append(_timed([sys.executable, "-c", "pass"], "", root))
                help_times.append(_timed([*OMRAY, "--help"], "", root))
                stop_times.append(_timed([*OMRAY, "hook", "claude-code"], stop, root))
                start_times.append(_timed([*OMRAY, "hook", "claude-code"], start, root))
                time.sleep(spacing_s)  # let the dispatcher this Stop started find the lock and exit
        projection = project(root / "om.sqlite", SESSION)
    return HookBenchResult(
        runs=runs,
        interpreter_start_s=round(statistics.median(interpreter), 3),
        cli_help_median_s=round(statistics.median(help_times), 3),
        stop_median_s=round(statistics.median(stop_times), 3),
        stop_p90_s=_p90(stop_times),
        session_start_median_s=round(statistics.median(start_times), 3),
        session_start_p90_s=_p90(start_times),
        projection_chars=len(projection),
        transcript_bytes=transcript.stat().st_size,
        load_average_1m=round(os.getloadavg()[0], 2),
    )


def bench_hook_command(
    runs: Annotated[int, typer.Option("--runs", min=1, help="Calls of each hook.")] = 15,
    transcript: Annotated[
        Path | None, typer.Option("--transcript", help="Claude Code transcript (default: the fixture).")
    ] = None,
    memories: Annotated[int, typer.Option("--memories", min=1, help="Observations in the projection.")] = 200,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Wall time of one `omray hook claude-code` call (Stop, SessionStart compact), with baselines."""
    result = run_hook_bench(runs, (transcript or FIXTURE).resolve(), memories)
    if as_json:
        typer.echo(result.model_dump_json())
        return
    for name, value in result.model_dump().items():
        typer.echo(f"{name}: {value}")
