"""`omray integrate` on files it must not edit: valid JSON/TOML of another shape, non-JSON, odd
encodings, symlinks and FIFOs. Each is refused in one line (exit 2, no traceback) and left as it was;
``--remove`` takes out exactly what omray added."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
import tomlkit
from click.testing import Result
from typer.testing import CliRunner

from cluster.commands.cli import app

DEEP_JSON = b'{"a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

CLAUDE_SETTINGS_REFUSED: list[tuple[str, bytes, str]] = [
    ("hooks a list", b'{"hooks": []}', "'hooks' is a list"),
    ("hooks null", b'{"hooks": null}', "'hooks' is null"),
    ("hooks a string", b'{"hooks": "Stop"}', "'hooks' is a string"),
    ("an event an object", b'{"hooks": {"Stop": {}}}', "'hooks.Stop' is an object"),
    ("a group a number", b'{"hooks": {"Stop": [5]}}', "'hooks.Stop[0]' is a number"),
    ("inner hooks a string", b'{"hooks": {"SessionEnd": [{"hooks": "x"}]}}', "'hooks.SessionEnd[0].hooks'"),
    ("permissions a list", b'{"permissions": ["Bash"]}', "'permissions' is a list"),
    ("allow a string", b'{"permissions": {"allow": "Bash"}}', "'permissions.allow' is a string"),
    ("enabled servers a string", b'{"enabledMcpjsonServers": "github"}', "'enabledMcpjsonServers'"),
    ("NaN", b'{"model": NaN}', "NaN is not JSON"),
    ("Infinity", b'{"timeout": Infinity}', "Infinity is not JSON"),
    ("-Infinity", b'{"timeout": -Infinity}', "-Infinity is not JSON"),
    ("a key twice", b'{"hooks": {}, "hooks": {"Stop": []}}', "appears twice"),
    ("invalid UTF-8", b'{"model": "\xff\xfe"}', "not UTF-8"),
    ("deep nesting", DEEP_JSON, "nested too deeply"),
    ("a JSON list", b"[1, 2]", "does not hold a JSON object"),
]
MCP_REFUSED: list[tuple[str, bytes, str]] = [
    ("servers a list", b'{"mcpServers": [{"command": "x"}]}', "'mcpServers' is a list"),
    ("servers a string", b'{"mcpServers": "github"}', "'mcpServers' is a string"),
    ("servers null", b'{"mcpServers": null}', "'mcpServers' is null"),
    ("NaN", b'{"mcpServers": {}, "x": NaN}', "NaN is not JSON"),
]
CODEX_REFUSED: list[tuple[str, bytes, str]] = [
    ("notify a string", b'notify = "notify-send done"\n', "'notify' is a string"),
    ("notify with a number", b'notify = ["notify-send", 5]\n', "'notify' holds something other than strings"),
    ("notify a table", b"[notify]\nprogram = 'x'\n", "'notify' is an object"),
    ("servers a string", b'mcp_servers = "docs"\n', "'mcp_servers' is a string"),
    ("servers a list", b'mcp_servers = ["docs"]\n', "'mcp_servers' is a list"),
    ("omray a string", b'[mcp_servers]\nomray = "x"\n', "'mcp_servers.omray' is a string"),
    ("invalid UTF-8", b'model = "\xff"\n', "not UTF-8"),
    ("deep nesting", b"a = " + b"[" * 50_000 + b"]" * 50_000 + b"\n", "not valid TOML"),
]


def _one_line_refusal(result: Result, expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("omray integrate: "), result.output
    assert expected in lines[0] and "Traceback" not in result.output


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(app, ["integrate", *args])


@pytest.mark.parametrize("remove", [False, True], ids=["add", "remove"])
@pytest.mark.parametrize(
    ("name", "content", "expected"), CLAUDE_SETTINGS_REFUSED, ids=[c[0] for c in CLAUDE_SETTINGS_REFUSED]
)
def test_odd_claude_settings_are_refused_in_one_line_and_left_untouched(
    tmp_path: Path, name: str, content: bytes, expected: str, remove: bool
) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_bytes(content)
    result = _invoke("claude-code", "--project", str(tmp_path), *(["--remove"] if remove else []))
    _one_line_refusal(result, expected)
    assert settings.read_bytes() == content
    assert not (tmp_path / ".mcp.json").exists()


@pytest.mark.parametrize(("name", "content", "expected"), MCP_REFUSED, ids=[c[0] for c in MCP_REFUSED])
def test_odd_mcp_configs_are_refused_in_one_line_and_left_untouched(
    tmp_path: Path, name: str, content: bytes, expected: str
) -> None:
    (tmp_path / ".mcp.json").write_bytes(content)
    _one_line_refusal(_invoke("claude-code", "--project", str(tmp_path)), expected)
    assert (tmp_path / ".mcp.json").read_bytes() == content
    assert not (tmp_path / ".claude").exists()


@pytest.mark.parametrize("remove", [False, True], ids=["add", "remove"])
@pytest.mark.parametrize(("name", "content", "expected"), CODEX_REFUSED, ids=[c[0] for c in CODEX_REFUSED])
def test_odd_codex_configs_are_refused_in_one_line_and_left_untouched(
    tmp_path: Path, name: str, content: bytes, expected: str, remove: bool
) -> None:
    config = tmp_path / "config.toml"
    config.write_bytes(content)
    result = _invoke("codex", "--codex-config", str(config), *(["--remove"] if remove else []))
    _one_line_refusal(result, expected)
    assert config.read_bytes() == content


@pytest.mark.parametrize(
    "content",
    [
        '{"hooks": {}}\n',
        '{\n  "hooks": {\n    "Stop": []\n  }\n}\n',
        '{"permissions": {}, "hooks": {"PreToolUse": []}}\n',
        '{"enabledMcpjsonServers": [], "permissions": {"allow": []}}\n',
    ],
)
def test_remove_never_touches_what_omray_did_not_add(tmp_path: Path, content: str) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(content)
    result = _invoke("claude-code", "--project", str(tmp_path), "--remove")
    assert result.exit_code == 0, result.output
    assert settings.read_text() == content


def test_remove_keeps_a_users_empty_event_next_to_omrays_hooks(tmp_path: Path) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"hooks": {"PreToolUse": [], "Notification": []}}\n')
    assert _invoke("claude-code", "--project", str(tmp_path)).exit_code == 0
    assert _invoke("claude-code", "--project", str(tmp_path), "--remove").exit_code == 0
    assert json.loads(settings.read_text()) == {"hooks": {"PreToolUse": [], "Notification": []}}


def test_a_symlinked_settings_file_is_edited_through_its_link(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "claude-settings.json"
    original = '{"permissions": {"allow": ["Bash(ls)"]}}\n'
    target.write_text(original)
    os.chmod(target, 0o640)
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    link = project / ".claude" / "settings.json"
    link.symlink_to(target)
    assert _invoke("claude-code", "--project", str(project)).exit_code == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert "omray" in json.loads(target.read_text())["hooks"]["Stop"][0]["hooks"][0]["command"]
    assert target.stat().st_mode & 0o777 == 0o640
    assert _invoke("claude-code", "--project", str(project), "--remove").exit_code == 0
    assert link.is_symlink() and json.loads(target.read_text()) == json.loads(original)


def test_a_symlinked_settings_file_emptied_by_remove_keeps_its_link(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.json"
    project = tmp_path / "project"
    (project / ".claude").mkdir(parents=True)
    link = project / ".claude" / "settings.json"
    link.symlink_to(target)
    target.write_text("{}\n")
    assert _invoke("claude-code", "--project", str(project)).exit_code == 0
    assert _invoke("claude-code", "--project", str(project), "--remove").exit_code == 0
    assert link.is_symlink() and json.loads(target.read_text()) == {}


def test_a_symlinked_codex_config_is_edited_through_its_link(tmp_path: Path) -> None:
    target = tmp_path / "real.toml"
    target.write_text('model = "o4-mini"\n')
    link = tmp_path / "config.toml"
    link.symlink_to(target)
    assert _invoke("codex", "--codex-config", str(link)).exit_code == 0
    assert link.is_symlink() and tomlkit.parse(target.read_text())["mcp_servers"]["omray"]["args"] == ["mcp"]
    assert _invoke("codex", "--codex-config", str(link), "--remove").exit_code == 0
    assert link.is_symlink() and target.read_text() == 'model = "o4-mini"\n'


def test_a_dangling_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    link = tmp_path / ".claude" / "settings.json"
    link.symlink_to(tmp_path / "gone.json")
    _one_line_refusal(_invoke("claude-code", "--project", str(tmp_path)), "symlink to a missing file")
    assert link.is_symlink() and not (tmp_path / "gone.json").exists()


def test_a_fifo_as_settings_file_is_refused_without_blocking(tmp_path: Path) -> None:
    (tmp_path / ".claude").mkdir()
    os.mkfifo(tmp_path / ".claude" / "settings.json")
    results: list[Result] = []
    worker = threading.Thread(
        target=lambda: results.append(_invoke("claude-code", "--project", str(tmp_path))), daemon=True
    )
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "blocked on a FIFO"
    _one_line_refusal(results[0], "not a regular file")


@pytest.mark.parametrize("remove", [False, True])
def test_a_settings_file_that_is_a_folder_is_refused_in_one_line(tmp_path: Path, remove: bool) -> None:
    settings = tmp_path / ".claude" / "settings.json"
    settings.mkdir(parents=True)
    result = _invoke("claude-code", "--project", str(tmp_path), *(["--remove"] if remove else []))
    _one_line_refusal(result, "is not a regular file")
    assert settings.is_dir() and not any(settings.iterdir())
