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
import threading
import time
from pathlib import Path

from bench.agent_mock import REPLY
from bench.agent_turn import (
    CACHE_DIR,
    CONFIGS,
    NOT_INHERITED,
    PROMPT,
    AgentTurnSkipped,
    TurnAgent,
    cli_on_path_or_installed,
    cmdline,
    mcp_listed_ms,
    noop_mcp_entry,
    pids_where,
    wait_until_gone,
)
from bench.codex_turn_parse import CODEX_LOG_FILTER, CodexPhases, codex_phases
from bench.hook_bench import timed_ms
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
            document["mcp_servers"]["omray"].update(noop_mcp_entry())
    return tomlkit.dumps(document)


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
    JSON holds the project as ``cwd``; the dispatcher has ``--project``)."""
    wanted = str(project)

    def works_in(pid: str) -> bool:
        cwd = os.readlink(f"/proc/{pid}/cwd")
        return cwd == wanted or cwd.startswith(wanted + os.sep) or wanted in cmdline(pid)

    return pids_where(works_in)


def wait_for_project(project: Path) -> float:
    """Milliseconds until no process of ``project`` is left (0 when none was)."""
    return wait_until_gone(lambda: project_pids(project), poll_s=0.01)


# ------------------------------------------------------------------------------------- turns


class CodexAgent(TurnAgent):
    """Codex: a ``CODEX_HOME`` per configuration, ``codex exec`` turns.

    The run's folders are made under the benchmark's cache, not ``/tmp``: Codex refuses to set up
    its helper programs under a temporary folder, which a user's ``~/.codex`` never is.
    """

    API = "responses"
    PHASES = CodexPhases
    RUN_PREFIX = "codex-turn-"
    RUN_PARENT = CACHE_DIR
    LINGERING = ("both",)

    def __init__(self, program: Path, root: Path, omray: str, base_url: str, omray_home: Path) -> None:
        super().__init__(program, root, omray, base_url, omray_home)
        self.logs = root / "logs"
        self.logs.mkdir()

    def home(self, config: str) -> Path:
        """``config``'s ``CODEX_HOME``."""
        return self.root / f"{config}-codex-home"

    def install(self, config: str, omray: str, base_url: str, omray_home: Path) -> dict[str, str]:
        self.projects[config].mkdir(parents=True)
        self.home(config).mkdir(parents=True)
        path = self.home(config) / "config.toml"
        path.write_text(codex_config(config, base_url, omray, path), encoding="utf-8")
        return codex_env(dict(os.environ), self.home(config), omray_home)

    def turn(self, config: str) -> float:
        """One ``codex exec`` turn in ``config``'s project; its wall time in seconds."""
        return self.logged_turn(config)[0]

    def logged_turn(self, config: str, log_filter: str | None = None) -> tuple[float, float, float, str]:
        """One ``codex exec`` turn in ``config``'s project: ``(seconds, started, exited, stderr)``,
        the moments in ms since the epoch."""
        env = {**self.envs[config], **({"RUST_LOG": log_filter} if log_filter else {})}
        out, err = self.logs / f"{config}.out", self.logs / f"{config}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            started_at, started = time.time() * 1000, time.perf_counter()
            process = subprocess.Popen(
                [str(self.program), "exec", "--skip-git-repo-check", PROMPT],
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

    def settle(self, config: str) -> float:
        """Wait until no process started for the project is left (the ``notify`` hook, the
        dispatcher it starts, an MCP server)."""
        return wait_for_project(self.projects[config])

    def instrumented_turn(self, config: str) -> CodexPhases:
        """One turn with Codex's log lines on, parsed."""
        _, started_at, exited_at, errors = self.logged_turn(config, CODEX_LOG_FILTER)
        self.settle(config)
        return codex_phases(errors, started_at, exited_at)

    def last_thread(self, config: str) -> str | None:
        """The thread id of ``config``'s newest rollout (``None`` before any turn)."""
        from cluster.commands.hook_fast import rollout_thread

        rollouts = sorted(self.home(config).glob("sessions/*/*/*/rollout-*.jsonl"))
        return rollout_thread(rollouts[-1].name) if rollouts else None

    def process_times(self, omray: str, runs: int) -> dict[str, float]:
        """The ``notify`` hook as Codex runs it (no shell, the notification as the last argument;
        the thread the last turn's, so it finds the rollout, appends its mark and starts the
        dispatcher) and ``omray mcp`` to ``tools/list``; ``python -c pass`` and the no-op server for
        scale."""
        project, env = self.projects["both"], self.envs["both"]
        notification = json.dumps(
            {
                "type": "agent-turn-complete",
                "thread-id": self.last_thread("both") or "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
                "turn-id": "bench",
                "cwd": str(project),
                "input-messages": [PROMPT],
                "last-assistant-message": REPLY,
            }
        )
        noop = noop_mcp_entry()
        calls = {
            "python -c pass": lambda: timed_ms([sys.executable, "-c", "pass"], "", project, env, check=False),
            "notify hook": lambda: timed_ms(
                [omray, "hook", "codex", notification], "", project, env, check=False
            ),
            "omray mcp to tools/list": lambda: mcp_listed_ms([omray, "mcp"], project, env),
            "no-op server to tools/list": lambda: mcp_listed_ms(
                [noop["command"], *noop["args"]], project, env
            ),
        }
        return self.p50_ms(calls, runs)

    def ran_on(self, lingering: dict[str, list[float]]) -> dict[str, float]:
        """What each configuration but ``bare`` left running after its turn's exit, p50 ms."""
        return {
            f"ran on after a {config} turn": round(percentile(lingering[config], 0.5), 1)
            for config in CONFIGS[1:]
        }
