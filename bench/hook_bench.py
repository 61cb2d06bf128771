"""What an agent waits for: ``omray hook claude-code`` per event, and ``omray mcp`` until its tool list.

Each hook call is a fresh process started exactly as the ``omray`` console script starts
(``cluster.commands.entry.main``), with the hook JSON on stdin, in a temporary project whose database holds
one session of ``--memories`` observations and a few reflections (``bench.search_corpus``'s):

* ``stop``, ``subagent_stop``, ``pre_compact``, ``session_end``: a mark on a transcript (the
  project's Claude Code fixture, or ``--transcript``). The benchmark holds the project's dispatch
  lock, so the hook starts no dispatcher and only the hook itself is timed; ``stop_spawning``
  times ``Stop`` with the lock free (the hook then starts a dispatcher, which finds no runtime and
  exits; runs are spaced so that it ends before the next call);
* ``session_start_compact``: the projection as ``additionalContext``;
* ``session_start_resume``: the same for a resumed transcript that was compacted (a
  ``compact_boundary`` record at its end) and holds no memory since;
* ``mcp_tools_list``: ``omray mcp`` started, ``initialize``, then ``tools/list`` answered (from the
  start of the process); ``mcp_exit``: SIGTERM until the process is gone.

The baseline from the same run, interleaved with the calls: ``python -c pass`` (the interpreter
alone, with the same site packages). Every figure is printed, never asserted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from filelock import FileLock
from pydantic import BaseModel

from bench.measure import percentile
from bench.search_corpus import ACTIVE_SESSION, build_active_session
from cluster.commands.hook_fast import DISPATCH_LOCK

FIXTURE = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "transcripts" / "claude-code-session.jsonl"
)
SESSION = ACTIVE_SESSION
OMRAY = [
    sys.executable,
    "-c",
    "import sys; from cluster.commands.entry import main; sys.argv[0] = 'omray'; main()",
]
HOOK_EVENTS: dict[str, tuple[str, dict[str, object]]] = {
    "stop": ("Stop", {"stop_hook_active": False}),
    "subagent_stop": ("SubagentStop", {"stop_hook_active": False}),
    "pre_compact": ("PreCompact", {"trigger": "auto", "custom_instructions": ""}),
    "session_end": ("SessionEnd", {"reason": "other"}),
}
"""Benchmarked hook calls that record a mark: name -> (event, extra input fields)."""


class Timing(BaseModel):
    """Wall times of one kind of call, in milliseconds."""

    p50_ms: float
    p90_ms: float
    p50_over_interpreter_ms: float
    """``p50_ms`` minus the interpreter's p50 of the same run."""


class HookBenchResult(BaseModel):
    """Every call's timing next to the interpreter's, from one run."""

    runs: int
    memories: int
    interpreter_p50_ms: float
    interpreter_p90_ms: float
    calls: dict[str, Timing]
    projection_chars: int
    transcript_bytes: int
    load_average_1m: float


def _p90(values: Sequence[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.9 + 0.5) - 1)]


def timed_ms(argv: list[str], stdin: str, cwd: Path, env: dict[str, str], *, check: bool = True) -> float:
    """Milliseconds one process takes from start to exit, ``stdin`` on its input."""
    started = time.perf_counter()
    subprocess.run(
        argv, input=stdin, text=True, capture_output=True, cwd=cwd, check=check, timeout=60, env=env
    )
    return (time.perf_counter() - started) * 1000


def mcp_tools_listed(
    argv: list[str], cwd: Path, env: dict[str, str]
) -> tuple[subprocess.Popen[bytes], float, Any]:
    """Start ``argv`` (an ``omray mcp``), send ``initialize`` then ``tools/list``: the running
    process, the ms until the list arrived, and the ``tools/list`` answer."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    messages = [
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    ]
    process.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
    process.stdin.flush()
    answers = [json.loads(process.stdout.readline()) for _ in range(2)]
    return process, (time.perf_counter() - started) * 1000, answers[1]


def _mcp_times(cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """``(ms until tools/list answered, ms from SIGTERM until exit)`` of one ``omray mcp``."""
    process, listed, answer = mcp_tools_listed([*OMRAY, "mcp"], cwd, env)
    assert len(answer["result"]["tools"]) == 4
    stopping = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=30)
    return listed, (time.perf_counter() - stopping) * 1000


def _resumed_transcript(source: Path, target: Path) -> None:
    boundary = {"type": "system", "subtype": "compact_boundary", "content": "Conversation compacted"}
    target.write_bytes(source.read_bytes() + (json.dumps(boundary, separators=(",", ":")) + "\n").encode())


def run_hook_bench(runs: int, transcript: Path, memories: int, spacing_s: float = 2.0) -> HookBenchResult:
    """Time ``runs`` calls of each kind, interleaved with the baseline, in a temporary project."""
    from actors.read.service import project

    with tempfile.TemporaryDirectory(prefix="omray-hook-bench-") as tmp:
        root = Path(tmp)
        (root / "omray.yaml").write_text("observational_memory:\n  storage:\n    database: om.sqlite\n")
        build_active_session(root / "om.sqlite", memories, seed=0)
        (root / ".hatfield").mkdir()
        resumed = root / "resumed.jsonl"
        _resumed_transcript(transcript, resumed)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "OMRAY_SETTINGS"))}
        env["CLAUDE_CODE_ENTRYPOINT"] = "cli"
        env["OMRAY_HOME"] = str(root / "home")  # no runtime here: a dispatcher exits at once

        def payload(event: str, path: Path = transcript, extra: dict[str, object] | None = None) -> str:
            base = {
                "session_id": SESSION,
                "transcript_path": str(path),
                "cwd": str(root),
                "hook_event_name": event,
            }
            return json.dumps({**base, **(extra or {})})

        hook = [*OMRAY, "hook", "claude-code"]

        def marking(event: str, extra: dict[str, object]) -> Callable[[], float]:
            return lambda: timed_ms(hook, payload(event, extra=extra), root, env)

        kinds: dict[str, Callable[[], float]] = {
            name: marking(event, extra) for name, (event, extra) in HOOK_EVENTS.items()
        }
        kinds["session_start_compact"] = lambda: timed_ms(
            hook, payload("SessionStart", extra={"source": "compact"}), root, env
        )
        kinds["session_start_resume"] = lambda: timed_ms(
            hook, payload("SessionStart", resumed, {"source": "resume"}), root, env
        )
        # The first SessionStart reads the settings the slow way and caches the database path.
        subprocess.run(
            hook,
            input=payload("SessionStart", extra={"source": "compact"}),
            text=True,
            capture_output=True,
            cwd=root,
            env=env,
            check=True,
        )
        interpreter: list[float] = []
        times: dict[str, list[float]] = {
            name: [] for name in [*kinds, "stop_spawning", "mcp_tools_list", "mcp_exit"]
        }
        with FileLock(str(root / DISPATCH_LOCK)):
            for _ in range(runs):
                for name, call in kinds.items():
                    interpreter.append(timed_ms([sys.executable, "-c", "pass"], "", root, env))
                    times[name].append(call())
                listed, stopped = _mcp_times(root, env)
                times["mcp_tools_list"].append(listed)
                times["mcp_exit"].append(stopped)
        for _ in range(runs):
            interpreter.append(timed_ms([sys.executable, "-c", "pass"], "", root, env))
            times["stop_spawning"].append(timed_ms(hook, payload("Stop"), root, env))
            time.sleep(spacing_s)  # the dispatcher it started finds no runtime and exits
        projection = project(root / "om.sqlite", SESSION)
    base = percentile(interpreter, 0.5)
    return HookBenchResult(
        runs=runs,
        memories=memories,
        interpreter_p50_ms=round(base, 1),
        interpreter_p90_ms=round(_p90(interpreter), 1),
        calls={
            name: Timing(
                p50_ms=round(percentile(values, 0.5), 1),
                p90_ms=round(_p90(values), 1),
                p50_over_interpreter_ms=round(percentile(values, 0.5) - base, 1),
            )
            for name, values in times.items()
        },
        projection_chars=len(projection),
        transcript_bytes=transcript.stat().st_size,
        load_average_1m=round(os.getloadavg()[0], 2),
    )


def bench_hook_command(
    runs: Annotated[int, typer.Option("--runs", min=1, help="Calls of each kind.")] = 15,
    transcript: Annotated[
        Path | None, typer.Option("--transcript", help="Claude Code transcript (default: the fixture).")
    ] = None,
    memories: Annotated[
        int, typer.Option("--memories", min=1, help="Observations in the projection.")
    ] = 5000,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Wall time of each `omray hook claude-code` call and of `omray mcp` start, next to `python -c pass`."""
    result = run_hook_bench(runs, (transcript or FIXTURE).resolve(), memories)
    if as_json:
        typer.echo(result.model_dump_json())
        return
    typer.echo(f"python -c pass: p50 {result.interpreter_p50_ms} ms, p90 {result.interpreter_p90_ms} ms")
    for name, timing in result.calls.items():
        typer.echo(
            f"{name}: p50 {timing.p50_ms} ms (+{timing.p50_over_interpreter_ms} ms), p90 {timing.p90_ms} ms"
        )
    typer.echo(f"projection: {result.projection_chars} chars of {result.memories} memories")
