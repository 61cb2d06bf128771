"""``omray bench agent-turn``'s command: :mod:`bench.agent_turn` (``claude -p``) and
:mod:`bench.codex_turn` (``codex exec``) run, their figures printed (or one JSON object)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from bench.agent_turn import Agent, AgentTurnResult, AgentTurnSkipped, find_claude, run_agent_turn_bench
from bench.codex_turn import CodexAgent, find_codex


def _print(result: AgentTurnResult, source: str = "Claude Code's debug and diagnostics files") -> None:
    typer.echo(f"{result.agent}, {result.turns} turns per configuration, load average {result.load_average}")
    for config, figures in result.configs.items():
        typer.echo(
            f"  {config:10}: median {figures.median_s:.3f} s (+{figures.over_bare_ms:.0f} ms), "
            f"p90 {figures.p90_s:.3f} s"
        )
    typer.echo(f"breakdown (medians, ms; from {source}):")
    for config, medians in result.breakdown.items():
        shown = ", ".join(
            f"{name.removesuffix('_ms')} {value:.0f}" for name, value in medians.items() if value is not None
        )
        typer.echo(f"  {config:10}: {shown}")
    typer.echo(
        "omray processes alone (p50 ms): " + ", ".join(f"{k} {v:.1f}" for k, v in result.processes_ms.items())
    )
    typer.echo(f"omray's processes ran on after a both turn: p50 {result.dispatcher_after_turn_ms:.0f} ms")
    typer.echo(f"both over noop-both (omray's own part): {result.over_floors_ms:.0f} ms")


def _cli_option(name: str, found: str) -> Any:
    """``--<name> PATH``: the agent's CLI (``found``: where it is looked for without one)."""
    return typer.Option(f"--{name}", help=f"The {name} CLI (default: {found}).")


def bench_agent_turn_command(
    turns: Annotated[int, typer.Option("--turns", min=1, help="Timed turns per configuration.")] = 11,
    breakdown_turns: Annotated[
        int, typer.Option("--breakdown-turns", min=0, help="Turns per configuration with debug logs.")
    ] = 3,
    agent: Annotated[
        str,
        typer.Option("--agent", help="claude (claude -p), codex (codex exec) or both, one after the other."),
    ] = "claude",
    claude: Annotated[Path | None, _cli_option("claude", "cached install, PATH, npm")] = None,
    codex: Annotated[Path | None, _cli_option("codex", "$OMRAY_CODEX_CLI, caches, PATH, npm")] = None,
    omray: Annotated[
        str | None, typer.Option("--omray", help="The omray program to install (default: this one).")
    ] = None,
    omray_home: Annotated[
        Path | None,
        typer.Option("--omray-home", help="OMRAY_HOME of a running runtime (default: a private one, none)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Real `claude -p` / `codex exec` turns against a local mock API: bare, omray hooks, MCP server, both."""
    from cluster.commands.integrate import omray_command

    if agent not in ("claude", "codex", "both"):
        raise typer.BadParameter("--agent is claude, codex or both")
    program = omray or omray_command()
    answers: dict[str, Any] = {}
    for name in ("claude", "codex") if agent == "both" else (agent,):
        try:
            agent_type, found = (
                (Agent, find_claude(claude)) if name == "claude" else (CodexAgent, find_codex(codex))
            )
            result = run_agent_turn_bench(agent_type, found, program, turns, breakdown_turns, omray_home)
        except AgentTurnSkipped as exc:
            answers[name] = {"skipped": str(exc)}
            if not as_json:
                typer.echo(f"agent-turn ({name}) skipped: {exc}")
            continue
        answers[name] = {**result.model_dump(mode="json"), "over_floors_ms": result.over_floors_ms}
        if not as_json:
            _print(
                result,
                "Claude Code's debug and diagnostics files" if name == "claude" else "Codex's RUST_LOG lines",
            )
    if as_json:
        typer.echo(json.dumps(answers[agent] if agent != "both" else answers))
