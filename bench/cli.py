"""``omray bench``: benchmarks of the runtime (``cluster.commands.cli`` mounts it when this package is there).

Each command starts a private local Ray cluster sized for this machine, or joins one with
``--address``, runs one benchmark from ``bench/`` and prints its figures (one JSON object with
``--json``). Other benchmark commands register themselves on :data:`bench_app` the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer
from pydantic import BaseModel

from bench.output import emit, emit_lines, stdout_to_stderr

bench_app = typer.Typer(
    name="bench",
    help="Benchmarks of the omray runtime (no-op handlers; figures, never a pass/fail gate).",
    no_args_is_help=True,
    add_completion=False,
)


LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
"""Object store of the private cluster: the benchmarks move small payloads only."""

AddressOption = typer.Option(
    None, "--address", help="Join this Ray cluster (e.g. 'auto') instead of starting a private one."
)
JsonOption = typer.Option(False, "--json", help="Print one JSON object.")


@contextmanager
def ray_for_bench(address: str | None) -> Iterator[None]:
    """Connect to ``address``, or start a private 2-CPU cluster that is stopped afterwards."""
    import ray  # here, not at the top: `omray hook` and `omray mcp` must start without Ray

    if ray.is_initialized():
        yield
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    common: dict[str, Any] = {"namespace": "omray", "logging_level": logging.WARNING, "log_to_driver": False}
    if address:
        ray.init(address=address, **common)
    else:
        ray.init(
            address="local",  # a private cluster, never a `ray start` head found on the machine
            num_cpus=min(os.cpu_count() or 2, 2),
            include_dashboard=False,
            object_store_memory=LOCAL_OBJECT_STORE_BYTES,
            **common,
        )
    try:
        yield
    finally:
        ray.shutdown()


def _run(address: str | None, as_json: bool, bench: Callable[[], BaseModel]) -> None:
    with stdout_to_stderr(), ray_for_bench(address):
        result = bench()
    emit(result, as_json)


@bench_app.command("queue")
def queue_command(
    jobs: int = typer.Option(1000, "--jobs", min=1, help="Jobs to dispatch."),
    address: str | None = AddressOption,
    as_json: bool = JsonOption,
    baseline: bool = typer.Option(True, "--baseline/--no-baseline", help="Also time plain Ray calls."),
) -> None:
    """Throughput and dispatch latency of the durable queue, next to plain Ray actor calls."""
    from bench.queue_bench import run_queue_bench

    _run(address, as_json, lambda: run_queue_bench(jobs, baseline=baseline))


@bench_app.command("chaos")
def chaos_command(
    jobs: int = typer.Option(200, "--jobs", min=1, help="Jobs to dispatch."),
    address: str | None = AddressOption,
    as_json: bool = JsonOption,
    seed: int = typer.Option(0, "--seed", help="Seed of the kill schedule."),
    kills: int = typer.Option(3, "--kills", min=0, max=12, help="Most SIGKILLs to deliver."),
    timeout: float = typer.Option(180.0, "--timeout", min=10.0, help="Give up after this many seconds."),
    real: bool = typer.Option(False, "--real", help="Real observe, reflect and index jobs; compare memory."),
    seeds: int = typer.Option(
        5, "--seeds", min=1, help="With --real: seeds --seed.. --seed+N-1, one run each."
    ),
    sessions: int = typer.Option(2, "--sessions", min=1, max=64, help="With --real: agent sessions."),
    turns: int = typer.Option(5, "--turns", min=1, max=200, help="With --real: turns per session."),
    kills_per_kind: int = typer.Option(
        1, "--kills-per-kind", min=0, max=5, help="With --real: kills per kind."
    ),
    cluster_stop: bool = typer.Option(
        True, "--cluster-stop/--no-cluster-stop", help="With --real: also stop the whole cluster once."
    ),
) -> None:
    """SIGKILL the queue (its database writer too) and workers at seeded moments; audit every job.

    With ``--real``: real work, the memory StoreActor killed too, memory compared with a clean run.
    """
    if real:
        from bench.chaos_workload import Workload
        from bench.real_chaos import run_real_chaos

        workload = Workload(sessions=sessions, turns=turns)
        _run(
            address,
            as_json,
            lambda: run_real_chaos(
                workload,
                list(range(seed, seed + seeds)),
                kills_per_kind=kills_per_kind,
                cluster_stop=cluster_stop,
            ),
        )
        return
    from bench.chaos_bench import run_chaos_bench

    _run(address, as_json, lambda: run_chaos_bench(jobs, seed=seed, max_kills=kills, timeout_s=timeout))


def _register_more() -> None:
    from bench.agent_turn_cli import bench_agent_turn_command
    from bench.cluster_bench import bench_cluster_command
    from bench.hook_bench import bench_hook_command
    from bench.search_bench import bench_search_command
    from bench.ui_bench import bench_ui_command

    bench_app.command("search")(bench_search_command)
    bench_app.command("hook")(bench_hook_command)
    bench_app.command("agent-turn")(bench_agent_turn_command)
    bench_app.command("ui")(bench_ui_command)
    bench_app.command("cluster")(bench_cluster_command)


_register_more()


TranscriptsOption = typer.Option(
    [], "--transcript", help="Transcript(s) to replay (default: every real one, large-session first)."
)


@bench_app.command("observer")
def observer_command(
    transcript: list[str] = TranscriptsOption,
    context_window: int = typer.Option(
        32768, "--context-window", min=1024, help="Observer model context window."
    ),
    agent_context_window: int = typer.Option(
        128000, "--agent-context-window", min=32768, help="Context window of the replayed agent."
    ),
    provider: str = typer.Option(
        "openai",
        "--provider",
        help="openai: every trigger policy through the openai client; claude-code: the default policy "
        "through the real claude CLI beside the openai client (needs the CLI from npm).",
    ),
    as_json: bool = JsonOption,
) -> None:
    """Observer cost per trigger policy (prompt, uncached tokens per source token) and compaction coverage."""
    from pathlib import Path

    from bench.observer_bench import run_observer_bench

    if provider not in ("openai", "claude-code"):
        raise typer.BadParameter("must be openai or claude-code", param_hint="--provider")
    if provider == "claude-code":
        from bench.observer_cli_bench import run_cli_comparison
        from testkit.agent_cli import AgentCliMissing

        try:
            compared = run_cli_comparison(
                Path(transcript[0]) if transcript else None,
                context_window=context_window,
                agent_context_window=agent_context_window,
            )
        except AgentCliMissing as exc:
            typer.echo(f"omray bench observer --provider claude-code: {exc}", err=True)
            raise typer.Exit(code=2) from exc
        emit_lines(
            compared,
            as_json,
            (
                f"{name}: {figures['observer_calls']} observer calls, "
                f"{figures['api_requests']} API requests, "
                f"{figures['prompt_tokens_per_source_token']} prompt tokens per source token"
                for name, figures in compared["providers"].items()
            ),
        )
        return

    result = run_observer_bench(
        [Path(t) for t in transcript] or None,
        context_window=context_window,
        agent_context_window=agent_context_window,
    )
    emit_lines(
        result,
        as_json,
        (
            f"{name}: {figures['model_requests']} requests, {figures['parts']} parts, "
            f"{figures['prompt_tokens_per_source_token']} prompt / "
            f"{figures['uncached_prompt_tokens_per_source_token']} uncached tokens per source token, "
            f"compactions fully covered {figures['compactions_fully_covered']} of {figures['compactions']}"
            for name, figures in result["policies"].items()
        ),
    )


@bench_app.command("hybrid")
def hybrid_command(
    size: int = typer.Option(2000, "--size", min=1, help="Memories (observations) in the corpus."),
    targets: int = typer.Option(100, "--targets", min=1, help="Target memories of the labelled set."),
    batch_size: int | None = typer.Option(
        None, "--batch-size", min=1, help="Chunks per synchronize call (default: the settings default, 4)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of corpus sampling and labelled queries."),
    source_share: float = typer.Option(
        0.2, "--source-share", min=0.0, max=1.0, help="Share of memories whose cited event adds a detail."
    ),
    as_json: bool = JsonOption,
) -> None:
    """Hybrid search with the offline embedder: backfill speed, search latency, recall@10 by mode."""
    from bench.hybrid_bench import run_hybrid_bench

    result = run_hybrid_bench(
        size, targets=targets, batch_size=batch_size, seed=seed, source_share=source_share
    )
    emit(result, as_json)


@bench_app.command("forget")
def forget_command(
    size: int = typer.Option(50_000, "--size", min=2, help="Memories (observations) in the corpus."),
    forgets: int = typer.Option(10, "--forgets", min=1, help="Memories forgotten at once."),
    embedder: str = typer.Option(
        "hash", "--embedder", help="hash (fast, 384 dimensions) or offline (the default MiniLM model)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of corpus sampling and the memories forgotten."),
    as_json: bool = JsonOption,
) -> None:
    """A forget in hybrid search: removal time, searches meanwhile, against a rebuild in the same run."""
    from bench.forget_bench import run_forget_bench

    if embedder not in ("hash", "offline"):
        raise typer.BadParameter("--embedder must be hash or offline")
    emit(run_forget_bench(size, forgets=forgets, embedder_name=embedder, seed=seed), as_json)  # type: ignore[arg-type]


@bench_app.command("all")
def all_command(
    address: str | None = AddressOption,
    as_json: bool = JsonOption,
    quick: bool = typer.Option(False, "--quick", help="Small sizes (a smoke run, not figures to record)."),
) -> None:
    """Every benchmark in one run (well under ten minutes here); one JSON object with --json."""
    import json
    import platform
    import time
    from datetime import UTC, datetime

    from bench.chaos_bench import run_chaos_bench
    from bench.hybrid_bench import run_hybrid_bench
    from bench.observer_bench import run_observer_bench
    from bench.queue_bench import machine_info, run_queue_bench
    from bench.search_bench import run_search_bench

    sizes: dict[str, Any] = {
        "queue_jobs": 100 if quick else 1000,
        "chaos_jobs": 60 if quick else 300,
        "search_sizes": [2000] if quick else [5000, 50000],
        "hybrid_size": 200 if quick else 2000,
    }
    results: dict[str, Any] = {}
    seconds: dict[str, float] = {}

    def timed(name: str, run: Callable[[], Any]) -> None:
        started = time.monotonic()
        try:
            value = run()
            results[name] = value.model_dump() if isinstance(value, BaseModel) else value
        except Exception as exc:  # one failing benchmark must not hide the others' figures
            results[name] = {"error": type(exc).__name__}
        seconds[name] = round(time.monotonic() - started, 1)

    started = time.monotonic()
    with stdout_to_stderr():
        with ray_for_bench(address):
            machine = machine_info().model_dump()
            timed("queue", lambda: run_queue_bench(sizes["queue_jobs"]))
            timed("chaos", lambda: run_chaos_bench(sizes["chaos_jobs"], seed=1, max_kills=6))
        timed("search", lambda: run_search_bench(sizes["search_sizes"], 0))
        timed("observer", lambda: run_observer_bench())
        timed("hybrid", lambda: run_hybrid_bench(sizes["hybrid_size"]))
    report = {
        "date": datetime.now(UTC).replace(microsecond=0).isoformat(),
        "machine": {**machine, "python": platform.python_version(), "platform": platform.platform()},
        "sizes": sizes,
        "seconds": {**seconds, "total": round(time.monotonic() - started, 1)},
        "results": results,
    }
    emit_lines(
        report,
        as_json,
        (
            f"{name} ({seconds[name]} s): {json.dumps(value, sort_keys=True, default=str)[:400]}"
            for name, value in results.items()
        ),
    )


VariantOption = typer.Option(
    None,
    "--variant",
    help="ray-start (baseline: plain `ray start --head`), default, no-dashboard (default: all three, "
    "in this order).",
)


@bench_app.command("up")
def up_command(
    variant: list[str] | None = VariantOption,
    settle: float = typer.Option(15.0, "--settle", min=0.0, help="Seconds to let the idle runtime settle."),
    as_json: bool = JsonOption,
) -> None:
    """`omray up` time, idle PSS/RSS by process kind and actor count, `omray down` time (own heads)."""
    from bench.up_bench import VARIANTS, run_up_bench

    unknown = sorted(set(variant or ()) - set(VARIANTS))
    if unknown:
        raise typer.BadParameter(f"unknown variants {unknown!r}; known: {sorted(VARIANTS)!r}")
    emit(run_up_bench(variant, settle_s=settle), as_json)


def _serial_baseline(value: str) -> Any:
    if value not in ("original", "coalescing", "both"):
        raise typer.BadParameter("--serial-baseline is original, coalescing or both")
    return value


@bench_app.command("load")
def load_command(
    sessions: int = typer.Option(32, "--sessions", min=1, help="Concurrent agent sessions."),
    projects: int = typer.Option(2, "--projects", min=1, help="Project directories (memory databases)."),
    turns: int = typer.Option(20, "--turns", min=1, help="Turns per session."),
    model_latency_ms: float = typer.Option(
        1000.0, "--model-latency-ms", min=0.0, help="Fixed delay of every model answer."
    ),
    model_ms_per_100_tokens: float = typer.Option(
        1.0,
        "--model-ms-per-100-tokens",
        min=0.0,
        help="Further delay per 100 prompt tokens (a big coalesced prompt takes longer).",
    ),
    turn_interval_s: float = typer.Option(0.5, "--turn-interval-s", min=0.0, help="Seconds between turns."),
    observers: int = typer.Option(8, "--observers", min=1, max=64, help="ObserverActors."),
    observer_slots: int = typer.Option(4, "--observer-slots", min=1, max=64, help="Jobs per observer."),
    serial: bool = typer.Option(True, "--serial/--no-serial", help="Also run one worker, one job in flight."),
    serial_baseline: str = typer.Option(
        "coalescing",
        "--serial-baseline",
        help="coalescing (the default): one worker that coalesces a session's waiting jobs like the"
        " runtime (the speedup_vs_serial); original: every job on its own, as the original ran them (over"
        " 11 min at the default sizes; its own speedup figure); both.",
    ),
    synchronized: bool = typer.Option(
        False,
        "--synchronized/--staggered",
        help="Every agent's turn in the same instant (default: agents spread over the interval).",
    ),
    index: bool = typer.Option(
        True, "--index/--no-index", help="The default hybrid index (--no-index: semantic: null)."
    ),
    address: str | None = AddressOption,
    as_json: bool = JsonOption,
) -> None:
    """Concurrent agents through the public client against a scripted model with latency; audited."""
    from bench.load_bench import run_load_bench

    with stdout_to_stderr(), ray_for_bench(address):
        result = run_load_bench(
            sessions=sessions,
            projects=projects,
            turns=turns,
            model_latency_ms=model_latency_ms,
            turn_interval_s=turn_interval_s,
            observers=observers,
            observer_slots=observer_slots,
            serial=serial,
            phases="synchronized" if synchronized else "staggered",
            serial_baseline=_serial_baseline(serial_baseline),
            model_ms_per_100_tokens=model_ms_per_100_tokens,
            index=index,
        )
    emit_lines(result, as_json, (f"{name}: {value}" for name, value in result.items()))


@bench_app.command("recall")
def recall_command(
    dataset: str = typer.Option(
        "longmemeval-s-dev100",
        "--dataset",
        help="longmemeval-s-dev100 (100 questions) | beam-dev (144 over 54 histories) | longmemeval-s (24) "
        "| longmemeval-oracle",
    ),
    layout: str = typer.Option(
        "one-session",
        "--layout",
        help="one-session: a question's whole history is one agent session; per-session: one each.",
    ),
    observer: str = typer.Option(
        "builtin",
        "--observer",
        help="builtin (the default offline model) | condensing (one short observation per ten messages).",
    ),
    questions: int | None = typer.Option(
        None, "--questions", min=0, help="Questions to ask (0 and the default: all; fewer for quick runs)."
    ),
    data_dir: str | None = typer.Option(
        None, "--data-dir", help="The shared data folder (holding longmemeval/ and beam/)."
    ),
    address: str | None = AddressOption,
    as_json: bool = JsonOption,
) -> None:
    """Recall of memory_search on LongMemEval or BEAM through the runtime (client -> queue -> observer ->
    indexer, default settings), next to plain bm25s over the raw turns of the same run."""
    from pathlib import Path

    from bench.recall_bench import DATA_DIR, FILES, DataMissingError, run_recall_bench

    if dataset not in FILES:
        raise typer.BadParameter(f"use one of {', '.join(FILES)}", param_hint="--dataset")
    if layout not in ("one-session", "per-session"):
        raise typer.BadParameter("use one-session or per-session", param_hint="--layout")
    if observer not in ("builtin", "condensing"):
        raise typer.BadParameter("use builtin or condensing", param_hint="--observer")
    try:
        with stdout_to_stderr(), ray_for_bench(address):
            result = run_recall_bench(
                dataset,  # type: ignore[arg-type]
                questions,
                Path(data_dir) if data_dir else DATA_DIR,
                layout=layout,  # type: ignore[arg-type]
                observer=observer,  # type: ignore[arg-type]
            )
    except DataMissingError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    emit(result, as_json)
