"""``omray bench agent-turn --agent codex``: what omray adds to a real ``codex exec`` turn, and where.

The real Codex CLI (``--codex``, else ``$OMRAY_CODEX_CLI``, else the one this benchmark or the
tests installed under ``~/.cache``, else ``codex`` on ``PATH``, else ``npm install @openai/codex``
under ``~/.cache/omray-bench``; with no npm and no CLI the benchmark says so and skips) runs
one-prompt turns (``codex exec``, a fresh session each) against :class:`bench.agent_mock.
MockModelServer`'s Responses API (a ``model_providers`` entry in ``config.toml``, a dummy key),
each configuration with its own ``CODEX_HOME`` and project, the same seven as for Claude Code
(:data:`bench.agent_turn.CONFIGS`):

* ``bare``: no omray;
* ``hooks``: omray's ``notify`` program, as ``omray integrate codex`` writes it;
* ``mcp``: omray's ``[mcp_servers.omray]``, the same way;
* ``both``: everything ``omray integrate codex`` writes;
* ``noop-hooks``: ``notify`` running ``true``; ``noop-mcp``: omray's MCP entry serving the static
  server of :data:`bench.agent_turn.NOOP_MCP_SERVER`; ``noop-both``: both, the floor of ``both``.

The configurations are interleaved, the order rotated every round, one warm-up round not counted
(it also leaves the record that lets ``omray mcp`` list its tools without reading the settings, as
any session after a project's first does). A turn's time is to the process's exit (its output goes
to files: Codex does not wait for its ``notify`` program, and neither does a terminal). After each
turn the benchmark waits until no process started for the project is left (the ``notify`` hook,
the dispatcher it starts, an MCP server), so no turn pays for another's; how long that took is
reported. Then the breakdown (:mod:`bench.codex_turn_parse`): a few more turns of each
configuration with ``RUST_LOG`` set, and each omray process alone. Figures only, never asserted.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.agent_mock import REPLY, MockModelServer
from bench.agent_turn import (
    CACHE_DIR,
    CONFIGS,
    NOOP_MCP_SERVER,
    NOT_INHERITED,
    PROMPT,
    AgentTurnResult,
    AgentTurnSkipped,
    ConfigFigures,
    cli_on_path_or_installed,
    cli_version,
    mcp_listed_ms,
    rotated,
)
from bench.codex_turn_parse import CODEX_LOG_FILTER, CodexPhases, codex_phases, median_codex_phases
from bench.hook_bench import mcp_tools_listed, timed_ms
from bench.measure import percentile

CODEX_PACKAGE = "@openai/codex"
"""The npm package of the Codex CLI."""
CODEX_ENV = "OMRAY_CODEX_CLI"
"""Where the tests look for the CLI first; so does this benchmark."""
TESTS_CLI_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "omray-cli"
"""The npm prefix the tests install the agents' CLIs under (``testkit.agent_cli.CLI_CACHE``)."""
PROVIDER = "omray-bench"
"""The ``model_providers`` entry pointing Codex at the mock."""
KEY_ENV = "OMRAY_BENCH_CODEX_KEY"
"""The variable holding the dummy API key (``env_key`` of :data:`PROVIDER`)."""
MODEL = "gpt-5-mini"
TURN_TIMEOUT_S = 180.0
"""A turn still running after this long is killed (and fails the run)."""
CODEX_NOT_INHERITED = (*NOT_INHERITED, "CODEX", "OPENAI", "RUST_LOG")
"""Variables a turn does not inherit (another agent session's, a real key, a log filter)."""


# ------------------------------------------------------------------------------------ the CLI


def installed_codex(cache: Path = CACHE_DIR) -> Path:
    """Where :func:`find_codex` installs the CLI."""
    return cache / "codex" / "node_modules" / ".bin" / "codex"


def find_codex(
    explicit: Path | None, cache: Path = CACHE_DIR, tests_cache: Path = TESTS_CLI_CACHE, install: bool = True
) -> Path:
    """The ``codex`` program: ``explicit``, else ``$OMRAY_CODEX_CLI``, else an install under
    ``cache`` or ``tests_cache``, else ``codex`` on ``PATH``, else installed now with npm into
    ``cache``. Raises :class:`AgentTurnSkipped` saying why not."""
    if explicit is not None:
        if not explicit.is_file():
            raise AgentTurnSkipped(f"--codex {str(explicit)!r} is not a file")
        return explicit
    from_env = os.environ.get(CODEX_ENV, "")
    cached = installed_codex(cache)
    for candidate in (from_env, str(cached), str(tests_cache / "node_modules" / ".bin" / "codex")):
        if candidate and os.access(candidate, os.X_OK):
            return Path(candidate)
    return cli_on_path_or_installed("codex", CODEX_PACKAGE, cached, install)


codex_version = cli_version


# ---------------------------------------------------------------------------------- configs


def base_config(base_url: str) -> str:
    """``config.toml`` of every configuration before omray's entries: the mock as the provider."""
    import tomlkit

    document = tomlkit.document()
    document["model"] = MODEL
    document["model_provider"] = PROVIDER
    providers = tomlkit.table(is_super_table=True)
    providers[PROVIDER] = {
        "name": PROVIDER,
        "base_url": f"{base_url}/v1",
        "wire_api": "responses",
        "env_key": KEY_ENV,
    }
    document["model_providers"] = providers
    return tomlkit.dumps(document)


def codex_config(config: str, base_url: str, omray: str, config_path: Path) -> str:
    """``config``'s ``config.toml``: :func:`base_config` with omray's entries merged as ``omray
    integrate codex`` merges them, then the ones ``config`` leaves out taken off (or made no-ops)."""
    import tomlkit

    from cluster.commands.integrate import codex_changes

    config_path.write_text(base_config(base_url), encoding="utf-8")
    if config == "bare":
        return config_path.read_text(encoding="utf-8")
    [change] = codex_changes(config_path, omray, None, remove=False)
    document = tomlkit.parse(change.after)
    if config in ("hooks", "noop-hooks"):
        del document["mcp_servers"]
    if config in ("mcp", "noop-mcp"):
        del document["notify"]
    if config.startswith("noop"):
        if "notify" in document:
            document["notify"] = [shutil.which("true") or "/bin/true"]
        if "mcp_servers" in document:
            server = document["mcp_servers"]["omray"]
            server["command"] = sys.executable
            server["args"] = ["-S", "-I", "-c", NOOP_MCP_SERVER, json.dumps(_omray_tools())]
    return tomlkit.dumps(document)


def _omray_tools() -> list[dict[str, Any]]:
    from cluster.servers.mcp_server import mcp_tool, tool_specs

    return [mcp_tool(spec) for spec in tool_specs(hybrid=True)]


def codex_env(base_env: dict[str, str], codex_home: Path, omray_home: Path) -> dict[str, str]:
    """The environment of a turn: ``base_env`` without agent sessions' and OpenAI's variables,
    pointed at its ``CODEX_HOME``, with the dummy key and a private ``OMRAY_HOME``."""
    env = {key: value for key, value in base_env.items() if not key.startswith(CODEX_NOT_INHERITED)}
    return {
        **env,
        "CODEX_HOME": str(codex_home),
        KEY_ENV: "sk-bench-not-a-key",
        "OMRAY_HOME": str(omray_home),
    }


# ---------------------------------------------------------------------------------- processes


def project_pids(project: Path) -> list[int]:
    """Processes working in ``project`` or naming it in their command line (the ``notify`` hook's
    JSON holds the project as ``cwd``; the dispatcher has ``--project``), read from ``/proc``."""
    wanted = str(project)
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().decode(errors="replace")
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == wanted or cwd.startswith(wanted + os.sep) or wanted in cmdline:
            pids.append(int(entry))
    return pids


def wait_for_project(project: Path, timeout_s: float = 90.0) -> float:
    """Milliseconds until no process of ``project`` is left (0 when none was)."""
    started = time.perf_counter()
    while project_pids(project) and time.perf_counter() - started < timeout_s:
        time.sleep(0.01)
    return (time.perf_counter() - started) * 1000


# ------------------------------------------------------------------------------------- turns


class CodexAgent:
    """The ``CODEX_HOME``s and projects of one run, and how to run a turn in each."""

    def __init__(self, codex: Path, root: Path, omray: str, base_url: str, omray_home: Path) -> None:
        self.codex, self.root = codex, root
        self.projects = {config: root / config for config in CONFIGS}
        self.homes = {config: root / f"{config}-codex-home" for config in CONFIGS}
        self.envs = {}
        for config in CONFIGS:
            self.projects[config].mkdir(parents=True)
            self.homes[config].mkdir(parents=True)
            path = self.homes[config] / "config.toml"
            path.write_text(codex_config(config, base_url, omray, path), encoding="utf-8")
            self.envs[config] = codex_env(dict(os.environ), self.homes[config], omray_home)
        self.logs = root / "logs"
        self.logs.mkdir()

    def turn(self, config: str, log_filter: str | None = None) -> tuple[float, float, float, str]:
        """One ``codex exec`` turn in ``config``'s project: ``(seconds, started, exited, stderr)``,
        the moments in ms since the epoch."""
        env = {**self.envs[config], **({"RUST_LOG": log_filter} if log_filter else {})}
        out, err = self.logs / f"{config}.out", self.logs / f"{config}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            started_at, started = time.time() * 1000, time.perf_counter()
            process = subprocess.Popen(
                [str(self.codex), "exec", "--skip-git-repo-check", PROMPT],
                cwd=self.projects[config],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
            )
            # wait() with a timeout polls, sleeping up to 50 ms between looks (figures came out in
            # 50 ms steps): block in waitpid instead, a timer killing a turn that hangs.
            watchdog = threading.Timer(TURN_TIMEOUT_S, process.kill)
            watchdog.start()
            try:
                code = process.wait()
            finally:
                watchdog.cancel()
            elapsed, exited_at = time.perf_counter() - started, time.time() * 1000
        errors = err.read_text(errors="replace")
        if code != 0 or REPLY not in out.read_text(errors="replace"):
            raise RuntimeError(f"codex exec failed in {config!r} (exit {code}): {errors[-300:]!r}")
        return elapsed, started_at, exited_at, errors

    def instrumented_turn(self, config: str) -> CodexPhases:
        """One turn with Codex's log lines on, parsed."""
        _, started_at, exited_at, errors = self.turn(config, CODEX_LOG_FILTER)
        wait_for_project(self.projects[config])
        return codex_phases(errors, started_at, exited_at)

    def last_thread(self, config: str) -> str | None:
        """The thread id of ``config``'s newest rollout (``None`` before any turn)."""
        from cluster.commands.hook_fast import rollout_thread

        rollouts = sorted(self.homes[config].glob("sessions/*/*/*/rollout-*.jsonl"))
        return rollout_thread(rollouts[-1].name) if rollouts else None


def process_times(agent: CodexAgent, omray: str, runs: int) -> dict[str, float]:
    """p50 ms of each omray process a ``codex exec`` run starts, alone, in the ``both`` project:
    the ``notify`` hook as Codex runs it (no shell, the notification as the last argument; the
    thread the last turn's, so it finds the rollout, appends its mark and starts the dispatcher)
    and ``omray mcp`` to ``tools/list``; ``python -c pass`` and the no-op server for scale."""
    project, env = agent.projects["both"], agent.envs["both"]
    notification = json.dumps(
        {
            "type": "agent-turn-complete",
            "thread-id": agent.last_thread("both") or "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
            "turn-id": "bench",
            "cwd": str(project),
            "input-messages": [PROMPT],
            "last-assistant-message": REPLY,
        }
    )
    noop = ["-S", "-I", "-c", NOOP_MCP_SERVER, json.dumps(_omray_tools())]

    def noop_listed() -> float:
        process, listed, _ = mcp_tools_listed([sys.executable, *noop], project, env)
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=30)
        return listed

    calls = {
        "python -c pass": lambda: timed_ms([sys.executable, "-c", "pass"], "", project, env, check=False),
        "notify hook": lambda: timed_ms(
            [omray, "hook", "codex", notification], "", project, env, check=False
        ),
        "omray mcp to tools/list": lambda: mcp_listed_ms(omray, project, env),
        "no-op server to tools/list": noop_listed,
    }
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(runs):
        for name, call in calls.items():
            times[name].append(call())
            wait_for_project(project)
    return {name: round(percentile(values, 0.5), 1) for name, values in times.items()}


def run_codex_turn_bench(
    codex: Path,
    omray: str,
    turns: int,
    breakdown_turns: int,
    omray_home: Path | None = None,
    spacing_s: float = 0.3,
) -> AgentTurnResult:
    """Time ``turns`` turns of every configuration, interleaved, then the breakdown.

    The run's folders are made under the benchmark's cache, not ``/tmp``: Codex refuses to set up
    its helper programs under a temporary folder, which a user's ``~/.codex`` never is.
    """
    version = codex_version(codex)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="codex-turn-", dir=CACHE_DIR) as tmp, MockModelServer() as mock:
        root = Path(tmp).resolve()
        agent = CodexAgent(codex, root, omray, mock.base_url, omray_home or root / "omray-home")
        times: dict[str, list[float]] = {config: [] for config in CONFIGS}
        lingering: dict[str, list[float]] = {config: [] for config in CONFIGS}
        load_start = os.getloadavg()[0]
        for round_no in range(turns + 1):
            for config in rotated(round_no):
                elapsed = agent.turn(config)[0]
                lingered = wait_for_project(agent.projects[config])
                if round_no:  # the first round warms the caches of every configuration
                    times[config].append(elapsed)
                    lingering[config].append(lingered)
                time.sleep(spacing_s)
        load_end = os.getloadavg()[0]
        phases: dict[str, list[CodexPhases]] = {config: [] for config in CONFIGS}
        for round_no in range(breakdown_turns):
            for config in rotated(round_no):
                phases[config].append(agent.instrumented_turn(config))
                time.sleep(spacing_s)
        alone = process_times(agent, omray, max(3, breakdown_turns))
        for config in CONFIGS[1:]:  # what a configuration left running after its turn's exit
            alone[f"ran on after a {config} turn"] = round(percentile(lingering[config], 0.5), 1)
        requests = mock.requests("responses")
    bare = percentile(times["bare"], 0.5)
    return AgentTurnResult(
        agent=version,
        omray=omray,
        turns=turns,
        configs={
            config: ConfigFigures(
                median_s=round(percentile(values, 0.5), 3),
                p90_s=round(percentile(values, 0.9), 3),
                over_bare_ms=round((percentile(values, 0.5) - bare) * 1000, 1),
            )
            for config, values in times.items()
        },
        load_average=[round(load_start, 2), round(load_end, 2)],
        breakdown={config: median_codex_phases(seen) for config, seen in phases.items()},
        processes_ms=alone,
        dispatcher_after_turn_ms=round(percentile(lingering["both"], 0.5), 1),
        model_requests=requests,
    )
