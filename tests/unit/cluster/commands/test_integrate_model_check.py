"""``omray integrate --check`` against the model endpoint's ``/models`` listing (issue 40 item 6)
and Claude Code's state file under ``CLAUDE_CONFIG_DIR`` (item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.commands.cli import app
from cluster.commands.integrate_checks import (
    Finding,
    ModelsAnswer,
    check_claude_trust,
    check_settings,
    listed_ids,
    model_findings,
    print_findings,
    read_models,
)
from testkit.scripted_server import ScriptedServer

BASE = "http://127.0.0.1:9/v1"


def _settings(base_url: str, model: str = "local/qwen2.5-7b-instruct", key_env: str | None = None) -> str:
    key = f"      api_key_env: {key_env}\n" if key_env else ""
    return (
        "observational_memory:\n"
        f"  model: {model}\n"
        "  providers:\n"
        "    local:\n"
        f"      base_url: {base_url}\n"
        f"{key}"
        "      context_window: 32768\n"
    )


def _endpoint(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.what == "model endpoint"]


# ---------------------------------------------------------------------------- the pure judgement


def test_a_listed_model_is_ok() -> None:
    (finding,) = model_findings("local/qwen", BASE, ModelsAnswer(200, ("llama3", "qwen")), None, False)
    assert finding.ok and not finding.note and "'qwen'" in finding.detail


def test_a_missing_model_is_a_todo_naming_it_and_the_nearest_listed() -> None:
    listed = ("qwen2.5-7b-instruct", "qwen2.5-14b-instruct", "llama-3.1-8b", "mistral-7b")
    (finding,) = model_findings("local/qwen2.5-7b-instrct", BASE, ModelsAnswer(200, listed), None, False)
    assert not finding.ok and not finding.note
    assert "'qwen2.5-7b-instrct'" in finding.detail  # the configured name
    assert "'qwen2.5-7b-instruct'" in finding.detail  # the nearest listed one
    assert "mistral-7b" not in finding.detail  # not every listed id
    assert "observational_memory.model" in finding.detail and "local/" in finding.detail  # the fix


def test_nearest_falls_back_to_some_listed_ids_when_none_is_close() -> None:
    listed = tuple(f"m{i}" for i in range(10))
    (finding,) = model_findings("p/zzzzzzzzzzzzzz", BASE, ModelsAnswer(200, listed), None, False)
    assert not finding.ok and "10 listed" in finding.detail and "'m0'" in finding.detail
    assert "'m9'" not in finding.detail


def test_a_name_without_a_tag_matches_its_latest_tag() -> None:
    (finding,) = model_findings("ollama/llama3", BASE, ModelsAnswer(200, ("llama3:latest",)), None, False)
    assert finding.ok
    (tagged,) = model_findings("ollama/llama3:8b", BASE, ModelsAnswer(200, ("llama3:latest",)), None, False)
    assert not tagged.ok


def test_an_empty_listing_is_a_todo() -> None:
    (finding,) = model_findings("local/qwen", BASE, ModelsAnswer(200, ()), None, False)
    assert not finding.ok and "lists no models" in finding.detail and "'qwen'" in finding.detail


@pytest.mark.parametrize(
    "answer", [ModelsAnswer(404), ModelsAnswer(405), ModelsAnswer(500), ModelsAnswer(200)]
)
def test_no_listing_is_a_non_fatal_note(answer: ModelsAnswer) -> None:
    (finding,) = model_findings("local/qwen", BASE, answer, None, False)
    assert finding.ok and finding.note and "could not be checked" in finding.detail


def test_nothing_answering_is_a_todo() -> None:
    (finding,) = model_findings("local/qwen", BASE, ModelsAnswer(None), None, False)
    assert not finding.ok and "does not answer" in finding.detail


def test_a_refused_key_is_a_todo_naming_the_variable_unless_it_is_unset() -> None:
    (finding,) = model_findings("local/qwen", BASE, ModelsAnswer(401), "ACME_KEY", True)
    assert not finding.ok and "$ACME_KEY" in finding.detail and "401" in finding.detail
    assert model_findings("local/qwen", BASE, ModelsAnswer(401), "ACME_KEY", False) == []  # said already


def test_listed_ids_reads_only_an_openai_shaped_listing() -> None:
    body = {
        "object": "list",
        "data": [{"id": "a"}, {"id": 3}, {"x": 1}, {"id": "b\x1b[2J"}, {"id": "c" * 500}],
    }
    assert listed_ids(json.dumps(body).encode()) == ("a",)
    assert listed_ids(b"not json") is None
    assert listed_ids(b'{"models": []}') is None
    assert listed_ids(b"[1, 2]") is None
    assert listed_ids(b"\xff\xfe") is None


def test_a_note_prints_as_note(capsys: pytest.CaptureFixture[str]) -> None:
    print_findings([Finding(True, "a", "x"), Finding(True, "b", "y", note=True), Finding(False, "c", "z")])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["ok", "note", "todo"]


# ----------------------------------------------------------------------------- against a server


def test_read_models_sends_the_key_and_reads_the_listing() -> None:
    with ScriptedServer(models=["a", "b"]) as server:
        assert read_models(server.base_url, "sk-x") == ModelsAnswer(200, ("a", "b"))
        (request,) = server.requests_to("/models")
        assert request.headers["authorization"] == "Bearer sk-x"
    with ScriptedServer() as server:  # no /models route
        assert read_models(server.base_url, "sk-x").status == 404
    assert read_models(server.base_url, "sk-x") == ModelsAnswer(None)  # stopped: nothing answers


def test_read_models_does_not_follow_a_redirect_with_the_key() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    with ScriptedServer(models=["a"]) as target:

        class Moved(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                """Quiet."""

            def do_GET(self) -> None:
                self.send_response(302)
                self.send_header("Location", target.base_url + "/models")
                self.send_header("Content-Length", "0")
                self.end_headers()

        with ThreadingHTTPServer(("127.0.0.1", 0), Moved) as mover:
            threading.Thread(target=mover.serve_forever, args=(0.05,), daemon=True).start()
            answer = read_models(f"http://127.0.0.1:{mover.server_address[1]}/v1", "sk-secret")
            mover.shutdown()
        assert target.requests == []  # the key went nowhere else
    assert answer == ModelsAnswer(302)


def test_the_check_fails_on_a_model_the_endpoint_does_not_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The regression: any answer at /models used to pass, so a misspelt model went unnoticed."""
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    with ScriptedServer(models=["qwen2.5-7b-instruct", "llama-3.1-8b"]) as server:
        (tmp_path / "omray.yaml").write_text(_settings(server.base_url, "local/qwen2.5-7b"), encoding="utf-8")
        (finding,) = _endpoint(check_settings(tmp_path))
        assert (
            not finding.ok and "'qwen2.5-7b'" in finding.detail and "'qwen2.5-7b-instruct'" in finding.detail
        )
        (tmp_path / "omray.yaml").write_text(_settings(server.base_url), encoding="utf-8")
        (finding,) = _endpoint(check_settings(tmp_path))
        assert finding.ok and not finding.note


def test_the_check_sends_the_configured_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    monkeypatch.setenv("ACME_LLM_KEY", "sk-acme")
    with ScriptedServer(models=["qwen2.5-7b-instruct"]) as server:
        (tmp_path / "omray.yaml").write_text(
            _settings(server.base_url, key_env="ACME_LLM_KEY"), encoding="utf-8"
        )
        (finding,) = _endpoint(check_settings(tmp_path))
        assert finding.ok
        assert server.requests_to("/models")[0].headers["authorization"] == "Bearer sk-acme"


def test_the_cli_check_says_so_and_exits_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path / "home"))
    project = tmp_path / "proj"
    project.mkdir()
    with ScriptedServer(models=["qwen2.5-7b-instruct"]) as server:
        (project / "omray.yaml").write_text(_settings(server.base_url, "local/gpt-4o"), encoding="utf-8")
        result = CliRunner().invoke(app, ["integrate", "codex", "--project", str(project), "--check"])
    assert result.exit_code == 1
    (line,) = [line for line in result.output.splitlines() if "model endpoint" in line]
    assert line.split()[0] == "todo" and "'gpt-4o'" in line and "'qwen2.5-7b-instruct'" in line


def test_an_endpoint_without_models_is_a_note_and_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    with ScriptedServer() as server:
        (tmp_path / "omray.yaml").write_text(_settings(server.base_url), encoding="utf-8")
        (finding,) = _endpoint(check_settings(tmp_path))
    assert finding.ok and finding.note and "404" in finding.detail


# ------------------------------------------------------------------------------ workspace trust


def test_with_claude_config_dir_set_home_state_does_not_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code with ``CLAUDE_CONFIG_DIR`` reads only ``$CLAUDE_CONFIG_DIR/.claude.json``: trust
    recorded in ``~/.claude.json`` does not apply to it, so the check must not say ok."""
    home, config = tmp_path / "home", tmp_path / "claude-config"
    home.mkdir()
    config.mkdir()
    project = tmp_path / "proj"
    trusted = json.dumps({"projects": {str(project): {"hasTrustDialogAccepted": True}}})
    (home / ".claude.json").write_text(trusted)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    finding = check_claude_trust(project)
    assert not finding.ok and str(config / ".claude.json") in finding.detail
    (config / ".claude.json").write_text(trusted)
    assert check_claude_trust(project).ok
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", "")  # set but empty: Claude Code uses the home folder
    assert str(home / ".claude.json") in check_claude_trust(project).detail


def test_a_claude_code_model_is_checked_for_its_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  model: claude-code/haiku\n")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    [missing] = [f for f in check_settings(tmp_path) if f.what == "model"]
    assert not missing.ok and "npm install -g @anthropic-ai/claude-code" in missing.detail
    cli = tmp_path / "bin" / "claude"
    cli.parent.mkdir()
    cli.write_text("#!/bin/sh\n")
    cli.chmod(0o755)
    [found] = [f for f in check_settings(tmp_path) if f.what == "model"]
    assert found.ok and str(cli) in found.detail and not _endpoint(check_settings(tmp_path))
