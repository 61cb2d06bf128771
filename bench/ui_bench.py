"""``omray bench ui``: how fast the memory viewer's pages answer over a large memory database.

Builds a corpus with :func:`bench.search_corpus.build_corpus` (default 50,000 observations in 50
sessions of 1,000, each with a promoted generation), adds token usage and one session's
``events.jsonl``, serves the real app behind the real web guard with uvicorn on a free loopback
port, and times each endpoint the page calls, as a browser would (HTTP, bearer token, JSON
decoded): the page itself, the sessions list, one session's timeline (1,000 observations), exact
search, recall, the cost chart's data and the queue line. No Ray: the viewer's reads are local and
read-only (the queue line answers "not connected"). Figures are printed, never asserted.
"""

from __future__ import annotations

import json
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.search_bench import query_set
from bench.search_corpus import build_corpus
from persistence.writers.store import Store
from protocol.records import TokenUsageRecord

TOKEN = "bench-" + "x" * 40
"""The viewer's token for the run (never written to disk)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _events_file(project: Path, session: str, count: int) -> None:
    folder = project / ".hatfield" / "sessions" / session
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / "events.jsonl").open("w", encoding="utf-8") as handle:
        for seq in range(1, count + 1):
            event = {
                "schema_version": "1.0",
                "run_id": session,
                "seq": seq,
                "turn_no": 1 + seq // 10,
                "type": "agent_command_applied",
                "payload": {"text": f"bench event {seq}"},
                "ts": "2026-01-01T10:00:00+00:00",
            }
            handle.write(json.dumps(event) + "\n")


def _usage(db: Path, sessions: list[str]) -> None:
    with Store(db) as store:
        for index, session in enumerate(sessions):
            for hour in range(3):
                store.record_token_usage(
                    TokenUsageRecord(
                        usage_id=f"bench-{session}-{hour}",
                        session_id=session,
                        job_kind="observe",
                        model="bench/model",
                        requests=3,
                        prompt_tokens=9000 + index,
                        cached_prompt_tokens=4000,
                        completion_tokens=600,
                        recorded_at=f"2026-01-0{1 + hour % 3}T1{hour}:00:00+00:00",
                    )
                )


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))], 2)


def _serve(project: Path, port: int) -> tuple[Any, threading.Thread]:
    import uvicorn

    from cluster.servers.ui_server import UiBackend, guarded_app, load_project

    (project / "omray.yaml").write_text(
        "observational_memory:\n  storage:\n    database: om.sqlite\n  semantic: null\n", encoding="utf-8"
    )
    backend = UiBackend({"bench": load_project(project, "bench")})
    app = guarded_app(backend, "127.0.0.1", port, TOKEN)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    return server, thread


def run_ui_bench(size: int = 50_000, repeats: int = 20, seed: int = 0) -> dict[str, Any]:
    """Build the corpus, serve it, and time every endpoint ``repeats`` times (after one warm-up)."""
    import httpx

    with tempfile.TemporaryDirectory(prefix="omray-ui-bench-") as directory:
        project = Path(directory)
        db = project / "om.sqlite"
        started = time.monotonic()
        sessions, sentences, paths, _ = build_corpus(db, size, seed)
        _usage(db, sessions)
        recall_session = sessions[len(sessions) // 2]  # its events file is written: recall reads it
        _events_file(project, recall_session, 1000)
        build_s = round(time.monotonic() - started, 1)
        queries = [q["query"] for q in query_set(sentences, paths, seed)][:10]
        port = _free_port()
        server, thread = _serve(project, port)
        base = f"http://127.0.0.1:{port}"
        headers = {"authorization": f"Bearer {TOKEN}"}
        try:
            with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
                timeline = client.get(f"/api/session?session={recall_session}").json()
                memory_id = timeline["parts"][0]["observations"][0]["id"]
                calls: dict[str, Callable[[int], httpx.Response]] = {
                    "page": lambda i: client.get("/"),
                    "sessions": lambda i: client.get("/api/projects"),
                    "timeline": lambda i: client.get(f"/api/session?session={sessions[i % len(sessions)]}"),
                    "search_exact": lambda i: client.post(
                        "/api/search", json={"query": queries[i % len(queries)], "mode": "exact"}
                    ),
                    "recall": lambda i: client.post(
                        "/api/recall", json={"session_id": recall_session, "id": memory_id}
                    ),
                    "cost": lambda i: client.get("/api/cost"),
                    "queue": lambda i: client.get("/api/queue"),
                }
                figures: dict[str, Any] = {}
                every: list[float] = []
                for name, call in calls.items():
                    call(0).raise_for_status()  # warm-up (first connection of the thread)
                    times = []
                    for index in range(repeats):
                        begin = time.perf_counter()
                        response = call(index)
                        if name != "page":
                            response.json()  # the browser decodes it too
                        times.append((time.perf_counter() - begin) * 1000)
                        response.raise_for_status()
                    every.extend(times)
                    figures[name] = {
                        "p50_ms": _percentile(times, 0.5),
                        "p95_ms": _percentile(times, 0.95),
                        "bytes": len(response.content),
                    }
        finally:
            server.should_exit = True
            thread.join(timeout=10)
        return {
            "memories": size,
            "sessions": len(sessions),
            "repeats": repeats,
            "build_s": build_s,
            "p50_ms": round(statistics.median(every), 2),
            "slowest_page_p50_ms": max(f["p50_ms"] for f in figures.values()),
            "pages": figures,
        }


def bench_ui_command(
    size: Annotated[int, typer.Option("--size", min=1, help="Observations in the corpus.")] = 50_000,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed requests per page.")] = 20,
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the corpus.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """omray ui: how fast each page answers over a large memory database (HTTP, token, JSON)."""
    result = run_ui_bench(size, repeats, seed)
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    typer.echo(
        f"{result['memories']} memories in {result['sessions']} sessions (built in {result['build_s']} s): "
        f"p50 {result['p50_ms']} ms over every page, slowest page p50 {result['slowest_page_p50_ms']} ms"
    )
    for name, figures in result["pages"].items():
        typer.echo(
            f"  {name:<13} p50 {figures['p50_ms']:>7} ms  p95 {figures['p95_ms']:>7} ms"
            f"  {figures['bytes']} bytes"
        )
