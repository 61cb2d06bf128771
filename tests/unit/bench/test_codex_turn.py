"""``omray bench agent-turn --agent codex``: the breakdown from Codex's log lines
(``bench.codex_turn_parse``), the configurations' ``config.toml`` and finding the CLI
(``bench.codex_turn``)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tomlkit

from bench.agent_turn import CONFIGS, NOOP_MCP_SERVER, AgentTurnSkipped
from bench.agent_turn_parse import median_phases
from bench.codex_turn import KEY_ENV, PROVIDER, codex_config, codex_env, find_codex, project_pids
from bench.codex_turn_parse import CodexPhases, codex_lines, codex_phases

# Lines as Codex CLI 0.171.0 writes them with RUST_LOG=CODEX_LOG_FILTER, a "both" turn (the spans and
# long values cut short, ids and the tool list left out; its other lines dropped): the turn, the MCP
# server's handshake and tool list, the model request, the answer, the shutdown.
STARTED_MS = 1796425270633.7676  # the process started (time.time() * 1000 in the benchmark)
EXITED_MS = 1796425271350.6162  # and exited
STDERR = (Path(__file__).resolve().parents[2] / "fixtures" / "codex-exec-turn.log").read_text()


def test_a_turn_with_an_mcp_server_is_broken_down_into_its_phases() -> None:
    phases = codex_phases(STDERR, STARTED_MS, EXITED_MS)
    assert phases.to_turn_ms == pytest.approx(307.5, abs=0.1)
    assert phases.mcp_ready_ms == pytest.approx(447.4, abs=0.1)
    assert phases.mcp_tools_ms == pytest.approx(3.6, abs=0.1)  # the ListToolsResult, not the request
    # The request's line minus the duration it reports: when it was sent.
    assert phases.turn_to_request_ms == pytest.approx(173.0, abs=0.1)
    assert phases.to_request_ms == pytest.approx(480.5, abs=0.1)
    # From the first response.completed to the process's exit.
    assert phases.after_response_ms == pytest.approx(165.0, abs=0.1)
    assert phases.mcp_stop_ms == pytest.approx(10.0, abs=0.1)


def test_a_bare_turn_has_no_mcp_figures() -> None:
    bare = "\n".join(line for line in STDERR.splitlines() if "rmcp" not in line and "mcp." not in line)
    phases = codex_phases(bare, STARTED_MS, EXITED_MS)
    assert phases.mcp_ready_ms is None and phases.mcp_tools_ms is None and phases.mcp_stop_ms is None
    assert phases.to_turn_ms == pytest.approx(307.5, abs=0.1)
    assert phases.turn_to_request_ms == pytest.approx(173.0, abs=0.1)


def test_missing_or_foreign_logs_give_no_figures_rather_than_wrong_ones() -> None:
    assert codex_phases("", STARTED_MS, EXITED_MS) == CodexPhases()
    assert codex_phases("OpenAI Codex v0.171.0\nDone.\n", STARTED_MS, EXITED_MS) == CodexPhases()
    # Cut before the tool list came and before the request: no tool list, no request, no end.
    cut = STDERR.split("2026-12-04T23:01:11.084737Z", 1)[0]
    phases = codex_phases(cut, STARTED_MS, EXITED_MS)
    assert phases.mcp_ready_ms is not None
    assert phases.mcp_tools_ms is None and phases.to_request_ms is None and phases.turn_to_request_ms is None
    assert phases.after_response_ms is None and phases.mcp_stop_ms is None
    # A "serve finished" before any shutdown (a server that failed at start) is not its stop.
    early = STDERR.replace('operation="shutdown"', 'operation="other"')
    assert codex_phases(early, STARTED_MS, EXITED_MS).mcp_stop_ms is None


def test_timestamps_with_any_fraction_are_milliseconds_since_the_epoch() -> None:
    lines = codex_lines(
        "2026-12-04T23:01:11Z  INFO a: one\nnot a line\n2026-12-04T23:01:11.25Z DEBUG b: two\n"
        "2026-12-04T23:01:11.250500Z TRACE c: three\n"
    )
    assert [rest for _, rest in lines] == ["a: one", "b: two", "c: three"]
    assert lines[1][0] - lines[0][0] == pytest.approx(250.0)
    assert lines[2][0] - lines[1][0] == pytest.approx(0.5)


def test_medians_skip_turns_that_did_not_see_a_phase() -> None:
    seen = [(300.0, None), (100.0, 4.0), (200.0, 2.0)]
    turns = [CodexPhases(to_turn_ms=v, mcp_tools_ms=t) for v, t in seen]
    medians = median_phases(CodexPhases, turns)
    assert medians["to_turn_ms"] == 200.0
    assert medians["mcp_tools_ms"] == 2.0
    assert medians["mcp_stop_ms"] is None


def _config(config: str, tmp_path: Path) -> dict:
    path = tmp_path / config / "config.toml"
    path.parent.mkdir()
    return tomlkit.parse(codex_config(config, "http://127.0.0.1:9", "/opt/omray/bin/omray", path)).unwrap()


def test_every_configuration_points_codex_at_the_mock_with_only_its_own_entries(tmp_path: Path) -> None:
    seen = {config: _config(config, tmp_path) for config in CONFIGS}
    for document in seen.values():
        assert document["model_provider"] == PROVIDER
        provider = document["model_providers"][PROVIDER]
        assert provider["base_url"] == "http://127.0.0.1:9/v1" and provider["wire_api"] == "responses"
        assert provider["env_key"] == KEY_ENV
    assert "notify" not in seen["bare"] and "mcp_servers" not in seen["bare"]
    # omray's own entries, as `omray integrate codex` writes them.
    assert seen["hooks"]["notify"] == ["/opt/omray/bin/omray", "hook", "codex"] == seen["both"]["notify"]
    assert "mcp_servers" not in seen["hooks"] and "notify" not in seen["mcp"]
    for config in ("mcp", "both"):
        server = seen[config]["mcp_servers"]["omray"]
        assert server["command"] == "/opt/omray/bin/omray" and server["args"] == ["mcp"]
        assert server["default_tools_approval_mode"] == "approve"
    # The floors: the same entries running a program that does nothing and the static server.
    for config in ("noop-hooks", "noop-both"):
        assert Path(seen[config]["notify"][0]).name == "true" and len(seen[config]["notify"]) == 1
    for config in ("noop-mcp", "noop-both"):
        server = seen[config]["mcp_servers"]["omray"]
        assert server["command"] == sys.executable
        assert server["args"][:4] == ["-S", "-I", "-c", NOOP_MCP_SERVER]
        assert server["default_tools_approval_mode"] == "approve"
    assert "mcp_servers" not in seen["noop-hooks"] and "notify" not in seen["noop-mcp"]


def test_a_turn_inherits_no_agent_session_nor_real_key(tmp_path: Path) -> None:
    env = codex_env(
        {"PATH": "/bin", "OPENAI_API_KEY": "sk-real", "CODEX_HOME": "/home/u/.codex", "RUST_LOG": "trace"},
        tmp_path / "home",
        tmp_path / "omray",
    )
    assert env["PATH"] == "/bin" and env["CODEX_HOME"] == str(tmp_path / "home")
    assert "OPENAI_API_KEY" not in env and "RUST_LOG" not in env
    assert env[KEY_ENV] and env["OMRAY_HOME"] == str(tmp_path / "omray")


def test_no_cli_and_no_npm_skips_saying_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMRAY_CODEX_CLI", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(AgentTurnSkipped, match="no npm"):
        find_codex(None, cache=tmp_path / "cache", tests_cache=tmp_path / "tests")
    with pytest.raises(AgentTurnSkipped, match="not a file"):
        find_codex(tmp_path / "missing", cache=tmp_path / "cache", tests_cache=tmp_path / "tests")
    program = tmp_path / "tests" / "node_modules" / ".bin" / "codex"
    program.parent.mkdir(parents=True)
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    assert find_codex(None, cache=tmp_path / "cache", tests_cache=tmp_path / "tests") == program
    monkeypatch.setenv("OMRAY_CODEX_CLI", str(program))
    assert find_codex(None, cache=tmp_path / "cache", tests_cache=tmp_path / "nowhere") == program


def test_processes_left_in_a_project_are_found_until_they_exit(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    assert project_pids(project) == []
    working = subprocess.Popen(["sleep", "30"], cwd=project)
    naming = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", str(project)])
    try:
        deadline = time.monotonic() + 10  # a child's command line is its own once its exec is done
        while not {working.pid, naming.pid} <= set(project_pids(project)) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert {working.pid, naming.pid} <= set(project_pids(project))
        assert os.getpid() not in project_pids(project)
    finally:
        working.kill()
        naming.kill()
        working.wait()
        naming.wait()
    assert project_pids(project) == []


def test_the_command_skips_each_agent_with_its_reason_and_refuses_an_unknown_one(tmp_path: Path) -> None:
    import json

    import typer
    from typer.testing import CliRunner

    from bench.agent_turn_cli import bench_agent_turn_command

    app = typer.Typer()
    app.command()(bench_agent_turn_command)
    missing = str(tmp_path / "missing")
    done = CliRunner().invoke(app, ["--agent", "codex", "--codex", missing, "--json"])
    assert done.exit_code == 0
    assert json.loads(done.stdout) == {"skipped": f"--codex {missing!r} is not a file"}
    done = CliRunner().invoke(app, ["--agent", "both", "--codex", missing, "--claude", missing, "--json"])
    answers = json.loads(done.stdout)
    assert set(answers) == {"claude", "codex"} and all("skipped" in answer for answer in answers.values())
    assert CliRunner().invoke(app, ["--agent", "gemini"]).exit_code != 0
