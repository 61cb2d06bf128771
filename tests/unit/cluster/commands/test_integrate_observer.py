"""`omray integrate ... --observer`: the model written into the project's settings, and what
`--check` says about an agent-login Observer (fake CLI probes; no model call)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from cluster.commands import integrate, integrate_observer
from cluster.commands.cli import app
from cluster.commands.integrate_checks import Finding, check_settings
from cluster.commands.integrate_files import SettingsFileError
from cluster.commands.integrate_observer import (
    CliProbe,
    MeasuredRate,
    Observer,
    cli_findings,
    cost_finding,
    measured_rate,
    observer_edit,
    probe_cli,
    with_model,
)
from persistence.settings.file import load_settings
from persistence.settings.parse import settings_from_mapping

HAIKU = "claude-code/haiku"
REAL_RUN_PROBE = integrate_observer.run_probe


def _model_of(text: str, shared: bool = False) -> object:
    doc = yaml.safe_load(text)
    if shared:
        return doc["extensions"]["settings"]["observational_memory"]["model"]
    return (doc.get("observational_memory", doc) or {}).get("model")


@pytest.fixture(autouse=True)
def quiet(monkeypatch: pytest.MonkeyPatch) -> None:
    # No Ray and no real CLI: a stopped runtime, a CLI that is found and logged in.
    monkeypatch.delenv("OMRAY_SETTINGS", raising=False)
    monkeypatch.setattr(integrate, "check_runtime", lambda project: Finding(False, "runtime", "not running"))
    monkeypatch.setattr(integrate, "check_claude_trust", lambda project: Finding(True, "trust", "ok"))
    monkeypatch.setattr(integrate_observer, "find_cli", lambda name: f"/opt/bin/{name}")
    monkeypatch.setattr(integrate_observer, "run_probe", _fake_run(logged_in=True))


def _fake_run(logged_in: bool, calls: list[list[str]] | None = None):  # type: ignore[no-untyped-def]
    def run(argv: Sequence[str]) -> tuple[int, str]:
        if calls is not None:
            calls.append(list(argv))
        if argv[1:] == ["--version"]:
            return 0, "2.1.197 (Claude Code)\n" if "claude" in argv[0] else "codex-cli 0.171.0\n"
        if argv[1:] == ["auth", "status"]:
            answer = {"loggedIn": logged_in, "authMethod": "claude.ai" if logged_in else "none"}
            return (0 if logged_in else 1), json.dumps(answer)
        if argv[1:] == ["login", "status"]:
            return (0, "Logged in using ChatGPT\n") if logged_in else (1, "Not logged in\n")
        raise AssertionError(f"unexpected probe {argv!r}")  # never a model call

    return run


# ------------------------------------------------------------------------------- the settings edit


def test_no_settings_file_gets_a_block() -> None:
    assert with_model("", HAIKU) == "observational_memory:\n  model: claude-code/haiku\n"
    assert with_model("# only a comment", HAIKU).startswith("# only a comment\nobservational_memory:\n")


def test_an_existing_model_is_replaced_in_place_keeping_comments_and_quotes_go() -> None:
    text = (
        "# mine\nobservational_memory:\n  # the model\n"
        '  model: "local/qwen"  # keep me\n  observer:\n    observe_after_tokens: 4000\n'
    )
    after = with_model(text, HAIKU)
    assert after == text.replace('"local/qwen"', HAIKU)
    assert with_model(after, HAIKU) == after  # idempotent


def test_a_block_without_a_model_gets_one_line_at_its_top() -> None:
    text = "observational_memory:\n    observer:\n        observe_after_tokens: 4000\n"
    after = with_model(text, HAIKU)
    assert after.splitlines()[1] == "    model: claude-code/haiku"
    assert settings_from_mapping(yaml.safe_load(after)["observational_memory"]).observe_after_tokens == 4000


@pytest.mark.parametrize(
    ("text", "shared"),
    [
        ("observer:\n  observe_after_tokens: 4000\n", False),  # a file holding just the block
        ("model: builtin/extractive\n", False),
        ("observational_memory: {}\n", False),
        ("observational_memory: {observer: {observe_after_tokens: 4000}}\n", False),
        ("extensions:\n  settings:\n    observational_memory:\n      model: x/y\nother: 1\n", True),
        ("extensions:\n  settings:\n    observational_memory:\n      observer: {}\n", True),
    ],
)
def test_every_place_the_block_lives_is_edited(text: str, shared: bool) -> None:
    after = with_model(text, HAIKU, shared)
    assert _model_of(after, shared) == HAIKU
    assert with_model(after, HAIKU, shared) == after


@pytest.mark.parametrize(
    ("text", "shared"),
    [
        ("observational_memory:\n  model: [a, b]\n", False),
        ("observational_memory: 3\n", False),
        ("extensions:\n  settings:\n    other: 1\n", True),
        ("", True),
        ("observational_memory: [\n", False),
    ],
)
def test_what_cannot_be_edited_safely_is_a_typed_error(text: str, shared: bool) -> None:
    with pytest.raises(SettingsFileError, match="nothing was written"):
        with_model(text, HAIKU, shared)


def test_observer_edit_refuses_invalid_settings_and_reads_the_result_back(tmp_path: Path) -> None:
    path, before, after = observer_edit(tmp_path, Observer.CODEX)
    assert path == tmp_path / "omray.yaml" and before == "" and "codex/gpt-5-mini" in after
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  modle: x/y\n")
    with pytest.raises(Exception, match="modle") as raised:
        observer_edit(tmp_path, Observer.CLAUDE)
    assert type(raised.value).__name__.endswith("Error")
    assert (tmp_path / "omray.yaml").read_text() == "observational_memory:\n  modle: x/y\n"


# -------------------------------------------------------------------------------------- the command


def test_cli_observer_writes_is_idempotent_and_switches_back(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["integrate", "claude-code", "--project", str(tmp_path)]
    first = runner.invoke(app, [*args, "--observer", "claude"])
    assert first.exit_code == 0, first.output
    assert f"{tmp_path / 'omray.yaml'}: created" in first.output
    assert (tmp_path / "omray.yaml").stat().st_mode & 0o777 == 0o644
    assert load_settings(cwd=tmp_path).model == HAIKU
    assert "ok    model: claude-code/haiku runs /opt/bin/claude, 2.1.197 (Claude Code)" in first.output
    assert "ok    login: logged in (claude.ai)" in first.output
    assert "note  cost: no measured rate for claude-code/haiku yet" in first.output
    again = runner.invoke(app, [*args, "--observer", "claude"])
    assert again.output.count("unchanged") == 3
    back = runner.invoke(app, [*args, "--observer", "builtin"])
    assert back.exit_code == 0 and load_settings(cwd=tmp_path).model == "builtin/extractive"


def test_cli_bad_observer_and_observer_with_remove_change_nothing(tmp_path: Path) -> None:
    runner = CliRunner()
    args = ["integrate", "claude-code", "--project", str(tmp_path)]
    bad = runner.invoke(app, [*args, "--observer", "gpt"])
    assert bad.exit_code == 2 and "--observer" in bad.output
    both = runner.invoke(app, [*args, "--observer", "claude", "--remove"])
    assert both.exit_code == 2 and "nothing was changed" in both.output
    assert list(tmp_path.iterdir()) == []


def test_cli_dry_run_shows_the_model_and_writes_nothing(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["integrate", "claude-code", "--project", str(tmp_path), "--observer", "codex", "--dry-run"]
    )
    assert result.exit_code == 0 and "+  model: codex/gpt-5-mini" in result.output
    assert list(tmp_path.iterdir()) == []


def test_cli_check_with_observer_previews_the_switch(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["integrate", "codex", "--project", str(tmp_path), "--observer", "codex", "--check"]
    )
    assert result.exit_code == 1
    assert "todo  observer: the settings observe with builtin/extractive" in result.output
    assert "ok    login: logged in, as seen from this shell" in result.output
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ the probe, the login


def test_probe_a_missing_cli_runs_nothing() -> None:
    calls: list[list[str]] = []
    probe = probe_cli("claude_code", "claude", _fake_run(True, calls), which=lambda name: None)
    assert probe == CliProbe(None) and calls == []
    [finding] = cli_findings(HAIKU, "claude_code", probe)
    assert not finding.ok and "npm install -g @anthropic-ai/claude-code" in finding.detail


@pytest.mark.parametrize("kind", ["claude_code", "codex"])
def test_probe_logged_out_is_a_todo_and_makes_no_model_call(kind: str) -> None:
    calls: list[list[str]] = []
    command = "claude" if kind == "claude_code" else "codex"
    probe = probe_cli(kind, command, _fake_run(False, calls), which=lambda name: f"/bin/{name}")
    assert probe.path == f"/bin/{command}" and probe.logged_in is False and probe.version
    assert all(argv[1] in ("--version", "auth", "login") for argv in calls) and len(calls) == 2
    found, login = cli_findings(f"{command}/m", kind, probe)
    assert found.ok and not login.ok and ("/login" in login.detail or "codex login" in login.detail)


def test_probe_that_cannot_tell_is_a_note_and_odd_output_is_not_shown() -> None:
    def run(argv: Sequence[str]) -> tuple[int, str] | None:
        return None if argv[1] == "--version" else (1, "secret\x1b[0m user@example.com")

    for kind in ("claude_code", "codex"):
        probe = probe_cli(kind, "x", run, which=lambda name: "/bin/x")
        assert probe.version is None and probe.logged_in is None
        found, login = cli_findings("x/m", kind, probe)
        assert login.ok and login.note and "version unknown" in found.detail
        assert "example.com" not in found.detail + login.detail


def test_the_real_probe_runs_a_program_with_the_hook_guard(tmp_path: Path) -> None:
    script = tmp_path / "fakecli"
    script.write_text('#!/bin/sh\necho "$OMRAY_OBSERVER_CALL $*"\n')
    script.chmod(0o755)
    real = REAL_RUN_PROBE
    assert real([str(script), "--version"]) == (0, "1 --version\n")
    assert real([str(tmp_path / "missing")]) is None


# ------------------------------------------------------------------------------------ measured cost


def _memory(path: Path, usage: Sequence[tuple[str, str, int, int, int, int]], turns: dict[str, int]) -> Path:
    conn = sqlite3.connect(path)
    conn.execute(
        "CREATE TABLE omray_token_usage (usage_id TEXT PRIMARY KEY, run_id TEXT, job_kind TEXT, model TEXT,"
        " requests INTEGER, prompt_tokens INTEGER, cached_prompt_tokens INTEGER, completion_tokens INTEGER,"
        " recorded_at TEXT)"
    )
    conn.execute("CREATE TABLE omray_transcript (run_id TEXT, seq INTEGER, event_type TEXT, content TEXT)")
    for n, (session_id, model, requests, prompt, cached, completion) in enumerate(usage):
        conn.execute(
            "INSERT INTO omray_token_usage VALUES (?, ?, 'observe', ?, ?, ?, ?, ?, 't')",
            (f"u{n}", session_id, model, requests, prompt, cached, completion),
        )
    for session_id, count in turns.items():
        for seq in range(1, count + 1):
            conn.execute(
                "INSERT INTO omray_transcript VALUES (?, ?, 'agent_command_applied', 'x')", (session_id, seq)
            )
            conn.execute(
                "INSERT INTO omray_transcript VALUES (?, ?, 'llm_step_completed', 'x')",
                (session_id, 100 + seq),
            )
    conn.commit()
    conn.close()
    return path


def test_measured_rate_counts_the_models_tokens_over_the_turns_of_its_sessions(tmp_path: Path) -> None:
    db = _memory(
        tmp_path / "om.sqlite",
        [
            ("s1", HAIKU, 2, 30_000, 10_000, 2_000),
            ("s2", HAIKU, 1, 10_000, 0, 1_000),
            ("s3", "other/m", 9, 9, 0, 9),
        ],
        {"s1": 15, "s2": 5, "s3": 50},
    )
    assert measured_rate(db, HAIKU) == MeasuredRate(20, 3, 40_000, 10_000, 3_000)
    assert measured_rate(db, "codex/gpt-5-mini") == MeasuredRate(0, 0, 0, 0, 0)
    assert measured_rate(tmp_path / "none.sqlite", HAIKU) is None
    assert not (tmp_path / "none.sqlite").exists()  # read-only: never created


def test_cost_per_100_turns_in_tokens_and_money_or_plainly_none() -> None:
    plain = settings_from_mapping({"model": HAIKU})
    priced = settings_from_mapping(
        {
            "model": HAIKU,
            "prices": {"models": {HAIKU: {"prompt": 1.0, "cached_prompt": 0.1, "completion": 5.0}}},
        }
    )
    rate = MeasuredRate(20, 3, 40_000, 10_000, 3_000)
    tokens = cost_finding(plain, HAIKU, rate)
    assert tokens.ok and tokens.note
    assert "about 15 model calls, 200k prompt (50k cached) and 15k completion tokens" in tokens.detail
    assert "no price" in tokens.detail and "over 20 turns" in tokens.detail
    money = cost_finding(priced, HAIKU, rate)
    assert "0.23 USD" in money.detail  # (150k x 1 + 50k x 0.1 + 15k x 5) per million
    # 215k tokens per 100 turns: the default 2,000,000 a day lasts about 930 turns.
    assert "the daily budget (budget.daily_tokens 2,000,000) lasts about 930 turns a day" in money.detail
    reported = cost_finding(priced, HAIKU, MeasuredRate(20, 3, 40_000, 10_000, 3_000, cost_usd=0.05))
    assert "0.25 USD as the CLI reported it" in reported.detail  # what the CLI reported wins over prices
    uncapped = settings_from_mapping({"model": HAIKU, "budget": {"daily_tokens": None}})
    assert "daily budget" not in cost_finding(uncapped, HAIKU, rate).detail
    for none in (None, MeasuredRate(0, 0, 0, 0, 0), MeasuredRate(5, 0, 0, 0, 0)):
        assert "no measured rate for claude-code/haiku yet" in cost_finding(plain, HAIKU, none).detail


def test_check_settings_reports_cli_login_and_measured_cost(tmp_path: Path) -> None:
    (tmp_path / "omray.yaml").write_text("observational_memory:\n  model: claude-code/haiku\n")
    database = Path(load_settings(cwd=tmp_path).database_path(str(tmp_path)))
    database.parent.mkdir(parents=True)
    _memory(database, [("s1", HAIKU, 4, 80_000, 0, 4_000)], {"s1": 40})
    found = {f.what: f for f in check_settings(tmp_path)}
    assert found["model"].ok and found["login"].ok
    assert "per 100 turns about 10 model calls, 200k prompt" in found["cost"].detail
