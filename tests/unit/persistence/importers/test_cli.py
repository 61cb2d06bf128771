"""``omray import`` through typer's CliRunner: summary, --json, errors, observe hook."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from cluster.commands import import_cli
from persistence.files.events_reader import last_event_seq
from tests.unit.persistence.importers.helpers import FIXTURES

runner = CliRunner()


def _app(observe: import_cli.ObserveHook | None = None) -> typer.Typer:
    app = typer.Typer()
    app.command("import")(import_cli.import_command_for(observe))

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer from collapsing the app into one command
        """Unused."""

    return app


def test_json_summary_and_no_observe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Path, int]] = []
    hook: import_cli.ObserveHook = lambda *args: calls.append(args)  # noqa: E731
    out = tmp_path / "events.jsonl"
    args = ["import", "--format", "codex", str(FIXTURES / "codex-rollout.jsonl"), "--session", "9"]
    result = runner.invoke(_app(hook), [*args, "--out", str(out), "--json", "--no-observe"])

    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["session_id"] == "9" and data["events_path"] == str(out)
    assert (data["events"], data["turns"], data["last_seq"]) == (12, 2, 12)
    assert data["skipped"] == {"response_item:local_shell_call": 1, "x-future-record": 1}
    assert last_event_seq(out) == 12
    assert calls == []


def test_summary_line_and_observe_hook_called(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, Path, int]] = []
    hook: import_cli.ObserveHook = lambda *args: calls.append(args)  # noqa: E731
    out = tmp_path / "events.jsonl"
    args = [
        "import",
        "--format",
        "pi",
        str(FIXTURES / "pi-session.jsonl"),
        "--session",
        "s1",
        "--out",
        str(out),
    ]
    result = runner.invoke(_app(hook), [*args, "--quiet"])

    assert result.exit_code == 0, result.output
    line = result.stdout.strip()
    assert "\n" not in line
    assert line.startswith("imported 13 events (3 turns, last seq 13)") and "custom_entry=1" in line
    assert calls == [("s1", out, 13)]


def test_default_output_path_and_no_hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    source = str(FIXTURES / "claude-code-session.jsonl")
    result = runner.invoke(_app(), ["import", "--format", "claude-code", source, "--session", "cc"])
    assert result.exit_code == 0, result.output
    assert last_event_seq(tmp_path / ".hatfield" / "sessions" / "cc" / "events.jsonl") == 11
    assert "not available" in result.stderr

    again = runner.invoke(_app(), ["import", "--format", "claude-code", source, "--session", "cc"])
    assert again.exit_code == 1 and "already exists" in again.stderr
    forced = runner.invoke(
        _app(), ["import", "--format", "claude-code", source, "--session", "cc", "--force"]
    )
    assert forced.exit_code == 0


def test_malformed_input_exits_1_with_line_number(tmp_path: Path) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text('{"type":"session"}\n{oops secret\n', encoding="utf-8")
    out = tmp_path / "events.jsonl"
    result = runner.invoke(
        _app(), ["import", "--format", "pi", str(source), "--session", "1", "--out", str(out)]
    )
    assert result.exit_code == 1
    assert "line 2" in result.stderr and "secret" not in result.stderr
    assert not out.exists()


def test_unknown_format_and_bad_session_are_usage_errors(tmp_path: Path) -> None:
    source = str(FIXTURES / "pi-session.jsonl")
    bad_format = runner.invoke(_app(), ["import", "--format", "traj", source, "--session", "1"])
    assert bad_format.exit_code == 2
    bad_session = runner.invoke(_app(), ["import", "--format", "pi", source, "--session", "../x"])
    assert bad_session.exit_code == 1 and "invalid session id" in bad_session.stderr
