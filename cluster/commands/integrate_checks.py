"""The checks of ``omray integrate``: what the agent will need, each a :class:`Finding` that says
what was found and, when it is not ready, what to do (settings, model and endpoint, a running
runtime, Claude Code's workspace trust). ``--check`` runs them alone; the MCP HTTP check is in
:mod:`.integrate_http`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import typer


@dataclass(frozen=True)
class Finding:
    """One thing the agent will need, and whether it is there."""

    ok: bool
    """Whether it is ready."""
    what: str
    """What was checked."""
    detail: str
    """What was found; when not ready, what to do."""


def check_settings(project: Path) -> list[Finding]:
    """The project's settings as the hooks and the runtime will read them: file, model, endpoint."""
    from persistence.settings_file import find_settings_file, load_settings
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
        if provider.base_url and not endpoint_answers(provider.base_url):
            findings.append(
                Finding(
                    False,
                    "model endpoint",
                    f"{provider.base_url} does not answer from here; is the server up?",
                )
            )
    semantic = "hybrid (semantic) search on" if settings.semantic is not None else "exact search only"
    findings.append(Finding(True, "memory", f"{settings.database_path(str(project))} ({semantic})"))
    return findings


def endpoint_answers(base_url: str, timeout_s: float = 3.0) -> bool:
    """Whether anything answers HTTP at ``base_url`` (any status: a 401 answers too)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/models", timeout=timeout_s):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


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


def claude_state_files() -> list[Path]:
    """Where Claude Code keeps its per-project state (``.claude.json``): in ``$CLAUDE_CONFIG_DIR``
    when that is set, else the home folder; both are read, the configured one first."""
    files: list[Path] = []
    config_dir = os.environ.get("CLAUDE_CONFIG_DIR")
    if config_dir:
        files.append(Path(config_dir).expanduser() / ".claude.json")
    files.append(Path.home() / ".claude.json")
    return files


def check_claude_trust(project: Path, state_file: Path | None = None) -> Finding:
    """Whether Claude Code trusts the project (it ignores a project's permissions until it does)."""
    for path in [state_file] if state_file is not None else claude_state_files():
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
        f"run `claude` in {project} once and accept its trust dialog: until then Claude Code ignores the "
        "project's tool permissions (memory tools ask first, and `claude -p` denies them)",
    )


def print_findings(findings: Sequence[Finding]) -> None:
    """One line per finding: ``ok`` or ``todo``."""
    for finding in findings:
        typer.echo(f"  {'ok  ' if finding.ok else 'todo'}  {finding.what}: {finding.detail}")
