"""``omray bench agent-turn``: what omray adds to a real ``claude -p`` turn, and where it goes.

The real Claude Code CLI (``--claude``, else the one this benchmark installed before under
``~/.cache/omray-bench``, else ``npm install @anthropic-ai/claude-code`` there; with no npm and no
CLI the benchmark says so and skips) runs one-prompt turns against :class:`bench.agent_mock.
MockModelServer` (``ANTHROPIC_BASE_URL``, a dummy ``ANTHROPIC_API_KEY``, telemetry and every
nonessential request off), in a temporary project per configuration, each with its own ``CLAUDE_CONFIG_DIR``
(the project trusted, as after its trust dialog):

* ``bare``: no omray;
* ``hooks``: omray's hooks in ``.claude/settings.json``, written by ``omray integrate``'s merge;
* ``mcp``: omray's MCP server in ``.mcp.json`` and its approvals, the same way;
* ``both``: everything ``omray integrate claude-code`` writes;
* ``noop-hooks``: the same hook events running ``cat > /dev/null``: Claude Code's own cost of a hook;
* ``noop-mcp``: omray's MCP entry and approvals, the server a static one (:data:`NOOP_MCP_SERVER`);
* ``noop-both``: both of these: the floor of ``both``, what any hooks and MCP server cost here.

Every turn is a fresh session (``claude -p``, as a script runs it), the configurations
interleaved, the order rotated every round, one warm-up round not counted. After a turn the
benchmark waits for the dispatcher the ``Stop`` hook started to exit (no runtime in the private
``OMRAY_HOME``, unless ``--omray-home`` names one), so no turn pays for another's background work;
how long it stayed is reported. Then the breakdown (:mod:`bench.agent_turn_parse`): a few more
turns of each configuration with Claude Code's debug and diagnostics files, and each omray process
alone (the three hooks a ``claude -p`` run calls, started as Claude Code starts them, and
``omray mcp`` from start to ``tools/list`` answered). The load average is printed beside the
figures. Figures only, never asserted. ``--agent codex`` runs the same for ``codex exec``
(:mod:`bench.codex_turn`), ``--agent both`` one after the other.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from bench.agent_mock import REPLY, MockModelServer
from bench.agent_turn_parse import TurnPhases, median_phases, turn_phases
from bench.hook_bench import mcp_tools_listed, timed_ms
from bench.measure import percentile

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

CLAUDE_PACKAGE = "@anthropic-ai/claude-code"
"""The npm package of the Claude Code CLI."""
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "omray-bench"
"""Where the benchmark installs the agents' CLIs (never into the repository)."""
CONFIGS = ("bare", "hooks", "mcp", "both", "noop-hooks", "noop-mcp", "noop-both")
"""The configurations, in the order of the first round."""
NOOP_HOOK = "cat > /dev/null"
"""The command of ``noop-hooks``: omray's hook events with a command that costs nothing, so what is
left over bare is Claude Code's own cost of running a hook (the floor of any hook)."""
NOOP_MCP_SERVER = """\
import json, sys
tools = json.loads(sys.argv[1])
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message.get("method")
    if method == "initialize":
        version = (message.get("params") or {}).get("protocolVersion") or "2025-06-18"
        result = {"protocolVersion": version, "capabilities": {"tools": {}},
                  "serverInfo": {"name": "omray", "version": "0"}}
    else:
        result = {"tools": tools} if method == "tools/list" else {}
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}) + "\\n")
    sys.stdout.flush()
"""
"""``noop-mcp``'s server: omray's tool list, answered at once by ``python -S -I`` (no site, no
omray): close to the least any stdio MCP server can cost, so what is left over bare is Claude
Code's own cost of an MCP server (its start, its tool list, its stop)."""
PROMPT = "Reply with the single word Done."
"""Every turn's prompt (the mock answers the same whatever it is)."""
AGENT_ENV = {
    "ANTHROPIC_API_KEY": "sk-ant-bench-not-a-key",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
}
"""What every turn runs with besides ``ANTHROPIC_BASE_URL`` and ``CLAUDE_CONFIG_DIR``: the machine
has no way out, and a turn must not wait on one."""
NOT_INHERITED = (
    "CLAUDE",
    "ANTHROPIC",
    "OMRAY_SETTINGS",
    "OMRAY_SESSION",
    "OMRAY_HOME",
    "PYTHONDONTWRITEBYTECODE",
)
"""Variables a turn does not inherit: another session's, and a setting that makes every Python
process compile omray from source (an agent's user rarely has it; figures would not be theirs)."""
DISPATCHER_MODULE = "cluster.commands.agent_hooks"
"""What the ``Stop`` hook's background dispatcher runs (``python -P -m ...``)."""
TURN_SPACING_S = 0.3
"""The pause after every turn."""


class AgentTurnSkipped(Exception):
    """The agent's CLI is not there and cannot be installed; the message says why."""


class ConfigFigures(BaseModel):
    """Wall times of one configuration's turns."""

    median_s: float
    p90_s: float
    over_bare_ms: float
    """``median_s`` minus bare's, in milliseconds."""


class AgentTurnResult(BaseModel):
    """One run: medians per configuration, the breakdown, the load average."""

    HEADLINE: ClassVar[tuple[str, ...]] = ("configs", "load_average")
    agent: str
    omray: str
    turns: int
    configs: dict[str, ConfigFigures]
    load_average: list[float]
    """1-minute load average at the start and at the end of the timed turns."""
    breakdown: dict[str, dict[str, float | None]]
    """Per configuration, the median of each phase of :class:`bench.agent_turn_parse.TurnPhases`."""
    processes_ms: dict[str, float]
    """Each omray process alone, p50 ms: the hooks as Claude Code calls them, ``omray mcp`` to
    ``tools/list``, and ``python -c pass`` with the same interpreter."""
    dispatcher_after_turn_ms: float
    """p50 of how long the ``Stop`` hook's dispatcher ran on after its turn ended (hooks, both)."""
    model_requests: int

    @property
    def over_floors_ms(self) -> float:
        """What omray adds beyond Claude Code's own cost of hooks and an MCP server: ``both`` over
        ``noop-both``."""
        return round(self.configs["both"].over_bare_ms - self.configs["noop-both"].over_bare_ms, 1)


# ------------------------------------------------------------------------------------ the CLI


def installed_claude(cache: Path = CACHE_DIR) -> Path:
    """Where :func:`find_claude` installs the CLI."""
    return cache / "claude-code" / "node_modules" / ".bin" / "claude"


def find_claude(explicit: Path | None, cache: Path = CACHE_DIR, install: bool = True) -> Path:
    """The ``claude`` program: ``explicit``, else the cached install, else ``claude`` on ``PATH``,
    else installed now with npm into ``cache``. Raises :class:`AgentTurnSkipped` saying why not."""
    if explicit is not None:
        if not explicit.is_file():
            raise AgentTurnSkipped(f"--claude {str(explicit)!r} is not a file")
        return explicit
    cached = installed_claude(cache)
    if cached.exists():
        return cached
    return cli_on_path_or_installed("claude", CLAUDE_PACKAGE, cached, install)


def cli_on_path_or_installed(name: str, package: str, cached: Path, install: bool) -> Path:
    """The ``name`` program on ``PATH``, else ``package`` installed now with npm so that it lands at
    ``cached`` (``<prefix>/node_modules/.bin/<name>``). Raises :class:`AgentTurnSkipped` saying why not."""
    on_path = shutil.which(name)
    if on_path is not None:
        return Path(on_path)
    npm = shutil.which("npm")
    if npm is None:
        raise AgentTurnSkipped(f"no {name} CLI (--{name} PATH) and no npm on PATH to install it with")
    if not install:
        raise AgentTurnSkipped(f"no {name} CLI (--{name} PATH), and installing it was not allowed")
    prefix = cached.parents[2]
    prefix.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(prefix), package],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0 or not cached.exists():
        raise AgentTurnSkipped(f"npm install {package} failed (exit {done.returncode})")
    return cached


def cli_version(program: Path) -> str:
    """``<program> --version`` (raises :class:`AgentTurnSkipped` when the CLI does not run)."""
    try:
        done = subprocess.run([str(program), "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise AgentTurnSkipped(f"{str(program)!r} does not run ({type(exc).__name__})") from None
    if done.returncode != 0:
        raise AgentTurnSkipped(f"{str(program)!r} --version failed (exit {done.returncode})")
    return done.stdout.strip()


# ---------------------------------------------------------------------------------- projects


def install_config(project: Path, config_dir: Path, config: str, omray: str) -> None:
    """Write ``config``'s omray entries into ``project`` as ``omray integrate`` merges them, and
    a Claude Code state file in ``config_dir`` that trusts the project."""
    from cluster.commands.integrate import merge_claude_approvals, merge_claude_hooks, merge_mcp_server
    from cluster.commands.integrate_http import claude_mcp_entry

    project.mkdir(parents=True, exist_ok=True)
    config_dir.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {}
    if config in ("hooks", "both"):
        settings = merge_claude_hooks(settings, f"{shlex.quote(omray)} hook claude-code")
    if config in ("noop-hooks", "noop-both"):
        hooks = merge_claude_hooks({}, f"{shlex.quote(omray)} hook claude-code")["hooks"]
        for groups in hooks.values():
            for group in groups:
                group["hooks"] = [{**hook, "command": NOOP_HOOK} for hook in group["hooks"]]
        settings = {**settings, "hooks": hooks}
    if config in ("mcp", "both", "noop-mcp", "noop-both"):
        settings = merge_claude_approvals(settings)
        mcp = merge_mcp_server({}, claude_mcp_entry(omray, None))
        if config.startswith("noop"):
            mcp = merge_mcp_server({}, noop_mcp_entry())
        (project / ".mcp.json").write_text(json.dumps(mcp, indent=2) + "\n", encoding="utf-8")
    if settings:
        (project / ".claude").mkdir(exist_ok=True)
        (project / ".claude" / "settings.json").write_text(json.dumps(settings, indent=2) + "\n")
    state = {
        "hasCompletedOnboarding": True,
        "projects": {str(project): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}},
    }
    (config_dir / ".claude.json").write_text(json.dumps(state), encoding="utf-8")


def noop_mcp_entry() -> dict[str, Any]:
    """The MCP server entry of the ``noop`` configurations: :data:`NOOP_MCP_SERVER` serving omray's
    tool list."""
    from cluster.servers.mcp_server import mcp_tool, tool_specs

    tools = [mcp_tool(spec) for spec in tool_specs(hybrid=True)]
    return {"command": sys.executable, "args": ["-S", "-I", "-c", NOOP_MCP_SERVER, json.dumps(tools)]}


def agent_env(base_url: str, config_dir: Path, omray_home: Path) -> dict[str, str]:
    """The environment of a turn: this one without Claude Code's, Anthropic's and omray's own
    session variables, pointed at the mock."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(NOT_INHERITED)}
    return {
        **env,
        **AGENT_ENV,
        "ANTHROPIC_BASE_URL": base_url,
        "CLAUDE_CONFIG_DIR": str(config_dir),
        "OMRAY_HOME": str(omray_home),
    }


# ---------------------------------------------------------------------------------- processes


def pids_where(matches: Callable[[str], bool]) -> list[int]:
    """Processes other than this one for which ``matches`` holds of their ``/proc`` entry's name
    (one that is gone while ``matches`` reads it, an ``OSError``, does not match)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            with contextlib.suppress(OSError):
                if matches(entry):
                    pids.append(int(entry))
    return pids


def cmdline(pid: str) -> str:
    """The command line of process ``pid``, its words separated by NUL."""
    return Path("/proc", pid, "cmdline").read_bytes().decode(errors="replace")


def wait_until_gone(pids: Callable[[], list[int]], poll_s: float, timeout_s: float = 90.0) -> float:
    """Milliseconds until ``pids()`` finds none (0 when it finds none at once), ``timeout_s`` at most."""
    started = time.perf_counter()
    while pids() and time.perf_counter() - started < timeout_s:
        time.sleep(poll_s)
    return (time.perf_counter() - started) * 1000


def dispatcher_pids(project: Path) -> list[int]:
    """Processes running ``project``'s hook dispatcher."""
    wanted = {DISPATCHER_MODULE, "--project", str(project)}
    return pids_where(lambda pid: wanted <= set(cmdline(pid).split("\0")))


def wait_for_dispatcher(project: Path) -> float:
    """Milliseconds until ``project``'s dispatcher processes are gone (0 when none ran)."""
    return wait_until_gone(lambda: dispatcher_pids(project), poll_s=0.02)


def mcp_listed_ms(argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    """The MCP server ``argv`` started, ``initialize`` then ``tools/list`` sent: ms until the list
    arrives."""
    process, listed, _ = mcp_tools_listed(argv, cwd, env)
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=30)
    return listed


# ------------------------------------------------------------------------------------- turns


class TurnAgent(ABC):
    """The projects of one run, one per configuration, and how to run a turn in each: what
    :func:`run_agent_turn_bench` times, for one agent's CLI."""

    API: ClassVar[str]
    """The mock's API the agent's model requests go to (``MockModelServer.requests``)."""
    PHASES: ClassVar[type[DataclassInstance]]
    """What :meth:`instrumented_turn` returns: the phases of one turn."""
    RUN_PREFIX: ClassVar[str]
    """Prefix of the run's temporary folder."""
    RUN_PARENT: ClassVar[Path | None] = None
    """Where the run's temporary folder is made (``None``: the system's temporary folder)."""
    LINGERING: ClassVar[tuple[str, ...]]
    """The configurations whose processes running on after a turn make ``dispatcher_after_turn_ms``."""

    def __init__(self, program: Path, root: Path, omray: str, base_url: str, omray_home: Path) -> None:
        self.program, self.root = program, root
        self.projects = {config: root / config for config in CONFIGS}
        self.envs = {config: self.install(config, omray, base_url, omray_home) for config in CONFIGS}

    @abstractmethod
    def install(self, config: str, omray: str, base_url: str, omray_home: Path) -> dict[str, str]:
        """Make ``config``'s project and the agent's configuration for it, pointed at the mock at
        ``base_url``; the environment of its turns."""

    @abstractmethod
    def turn(self, config: str) -> float:
        """One turn in ``config``'s project; its wall time in seconds."""

    @abstractmethod
    def settle(self, config: str) -> float:
        """Wait until the processes ``config``'s last turn left are gone; the milliseconds it took."""

    @abstractmethod
    def instrumented_turn(self, config: str) -> object:
        """One turn with the agent's logs on, parsed into a :attr:`PHASES`."""

    @abstractmethod
    def process_times(self, omray: str, runs: int) -> dict[str, float]:
        """p50 ms of each omray process a turn starts, alone, in the ``both`` project."""

    def ran_on(self, lingering: dict[str, list[float]]) -> dict[str, float]:
        """Figures of ``lingering`` (per configuration, the ms its turns' processes ran on) shown
        beside :meth:`process_times` (none here)."""
        return {}

    def p50_ms(self, calls: dict[str, Callable[[], float]], runs: int) -> dict[str, float]:
        """p50 of each of ``calls`` (ms) over ``runs`` rounds, what a call left running in the ``both``
        project gone before the next."""
        times: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(runs):
            for name, call in calls.items():
                times[name].append(call())
                self.settle("both")
        return {name: round(percentile(values, 0.5), 1) for name, values in times.items()}


class Agent(TurnAgent):
    """Claude Code: a ``CLAUDE_CONFIG_DIR`` per configuration, ``claude -p`` turns."""

    API = "anthropic"
    PHASES = TurnPhases
    RUN_PREFIX = "omray-agent-turn-"
    LINGERING = ("hooks", "both")

    def install(self, config: str, omray: str, base_url: str, omray_home: Path) -> dict[str, str]:
        config_dir = self.root / f"{config}-claude-config"
        install_config(self.projects[config], config_dir, config, omray)
        return agent_env(base_url, config_dir, omray_home)

    def turn(
        self, config: str, extra_args: tuple[str, ...] = (), extra_env: dict[str, str] | None = None
    ) -> float:
        """One ``claude -p`` turn in ``config``'s project; its wall time in seconds."""
        started = time.perf_counter()
        done = subprocess.run(
            [str(self.program), "-p", PROMPT, *extra_args],
            cwd=self.projects[config],
            env={**self.envs[config], **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=180,
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0 or REPLY not in done.stdout:
            raise RuntimeError(
                f"claude -p failed in {config!r} (exit {done.returncode}): {done.stderr[-300:]!r}"
            )
        return elapsed

    def settle(self, config: str) -> float:
        """Wait for the dispatcher the ``Stop`` hook started."""
        return wait_for_dispatcher(self.projects[config])

    def instrumented_turn(self, config: str) -> TurnPhases:
        """One turn with Claude Code's debug and diagnostics files, parsed."""
        logs = Path(tempfile.mkdtemp(prefix=f"{config}-logs-", dir=self.root))
        debug, diagnostics = logs / "debug.txt", logs / "diagnostics.jsonl"
        self.turn(
            config,
            ("--debug-file", str(debug)),
            {"CLAUDE_CODE_DEBUG_LOG_LEVEL": "verbose", "CLAUDE_CODE_DIAGNOSTICS_FILE": str(diagnostics)},
        )
        self.settle(config)
        return turn_phases(_read(debug), _read(diagnostics))

    def process_times(self, omray: str, runs: int) -> dict[str, float]:
        """Hooks run as Claude Code runs them (``sh -c`` the command, the event JSON on stdin); the
        transcript is the last breakdown turn's. ``python -c pass``: the same interpreter, for scale.
        """
        project, env = self.projects["both"], self.envs["both"]
        transcripts = sorted(self.root.glob("both-claude-config/projects/*/*.jsonl"))
        transcript = str(transcripts[-1]) if transcripts else str(project / "missing.jsonl")
        hook = ["/bin/sh", "-c", f"{shlex.quote(omray)} hook claude-code"]

        def payload(event: str, **extra: object) -> str:
            base = {"session_id": "bench-hooks", "transcript_path": transcript, "cwd": str(project)}
            return json.dumps({**base, "hook_event_name": event, **extra})

        python = shutil.which("python3") or "python3"
        with contextlib.suppress(OSError, IndexError):  # the console script's interpreter
            python = (
                Path(omray).read_text(errors="replace").splitlines()[0].removeprefix("#!").strip() or python
            )
        calls: dict[str, Callable[[], float]] = {
            "python -c pass": lambda: _timed_ms([python, "-c", "pass"], "", project, env),
            "SessionStart hook": lambda: _timed_ms(
                hook, payload("SessionStart", source="startup"), project, env
            ),
            "Stop hook": lambda: _timed_ms(hook, payload("Stop", stop_hook_active=False), project, env),
            "SessionEnd hook": lambda: _timed_ms(hook, payload("SessionEnd", reason="other"), project, env),
            "omray mcp to tools/list": lambda: mcp_listed_ms([omray, "mcp"], project, env),
        }
        return self.p50_ms(calls, runs)


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _timed_ms(argv: list[str], stdin: str, cwd: Path, env: dict[str, str]) -> float:
    return timed_ms(argv, stdin, cwd, env, check=False)


def rotated(round_no: int) -> list[str]:
    """The configurations in round ``round_no``'s order (each starts a round as often)."""
    shift = round_no % len(CONFIGS)
    return [*CONFIGS[shift:], *CONFIGS[:shift]]


# -------------------------------------------------------------------------------------- the run


def run_agent_turn_bench(
    agent_type: type[TurnAgent],
    program: Path,
    omray: str,
    turns: int,
    breakdown_turns: int,
    omray_home: Path | None = None,
) -> AgentTurnResult:
    """Time ``turns`` turns of every configuration with ``agent_type``'s CLI ``program``, interleaved
    (the order rotated every round, one warm-up round not counted), then the breakdown and each
    omray process alone."""
    version = cli_version(program)
    if agent_type.RUN_PARENT is not None:
        agent_type.RUN_PARENT.mkdir(parents=True, exist_ok=True)
    run_dir = tempfile.TemporaryDirectory(prefix=agent_type.RUN_PREFIX, dir=agent_type.RUN_PARENT)
    with run_dir as tmp, MockModelServer() as mock:
        root = Path(tmp).resolve()
        agent = agent_type(program, root, omray, mock.base_url, omray_home or root / "omray-home")
        times: dict[str, list[float]] = {config: [] for config in CONFIGS}
        lingering: dict[str, list[float]] = {config: [] for config in CONFIGS}
        load_start = os.getloadavg()[0]
        for round_no in range(turns + 1):
            for config in rotated(round_no):
                elapsed = agent.turn(config)
                lingered = agent.settle(config)
                if round_no:  # the first round warms the caches of every configuration
                    times[config].append(elapsed)
                    lingering[config].append(lingered)
                time.sleep(TURN_SPACING_S)
        load_end = os.getloadavg()[0]
        phases: dict[str, list[object]] = {config: [] for config in CONFIGS}
        for round_no in range(breakdown_turns):
            for config in rotated(round_no):
                phases[config].append(agent.instrumented_turn(config))
                time.sleep(TURN_SPACING_S)
        alone = {**agent.process_times(omray, max(3, breakdown_turns)), **agent.ran_on(lingering)}
        requests = mock.requests(agent_type.API)
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
        breakdown={config: median_phases(agent_type.PHASES, seen) for config, seen in phases.items()},
        processes_ms=alone,
        dispatcher_after_turn_ms=round(
            percentile([ms for config in agent_type.LINGERING for ms in lingering[config]], 0.5), 1
        ),
        model_requests=requests,
    )
