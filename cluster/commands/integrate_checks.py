"""The checks of ``omray integrate``: what the agent will need, each a :class:`Finding` that says
what was found and, when it is not ready, what to do (settings, model and endpoint, a running
runtime, Claude Code's workspace trust). ``--check`` runs them alone; the MCP HTTP check is in
:mod:`.integrate_http`, an agent-login model's CLI, login and measured cost in
:mod:`.integrate_observer`.

The endpoint check asks ``<base_url>/models`` once (:func:`read_models`, the only I/O) and
:func:`model_findings` judges the answer: the configured model missing from a listing is a
``todo`` naming the nearest listed ids; an endpoint that serves no listing is a ``note`` (the
name could not be checked), never a failure.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import typer

from cluster.commands.integrate_finding import Finding as Finding  # re-exported: callers import it here


def check_settings(project: Path) -> list[Finding]:
    """The project's settings as the hooks and the runtime will read them: file, model, endpoint."""
    from persistence.settings.file import find_settings_file, load_settings
    from protocol.errors import OmrayError, clause

    found = find_settings_file(project)
    try:
        settings = load_settings(cwd=project)
    except OmrayError as exc:
        return [
            Finding(False, "settings", f"{clause(exc)}; fix it, then run `omray integrate ... --check` again")
        ]
    where = str(found) if found is not None else "no settings file: omray's offline defaults"
    findings = [Finding(True, "settings", where)]
    try:
        model = settings.require_model()
        provider = settings.provider_for(model)
    except OmrayError as exc:
        return [*findings, Finding(False, "model", str(exc))]
    if provider.kind == "builtin":
        findings.append(Finding(True, "model", f"{model} (runs offline, needs no API key)"))
    elif provider.kind in ("claude_code", "codex"):
        from cluster.commands.integrate_observer import observer_findings

        command = provider.command or provider.name
        findings.extend(observer_findings(settings, project, model, provider.kind, command))
    else:
        key = provider.api_key_env
        if key and not os.environ.get(key, "").strip():
            findings.append(
                Finding(
                    False,
                    "model",
                    f"{model}: ${key} is not set in this shell; export it where `omray up` runs",
                )
            )
        else:
            findings.append(Finding(True, "model", f"{model} at {provider.base_url}"))
        if provider.base_url:
            key_value = os.environ.get(key, "").strip() if key else ""
            answer = read_models(provider.base_url, key_value or NO_KEY_PLACEHOLDER)
            findings.extend(model_findings(model, provider.base_url, answer, key, bool(key_value)))
    semantic = "hybrid (semantic) search on" if settings.semantic is not None else "exact search only"
    findings.append(Finding(True, "memory", f"{settings.database_path(str(project))} ({semantic})"))
    return findings


NO_KEY_PLACEHOLDER = "sk-no-key"
"""Key sent when the provider names no key variable (what the workers send; ``actors.models.chat``)."""
MAX_LISTING_BYTES = 8 * 1024 * 1024
"""Largest ``/models`` answer read (larger is taken as no listing)."""
MAX_ID_CHARS = 200
"""Longest listed model id kept (longer ones, or ids with control characters, are skipped)."""


@dataclass(frozen=True)
class ModelsAnswer:
    """What ``GET <base_url>/models`` answered."""

    status: int | None
    """HTTP status; ``None`` when nothing answered."""
    ids: tuple[str, ...] | None = None
    """The listed model ids (an OpenAI-shaped ``{"data": [{"id": ...}]}``); ``None``: no listing."""


def read_models(base_url: str, api_key: str, timeout_s: float = 3.0) -> ModelsAnswer:
    """``GET <base_url>/models`` with the key the workers send; never raises. A redirect is not
    followed (urllib would carry the key to wherever it points): its status is the answer."""
    import urllib.error
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    request = urllib.request.Request(
        base_url.rstrip("/") + "/models",
        headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
    )
    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=timeout_s) as answer:
            status, body = answer.status, answer.read(MAX_LISTING_BYTES + 1)
    except urllib.error.HTTPError as error:
        return ModelsAnswer(error.code)
    except (urllib.error.URLError, OSError, ValueError):
        return ModelsAnswer(None)
    return ModelsAnswer(status, listed_ids(body) if len(body) <= MAX_LISTING_BYTES else None)


def listed_ids(body: bytes) -> tuple[str, ...] | None:
    """The model ids of an OpenAI-shaped listing, or ``None`` when ``body`` is not one."""
    try:
        parsed = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    data = parsed.get("data") if isinstance(parsed, dict) else None
    if not isinstance(data, list):
        return None
    ids = (entry.get("id") for entry in data if isinstance(entry, dict))
    return tuple(i for i in ids if isinstance(i, str) and 0 < len(i) <= MAX_ID_CHARS and i.isprintable())


def model_findings(
    model: str, base_url: str, answer: ModelsAnswer, key_env: str | None, key_set: bool
) -> list[Finding]:
    """What the ``/models`` ``answer`` of ``base_url`` says about ``model`` (``provider/name``).

    Nothing answering, a refused key, or a listing without the name are ``todo``; a listing is
    matched on the name the endpoint is sent (after the first ``/``), where a name without a tag
    also matches ``<name>:latest`` (Ollama serves it under both). No listing (``/models`` not
    served, or not OpenAI-shaped) is a ``note``. A refusal while the key is unset adds nothing:
    the model finding already says to export it.
    """
    what = "model endpoint"
    if answer.status is None:
        return [Finding(False, what, f"{base_url} does not answer from here; is the server up?")]
    if answer.status in (401, 403):
        if key_env and not key_set:
            return []
        sent = f"the key in ${key_env}" if key_env else "a request without a key (no api_key_env)"
        return [
            Finding(
                False,
                what,
                f"{base_url} refuses {sent} (HTTP {answer.status}); the model is called the same way: "
                "check the key (or set the provider's api_key_env)",
            )
        ]
    name = model.partition("/")[2]
    if answer.ids is None:
        served = (
            "does not list models" if answer.status == 200 else f"serves no /models (HTTP {answer.status})"
        )
        return [Finding(True, what, f"{base_url} {served}; {name!r} could not be checked there", note=True)]
    if name in answer.ids or (":" not in name and f"{name}:latest" in answer.ids):
        return [Finding(True, what, f"{base_url} lists {name!r}")]
    if not answer.ids:
        return [Finding(False, what, f"{base_url} lists no models, so not {name!r}; load or pull it there")]
    nearest = difflib.get_close_matches(name, answer.ids, n=3, cutoff=0.3) or sorted(answer.ids)[:3]
    provider = model.partition("/")[0]
    return [
        Finding(
            False,
            what,
            f"{base_url} does not list {name!r} ({len(answer.ids)} listed; nearest: "
            f"{', '.join(repr(i) for i in nearest)}): set observational_memory.model to "
            f"{provider}/<a listed id>, or make the server serve {name!r}",
        )
    ]


def check_runtime(project: Path) -> Finding:
    """Whether a memory runtime answers, as the hooks' dispatcher will look for it."""
    from cluster.client import connect
    from cluster.naming import omray_home
    from protocol.errors import OmrayError, RuntimeNotRunningError

    home = omray_home()
    try:
        client = connect(cwd=project, prefix=os.environ.get("OMRAY_PREFIX") or "omray")
    except RuntimeNotRunningError as exc:
        if type(exc) is not RuntimeNotRunningError:  # a token problem: its message says what to do
            return Finding(False, "runtime", str(exc))
        return Finding(
            False,
            "runtime",
            f"not running: start it with `omray up` (OMRAY_HOME={home}; the agent must see the same)",
        )
    except OmrayError as exc:
        return Finding(False, "runtime", str(exc))
    try:
        client.status()
    except OmrayError as exc:
        return Finding(False, "runtime", f"does not answer ({type(exc).__name__}); `omray status` says more")
    finally:
        client.close()
    return Finding(True, "runtime", f"running (OMRAY_HOME={home}; the agent must see the same)")


def claude_state_file() -> Path:
    """Where Claude Code keeps its per-project state, trust included: ``$CLAUDE_CONFIG_DIR/.claude.json``
    when that variable is set (Claude Code then never reads ``~/.claude.json``), else ``~/.claude.json``."""
    config_dir = os.environ.get("CLAUDE_CONFIG_DIR", "").strip()
    base = Path(config_dir).expanduser() if config_dir else Path.home()
    return base / ".claude.json"


def check_claude_trust(project: Path, state_file: Path | None = None) -> Finding:
    """Whether Claude Code trusts the project (it ignores a project's permissions until it does),
    as its state file (:func:`claude_state_file`, or ``state_file``) records it."""
    path = state_file if state_file is not None else claude_state_file()
    try:
        projects = json.loads(path.read_text(encoding="utf-8")).get("projects", {})
    except (OSError, ValueError, AttributeError):
        projects = {}
    for folder in (project, *project.parents):
        entry = projects.get(str(folder)) if isinstance(projects, dict) else None
        if isinstance(entry, dict) and entry.get("hasTrustDialogAccepted") is True:
            return Finding(True, "workspace trust", f"Claude Code trusts {folder} ({path})")
    return Finding(
        False,
        "workspace trust",
        f"not recorded in {path}: run `claude` in {project} once and accept its trust dialog (with the "
        "same CLAUDE_CONFIG_DIR as here); until then Claude Code ignores the project's tool permissions "
        "(memory tools ask first, and `claude -p` denies them)",
    )


def print_findings(findings: Sequence[Finding]) -> None:
    """One line per finding: ``ok``, ``note`` (not a failure) or ``todo``."""
    for finding in findings:
        mark = "note" if finding.note else "ok  " if finding.ok else "todo"
        typer.echo(f"  {mark}  {finding.what}: {finding.detail}")
