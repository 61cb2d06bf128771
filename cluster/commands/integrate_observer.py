"""``omray integrate ... --observer claude|codex|builtin``: the project's model in one command, and
what ``--check`` says about an agent-login Observer.

:func:`with_model` is the pure edit: the ``observational_memory.model`` of a settings text set to a
model, comments and layout kept (the value's span replaced, or one ``model:`` line added at the
top of the block). The Observer, Reflector and Dropper all run on that one model. The choices
(:data:`OBSERVER_MODELS`) are small models: every call is a turn on the user's plan.

For ``--check``, :func:`probe_cli` finds the CLI (path, ``--version``) and asks it whether it is
logged in (``claude auth status``, ``codex login status``: no model call, nothing paid); its
output is read for that answer only and never shown. :func:`cost_finding` reads the project's
memory database (read-only) for the tokens its Observer, Reflector and Dropper spent per user
turn, and says what 100 turns cost at that rate (money when ``prices`` covers the model); with no
measured turn yet it says so instead of guessing.
"""

from __future__ import annotations

import enum
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from cluster.commands.integrate_files import SettingsFileError, read_settings_text
from cluster.commands.integrate_finding import Finding
from protocol.errors import OmrayError
from protocol.settings import BUILTIN_MODEL, OmSettings

BLOCK_NAME = "observational_memory"
"""The settings block the model is written in."""
PROBE_TIMEOUT_S = 20.0
"""How long one ``--version`` or login-status run of a CLI may take."""
USER_TURN_EVENT = "agent_command_applied"
"""The transcript event of a user message: one turn."""
_METHOD = re.compile(r"[A-Za-z0-9._-]{1,40}")
"""What an ``authMethod`` shown must look like (``claude.ai``, ``api_key``): a name, nothing else."""


class Observer(enum.StrEnum):
    """Models ``--observer`` writes (``builtin``: back to the offline model)."""

    CLAUDE = "claude"
    CODEX = "codex"
    BUILTIN = "builtin"


OBSERVER_MODELS: Mapping[Observer, str] = {
    Observer.CLAUDE: "claude-code/haiku",
    Observer.CODEX: "codex/gpt-5-mini",
    Observer.BUILTIN: BUILTIN_MODEL,
}
"""The model each ``--observer`` choice writes."""


# ------------------------------------------------------------------------------- the settings edit


def _get(node: yaml.Node, key: str) -> tuple[yaml.Node, yaml.Node] | None:
    if not isinstance(node, yaml.MappingNode):
        return None
    for key_node, value_node in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.value == key:
            return key_node, value_node
    return None


def _block_node(root: yaml.Node, shared: bool) -> yaml.Node | None:
    """The node of the ``observational_memory`` block in a document (``None``: no block there)."""
    extensions = _get(root, "extensions")
    if extensions is not None or shared:
        settings = _get(extensions[1], "settings") if extensions is not None else None
        found = _get(settings[1], BLOCK_NAME) if settings is not None else None
        if found is None:
            found = _get(root, BLOCK_NAME)
        return found[1] if found is not None else None
    found = _get(root, BLOCK_NAME)
    return found[1] if found is not None else root


def with_model(text: str, model: str, shared: bool = False) -> str:
    """``text`` (a settings file, '' for none) with ``observational_memory.model`` set to ``model``.

    :class:`SettingsFileError` when the place cannot be edited safely (a Hatfield file without the
    block, a block that is not a mapping, a ``model`` that is not a plain value): nothing is written.
    """
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader) if text.strip() else None
    except yaml.YAMLError:
        raise SettingsFileError("the settings file is not valid YAML (nothing was written)") from None
    if root is None:
        if shared:
            raise SettingsFileError(
                f"the Hatfield settings file has no {BLOCK_NAME} block; add "
                f"`{BLOCK_NAME}: {{model: {model}}}` under extensions.settings (nothing was written)"
            )
        lead = text if not text or text.endswith("\n") else text + "\n"
        return f"{lead}{BLOCK_NAME}:\n  model: {model}\n"
    block = _block_node(root, shared)
    if block is None or not isinstance(block, yaml.MappingNode):
        raise SettingsFileError(
            f"cannot find a {BLOCK_NAME} mapping to write the model in; set "
            f"{BLOCK_NAME}.model: {model} by hand (nothing was written)"
        )
    found = _get(block, "model")
    if found is not None:
        value = found[1]
        if not isinstance(value, yaml.ScalarNode) or value.tag != "tag:yaml.org,2002:str":
            raise SettingsFileError(
                f"{BLOCK_NAME}.model is not a plain value; set it to {model} by hand (nothing was written)"
            )
        if value.value == model:
            return text
        return text[: value.start_mark.index] + model + text[value.end_mark.index :]
    start = block.start_mark.index
    if block.flow_style:  # `{...}`: the model goes first inside the braces
        inner = f"model: {model}, " if block.value else f"model: {model}"
        return text[: start + 1] + inner + text[start + 1 :]
    first_key = block.value[0][0]
    indent = " " * first_key.start_mark.column
    at = first_key.start_mark.index
    return text[:at] + f"model: {model}\n{indent}" + text[at:]


def observer_edit(project: Path, observer: Observer) -> tuple[Path, str, str]:
    """``(path, before, after)`` of the settings file in effect for ``project`` (``omray.yaml`` when
    there is none) with the ``observer``'s model; the result is read back to be sure it took."""
    from persistence.settings.file import find_settings_file, is_hatfield_file, load_settings
    from persistence.settings.parse import extract_om_block, settings_from_mapping

    path = find_settings_file(project) or project / "omray.yaml"
    before = read_settings_text(path)
    shared = is_hatfield_file(path)
    if before.strip():
        load_settings(path, cwd=project)  # a settings error (typed) leaves the file as it is
    model = OBSERVER_MODELS[observer]
    after = with_model(before, model, shared)
    try:
        written = settings_from_mapping(extract_om_block(yaml.safe_load(after) or {}, shared=shared))
    except (OmrayError, yaml.YAMLError):
        written = None
    if written is None or written.model != model:
        raise SettingsFileError(
            f"could not place {BLOCK_NAME}.model in {str(path)!r}; set it to {model} by hand "
            "(nothing was written)"
        )
    return path, before, after


# --------------------------------------------------------------------------------- the CLI's login


ProbeRun = Callable[[Sequence[str]], "tuple[int, str] | None"]
"""Runs one argv, returns ``(exit status, stdout + stderr)``; ``None`` when it could not run."""


def run_probe(argv: Sequence[str]) -> tuple[int, str] | None:
    """One short run of a CLI from a scratch directory, with omray's hook guard set; never raises."""
    from actors.models.claude_cli import cli_env

    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            cwd=tempfile.gettempdir(),
            env=cli_env(os.environ),
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return done.returncode, (done.stdout or "") + (done.stderr or "")


@dataclass(frozen=True)
class CliProbe:
    """What ``--check`` found about an agent's CLI."""

    path: str | None
    """Where it is (``None``: not found on ``PATH``)."""
    version: str | None = None
    """The first line of ``--version`` (printable, short), if it answered."""
    logged_in: bool | None = None
    """Whether it has a login (``None``: it could not tell)."""
    method: str | None = None
    """How it is logged in, when it says (``claude``'s ``authMethod``)."""


def _short(text: str) -> str | None:
    line = text.strip().splitlines()[0].strip() if text.strip() else ""
    return line[:80] if line and line.isprintable() else None


def _claude_login(answer: tuple[int, str] | None) -> tuple[bool | None, str | None]:
    if answer is None:
        return None, None
    try:
        status = json.loads(answer[1])
    except ValueError:
        status = None
    if isinstance(status, dict) and isinstance(status.get("loggedIn"), bool):
        method = status.get("authMethod")
        shown = method if isinstance(method, str) and _METHOD.fullmatch(method) else None
        return status["loggedIn"], shown
    return None, None


def _codex_login(answer: tuple[int, str] | None) -> bool | None:
    if answer is None:
        return None
    if answer[0] == 0 and "logged in" in answer[1].lower() and "not logged in" not in answer[1].lower():
        return True
    return False if "not logged in" in answer[1].lower() else None


def find_cli(command: str) -> str | None:
    """Where ``command`` is on this shell's ``PATH`` (the runtime's workers look on theirs)."""
    return shutil.which(command)


def probe_cli(
    kind: str,
    command: str,
    run: ProbeRun | None = None,
    which: Callable[[str], str | None] | None = None,
) -> CliProbe:
    """Find ``command`` and ask it its version and whether it is logged in (``kind``: ``claude_code``
    or ``codex``); no model call."""
    path = (which or find_cli)(command)
    run = run or run_probe
    if path is None:
        return CliProbe(None)
    version_answer = run([path, "--version"])
    version = _short(version_answer[1]) if version_answer is not None and version_answer[0] == 0 else None
    if kind == "claude_code":
        logged_in, method = _claude_login(run([path, "auth", "status"]))
        return CliProbe(path, version, logged_in, method)
    return CliProbe(path, version, _codex_login(run([path, "login", "status"])))


LOGIN_HINT = {
    "claude_code": "run `claude` and `/login` (or `claude setup-token`)",
    "codex": "run `codex login`",
}


def cli_findings(model: str, kind: str, probe: CliProbe) -> list[Finding]:
    """The ``model`` and ``login`` findings of an agent-login ``model`` from its CLI's ``probe``."""
    if probe.path is None:
        package = "@anthropic-ai/claude-code" if kind == "claude_code" else "@openai/codex"
        return [
            Finding(
                False,
                "model",
                f"{model}: its CLI is not found on PATH; `npm install -g {package}`, then log in as the "
                "user who runs `omray up`",
            )
        ]
    version = probe.version or "version unknown"
    findings = [
        Finding(True, "model", f"{model} runs {probe.path}, {version} (each call is a turn on your plan)")
    ]
    hint = LOGIN_HINT.get(kind, "log the CLI in")
    if probe.logged_in is True:
        how = f" ({probe.method})" if probe.method else ""
        findings.append(Finding(True, "login", f"logged in{how}, as seen from this shell"))
    elif probe.logged_in is False:
        findings.append(Finding(False, "login", f"not logged in: {hint} as the user who runs `omray up`"))
    else:
        findings.append(
            Finding(True, "login", f"the CLI did not say whether it is logged in; if not, {hint}", note=True)
        )
    return findings


# ------------------------------------------------------------------------------------ measured cost


@dataclass(frozen=True)
class MeasuredRate:
    """What the project's memory spent on its model, and over how many user turns."""

    turns: int
    requests: int
    prompt_tokens: int
    cached_prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None = None
    """What the provider reported those requests cost, in US dollars (``None``: it reported nothing)."""


def measured_rate(database: Path, model: str) -> MeasuredRate | None:
    """Token usage of ``model`` in ``database`` and the user turns of the sessions it was spent on
    (read-only; ``None`` when the database or its tables are not there)."""
    if not database.is_file():
        return None
    try:
        conn = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True, timeout=2.0)
    except sqlite3.Error:
        return None
    try:
        columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(omray_token_usage)")}
        cost = "SUM(cost_usd)" if "cost_usd" in columns else "NULL"  # omray_017_budget
        usage = conn.execute(
            "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(prompt_tokens), 0),"
            f" COALESCE(SUM(cached_prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), {cost}"
            " FROM omray_token_usage WHERE model = ?",
            (model,),
        ).fetchone()
        turns = conn.execute(
            "SELECT COUNT(*) FROM omray_transcript WHERE event_type = ? AND run_id IN"
            " (SELECT DISTINCT run_id FROM omray_token_usage WHERE model = ?)",
            (USER_TURN_EVENT, model),
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    requests, prompt, cached, completion, cost_usd = usage
    reported = None if cost_usd is None else float(cost_usd)
    return MeasuredRate(int(turns[0]), int(requests), int(prompt), int(cached), int(completion), reported)


def _thousands(tokens: float) -> str:
    return f"{tokens / 1000:.0f}k" if tokens >= 10_000 else f"{tokens:,.0f}"


def cost_finding(settings: OmSettings, model: str, rate: MeasuredRate | None) -> Finding:
    """What 100 user turns cost at the ``rate`` measured for ``model`` (a note: never a failure)."""
    if rate is None or rate.turns == 0 or rate.requests == 0:
        return Finding(
            True,
            "cost",
            f"no measured rate for {model} yet (no observed turn on it in this project's memory); "
            "`omray integrate ... --check` says it after the first observed session",
            note=True,
        )
    per = 100 / rate.turns
    calls = rate.requests * per
    prompt, cached, completion = (
        rate.prompt_tokens * per,
        rate.cached_prompt_tokens * per,
        rate.completion_tokens * per,
    )
    detail = (
        f"per 100 turns about {calls:.0f} model calls, {_thousands(prompt)} prompt "
        f"({_thousands(cached)} cached) and {_thousands(completion)} completion tokens"
    )
    price = settings.prices.models.get(model) if settings.prices is not None else None
    if rate.cost_usd is not None:
        detail += f", {rate.cost_usd * per:.2f} USD as the CLI reported it"
    elif price is not None and settings.prices is not None:
        money = price.cost(round(prompt), round(min(cached, prompt)), round(completion))
        detail += f", {money:.2f} {settings.prices.currency}"
    else:
        detail += " (no price for it in prices; on a subscription, calls draw on its allowance)"
    daily = settings.budget.daily_tokens
    if daily is not None and prompt + completion > 0:
        turns_a_day = daily / ((prompt + completion) / 100)
        detail += (
            f"; the daily budget (budget.daily_tokens {daily:,}) lasts about {turns_a_day:,.0f} turns a day"
        )
    return Finding(True, "cost", f"{detail}; measured over {rate.turns} turns", note=True)


def observer_findings(
    settings: OmSettings, project: Path, model: str, kind: str, command: str, run: ProbeRun | None = None
) -> list[Finding]:
    """Everything ``--check`` says about an agent-login ``model``: its CLI, its login, its cost."""
    findings = cli_findings(model, kind, probe_cli(kind, command, run))
    rate = measured_rate(Path(settings.database_path(str(project))), model)
    findings.append(cost_finding(settings, model, rate))
    return findings


def observer_preview(project: Path, observer: Observer, run: ProbeRun | None = None) -> list[Finding]:
    """``--check --observer``: when the settings do not use the ``observer``'s model yet, a ``todo``
    saying how to switch, and what its CLI, login and cost would be (nothing is written)."""
    from persistence.settings.file import load_settings
    from protocol.errors import clause

    target = OBSERVER_MODELS[observer]
    try:
        settings = load_settings(cwd=project)
    except OmrayError as exc:
        return [Finding(False, "observer", f"{clause(exc)}; fix the settings first")]
    if settings.model == target:
        return []
    current = settings.model or BUILTIN_MODEL
    findings = [
        Finding(
            False,
            "observer",
            f"the settings observe with {current}; run without --check to switch to {target}",
        )
    ]
    if observer is Observer.BUILTIN:
        return findings
    provider = settings.provider_for(target)
    command = provider.command or provider.name
    findings.extend(observer_findings(settings, project, target, provider.kind, command, run))
    return findings
