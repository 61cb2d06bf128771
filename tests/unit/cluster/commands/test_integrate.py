"""`omray integrate` on temporary settings files that already hold other hooks and servers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tomlkit
from typer.testing import CliRunner

from cluster.commands import integrate
from cluster.commands.cli import app
from cluster.commands.integrate import (
    CLAUDE_CODE_HOOKS,
    merge_claude_approvals,
    merge_claude_hooks,
    merge_codex_notify,
    remove_claude_approvals,
    remove_claude_hooks,
    remove_codex_notify,
)
from cluster.commands.integrate_checks import Finding, check_claude_trust

HOOK = "omray hook claude-code"
THEIR_SETTINGS = {
    "permissions": {"allow": ["Bash(npm test)"]},
    "hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}],
        "SessionStart": [
            {"matcher": "startup", "hooks": [{"type": "command", "command": "cat NOTES.md"}]},
        ],
    },
}
THEIR_MCP = {"mcpServers": {"github": {"command": "gh-mcp", "args": ["--stdio"]}}}
THEIR_CODEX = """# my Codex setup
model = "o4-mini"
notify = ["python3", "/home/me/notify.py"]

[mcp_servers.docs]
command = "docs-server"
args = ["--port", "0"]

[profiles.fast]
model = "o4-mini"
"""


def test_claude_hooks_merge_keeps_theirs_is_idempotent_and_removes_cleanly() -> None:
    merged = merge_claude_hooks(THEIR_SETTINGS, HOOK)
    assert merge_claude_hooks(merged, HOOK) == merged
    assert merged["permissions"] == THEIR_SETTINGS["permissions"]
    assert merged["hooks"]["PreToolUse"] == THEIR_SETTINGS["hooks"]["PreToolUse"]
    assert merged["hooks"]["Stop"][0] == THEIR_SETTINGS["hooks"]["Stop"][0]
    for event, matcher in CLAUDE_CODE_HOOKS:
        ours = [g for g in merged["hooks"][event] if any(h["command"] == HOOK for h in g["hooks"])]
        assert len(ours) == 1 and ours[0].get("matcher") == matcher
    assert remove_claude_hooks(merged) == THEIR_SETTINGS
    assert remove_claude_hooks(merge_claude_hooks({}, HOOK)) == {}


def test_an_omray_hook_written_with_another_path_is_updated_not_doubled() -> None:
    old = merge_claude_hooks(THEIR_SETTINGS, "/old/venv/bin/omray hook claude-code")
    merged = merge_claude_hooks(old, HOOK)
    assert merged == merge_claude_hooks(THEIR_SETTINGS, HOOK)
    assert remove_claude_hooks(old) == THEIR_SETTINGS
    moved = merge_codex_notify(
        ["/old/bin/omray", "hook", "codex", "--", "notify.py"], ["omray", "hook", "codex"]
    )
    assert moved == ["omray", "hook", "codex", "--", "notify.py"]


def test_remove_keeps_other_hooks_in_a_shared_group() -> None:
    shared = {
        "hooks": {
            "Stop": [{"hooks": [{"type": "command", "command": HOOK}, {"type": "command", "command": "x"}]}]
        }
    }
    assert remove_claude_hooks(shared) == {
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x"}]}]}
    }


def test_codex_notify_chains_an_existing_program_and_restores_it() -> None:
    hook = ["omray", "hook", "codex"]
    theirs = ["python3", "/home/me/notify.py"]
    chained = merge_codex_notify(theirs, hook)
    assert chained == [*hook, "--", *theirs]
    assert merge_codex_notify(chained, hook) == chained
    assert remove_codex_notify(chained) == theirs
    assert merge_codex_notify(None, hook) == hook and remove_codex_notify(hook) is None
    assert remove_codex_notify(theirs) == theirs


@pytest.fixture(autouse=True)
def no_runtime_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # No Ray in unit tests: the runtime check answers as a stopped runtime would.
    monkeypatch.setattr(
        integrate,
        "check_runtime",
        lambda project: Finding(False, "runtime", "not running: start it with `omray up`"),
    )


def test_approvals_merge_next_to_theirs_and_remove_cleanly() -> None:
    merged = merge_claude_approvals(THEIR_SETTINGS)
    assert merged["enabledMcpjsonServers"] == ["omray"]
    assert merged["permissions"]["allow"] == ["Bash(npm test)", "mcp__omray"]
    assert merge_claude_approvals(merged) == merged
    assert remove_claude_approvals(merged) == THEIR_SETTINGS
    assert remove_claude_approvals(merge_claude_approvals({})) == {}


def test_an_older_session_start_hook_with_a_matcher_moves_to_every_source() -> None:
    older = {
        "hooks": {
            "SessionStart": [
                {
                    "matcher": "compact|resume",
                    "hooks": [{"type": "command", "command": "/old/omray hook claude-code"}],
                },
                {"matcher": "startup", "hooks": [{"type": "command", "command": "cat NOTES.md"}]},
            ]
        }
    }
    merged = merge_claude_hooks(older, HOOK)
    assert merged["hooks"]["SessionStart"] == [
        {"matcher": "startup", "hooks": [{"type": "command", "command": "cat NOTES.md"}]},
        {"hooks": [{"type": "command", "command": HOOK, "timeout": integrate.HOOK_TIMEOUT_S}]},
    ]
    assert merge_claude_hooks(merged, HOOK) == merged


def test_the_command_written_is_an_absolute_path_to_this_omray(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Claude Code started from a shell without the virtual environment must find the same omray.
    script = tmp_path / "venv" / "bin" / "omray"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.chdir(tmp_path / "venv")
    monkeypatch.setattr("sys.argv", ["bin/omray", "integrate"])
    assert integrate.omray_command() == str(script)
    monkeypatch.setattr("sys.argv", ["pytest"])
    monkeypatch.setattr("sys.executable", str(script.parent / "python"))
    assert integrate.omray_command() == str(script)


def test_claude_code_workspace_trust_is_read_from_its_state(tmp_path: Path) -> None:
    state = tmp_path / ".claude.json"
    project = tmp_path / "work" / "proj"
    assert not check_claude_trust(project, state).ok
    state.write_text(json.dumps({"projects": {str(tmp_path / "work"): {"hasTrustDialogAccepted": True}}}))
    assert check_claude_trust(project, state).ok
    state.write_text(json.dumps({"projects": {str(project): {"hasTrustDialogAccepted": False}}}))
    finding = check_claude_trust(project, state)
    assert not finding.ok and "trust dialog" in finding.detail


def test_workspace_trust_is_read_from_claude_config_dir_when_it_is_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``CLAUDE_CONFIG_DIR`` set, Claude Code keeps its state there (issue 40 item 4)."""
    home, config = tmp_path / "home", tmp_path / "claude-config"
    home.mkdir()
    config.mkdir()
    project = tmp_path / "proj"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    assert not check_claude_trust(project).ok
    (config / ".claude.json").write_text(
        json.dumps({"projects": {str(project): {"hasTrustDialogAccepted": True}}})
    )
    finding = check_claude_trust(project)
    assert finding.ok and str(config) in finding.detail
    monkeypatch.delenv("CLAUDE_CONFIG_DIR")
    assert not check_claude_trust(project).ok  # ~/.claude.json has no trust for it
    (home / ".claude.json").write_text(
        json.dumps({"projects": {str(project): {"hasTrustDialogAccepted": True}}})
    )
    assert check_claude_trust(project).ok


def _claude_project(tmp_path: Path) -> Path:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(THEIR_SETTINGS, indent=4))
    (tmp_path / ".mcp.json").write_text(json.dumps(THEIR_MCP))
    return tmp_path


def test_cli_claude_code_dry_run_apply_again_and_remove(tmp_path: Path) -> None:
    project = _claude_project(tmp_path)
    before = {p: p.read_text() for p in (project / ".claude" / "settings.json", project / ".mcp.json")}
    runner = CliRunner()
    dry = runner.invoke(app, ["integrate", "claude-code", "--project", str(project), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "+++" in dry.output and "hook claude-code" in dry.output and '"omray"' in dry.output
    assert {p: p.read_text() for p in before} == before  # dry run wrote nothing

    applied = runner.invoke(app, ["integrate", "claude-code", "--project", str(project)])
    assert applied.exit_code == 0, applied.output
    assert applied.output.count(": updated") == 2
    assert "todo  runtime: not running" in applied.output and "workspace trust" in applied.output
    settings = json.loads((project / ".claude" / "settings.json").read_text())
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert servers["github"] == THEIR_MCP["mcpServers"]["github"] and servers["omray"]["args"] == ["mcp"]
    assert Path(servers["omray"]["command"]).is_absolute()
    assert settings["hooks"]["PreToolUse"] == THEIR_SETTINGS["hooks"]["PreToolUse"]
    assert settings["enabledMcpjsonServers"] == ["omray"] and "mcp__omray" in settings["permissions"]["allow"]
    again = runner.invoke(app, ["integrate", "claude-code", "--project", str(project)])
    assert again.output.count("unchanged") == 2

    removed = runner.invoke(app, ["integrate", "claude-code", "--project", str(project), "--remove"])
    assert removed.exit_code == 0, removed.output
    assert json.loads((project / ".claude" / "settings.json").read_text()) == THEIR_SETTINGS
    assert json.loads((project / ".mcp.json").read_text()) == THEIR_MCP


def test_cli_refuses_a_file_that_does_not_parse(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    (tmp_path / ".claude" / "settings.json").write_text("{not json")
    result = CliRunner().invoke(app, ["integrate", "claude-code", "--project", str(tmp_path)])
    assert result.exit_code == 2 and "not valid JSON" in result.output
    assert (tmp_path / ".claude" / "settings.json").read_text() == "{not json"
    assert not (tmp_path / ".mcp.json").exists()


def test_cli_codex_keeps_comments_servers_and_notify_and_removes_exactly(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(THEIR_CODEX)
    runner = CliRunner()
    applied = runner.invoke(app, ["integrate", "codex", "--codex-config", str(config)])
    assert applied.exit_code == 0, applied.output
    text = config.read_text()
    assert text.startswith("# my Codex setup\n")
    document = tomlkit.parse(text)
    assert document["mcp_servers"]["docs"]["command"] == "docs-server"
    assert document["mcp_servers"]["omray"]["args"] == ["mcp"]
    assert list(document["notify"])[-3:] == ["--", "python3", "/home/me/notify.py"]
    assert list(document["notify"])[1:3] == ["hook", "codex"]
    assert document["profiles"]["fast"]["model"] == "o4-mini"
    assert "unchanged" in runner.invoke(app, ["integrate", "codex", "--codex-config", str(config)]).output

    removed = runner.invoke(app, ["integrate", "codex", "--codex-config", str(config), "--remove"])
    assert removed.exit_code == 0, removed.output
    assert config.read_text() == THEIR_CODEX


def test_cli_fresh_files_are_created_and_checked(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["integrate", "claude-code", "--project", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.count(": created") == 2 and ": updated" not in result.output
    assert "ok    model: builtin/extractive" in result.output
    check = runner.invoke(app, ["integrate", "claude-code", "--project", str(tmp_path), "--check"])
    assert check.exit_code == 1 and "todo  runtime" in check.output
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  model: nowhere\n")
    check = runner.invoke(app, ["integrate", "claude-code", "--project", str(tmp_path), "--check"])
    assert check.exit_code == 1 and "todo  model" in check.output


def test_cli_codex_remove_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    for original in ('model = "o4-mini"\n', 'model = "x"\n\n[profiles.fast]\nmodel = "y"\n'):
        config.write_text(original)
        runner = CliRunner()
        runner.invoke(app, ["integrate", "codex", "--codex-config", str(config)])
        document = tomlkit.parse(config.read_text())
        assert document["mcp_servers"]["omray"]["default_tools_approval_mode"] == "approve"
        runner.invoke(app, ["integrate", "codex", "--codex-config", str(config), "--remove"])
        assert config.read_text() == original


def test_cli_codex_on_a_fresh_config(tmp_path: Path) -> None:
    config = tmp_path / "codex" / "config.toml"
    runner = CliRunner()
    project = tmp_path / "proj"
    result = runner.invoke(
        app, ["integrate", "codex", "--codex-config", str(config), "--project", str(project)]
    )
    assert result.exit_code == 0, result.output
    document = tomlkit.parse(config.read_text())
    assert list(document["notify"])[1:] == ["hook", "codex", "--project", str(project.resolve())]
    assert list(document["mcp_servers"]["omray"]["args"]) == ["mcp", "--project", str(project.resolve())]
    runner.invoke(
        app, ["integrate", "codex", "--codex-config", str(config), "--project", str(project), "--remove"]
    )
    assert not config.exists()


def test_cli_claude_code_http_entry_uses_the_token_helper_never_the_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 33: with --mcp-transport http the agent's entry carries the token (via a helper), so a
    server that requires it still serves the agent."""
    import shlex
    import subprocess
    import sys

    home = tmp_path / "omray-home"
    monkeypatch.setenv("OMRAY_HOME", str(home))
    project = _claude_project(tmp_path)
    runner = CliRunner()
    args = [
        "integrate",
        "claude-code",
        "--project",
        str(project),
        "--mcp-transport",
        "http",
        "--mcp-port",
        "9123",
    ]
    applied = runner.invoke(app, args)
    assert applied.exit_code == 0, applied.output
    token = (home / "auth" / "web.token").read_text().strip()
    servers = json.loads((project / ".mcp.json").read_text())["mcpServers"]
    assert servers["github"] == THEIR_MCP["mcpServers"]["github"]
    entry = servers["omray"]
    assert entry["type"] == "http" and entry["url"] == "http://127.0.0.1:9123/mcp"
    assert token not in (project / ".mcp.json").read_text() and token not in applied.output
    assert "omray mcp --transport http --port 9123" in applied.output
    # Claude Code runs the helper with a shell and reads a JSON object of headers from it
    words = shlex.split(entry["headersHelper"])
    assert Path(words[0]).is_absolute() and words[1:4] == ["mcp", "--auth-header", "--token-file"]
    printed = subprocess.run(
        [sys.executable, "-m", "cluster.commands.cli", *words[1:]],
        capture_output=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "OMRAY_HOME": "/nonexistent", "PYTHONPATH": str(Path.cwd())},
    )
    assert json.loads(printed.stdout) == {"Authorization": f"Bearer {token}"}
    assert runner.invoke(app, args).output.count("unchanged") == 2

    removed = runner.invoke(app, ["integrate", "claude-code", "--project", str(project), "--remove"])
    assert removed.exit_code == 0, removed.output
    assert json.loads((project / ".mcp.json").read_text()) == THEIR_MCP


def test_cli_codex_http_entry_holds_the_header_in_a_private_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import stat

    home = tmp_path / "omray-home"
    monkeypatch.setenv("OMRAY_HOME", str(home))
    config = tmp_path / "config.toml"
    config.write_text(THEIR_CODEX)
    os.chmod(config, 0o644)
    runner = CliRunner()
    args = ["integrate", "codex", "--codex-config", str(config), "--mcp-transport", "http"]
    dry = runner.invoke(app, [*args, "--dry-run"])
    token = (home / "auth" / "web.token").read_text().strip()
    assert dry.exit_code == 0 and "<token>" in dry.output and token not in dry.output
    applied = runner.invoke(app, args)
    assert applied.exit_code == 0, applied.output
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # it holds the token now
    server = tomlkit.parse(config.read_text())["mcp_servers"]["omray"]
    assert server["url"] == "http://127.0.0.1:8766/mcp" and "command" not in server
    assert dict(server["http_headers"]) == {"Authorization": f"Bearer {token}"}
    assert token not in applied.output
    removed = runner.invoke(app, ["integrate", "codex", "--codex-config", str(config), "--remove"])
    assert removed.exit_code == 0 and config.read_text() == THEIR_CODEX


def test_cli_refuses_a_port_that_is_not_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(
        app,
        [
            "integrate",
            "claude-code",
            "--project",
            str(tmp_path),
            "--mcp-transport",
            "http",
            "--mcp-port",
            "0",
        ],
    )
    assert result.exit_code == 2 and "--mcp-port" in result.output
    assert not (tmp_path / ".mcp.json").exists()


def test_a_settings_error_in_the_check_reads_as_one_clause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cluster.commands.integrate_checks import check_settings

    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    (tmp_path / "omray.yaml").write_text(
        "observational_memory:\n  pools:\n    observations_max_tokens: -5\n", encoding="utf-8"
    )
    (finding,) = check_settings(tmp_path)
    assert not finding.ok and "observations_max_tokens" in finding.detail
    assert ".;" not in finding.detail and "; fix it, then run" in finding.detail
