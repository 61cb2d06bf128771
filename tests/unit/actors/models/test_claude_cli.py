"""The ``claude-code`` provider without the CLI: prompt rendering, answer parsing, failure mapping,
the command line and environment of a run, and its settings (a fake runner stands in for ``claude``)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from actors.models.chat import ChatRequest, ModelCallError, run_tool_loop
from actors.models.claude_cli import (
    NOT_INHERITED,
    OBSERVER_CALL_ENV,
    ClaudeCliChatModel,
    CliRun,
    classify_failure,
    cli_env,
)
from actors.models.cli_prompt import answer_schema, parse_answer, render_prompt
from actors.models.codex_cli import CodexCliChatModel
from actors.models.registry import model_for
from actors.worker import failure_reason
from cluster.commands import hook_fast
from persistence.settings.parse import settings_from_mapping
from protocol.errors import SettingsError
from protocol.outcomes import FAILURE_HELP, explain_failure
from protocol.settings import CLAUDE_CODE_CONTEXT_WINDOW, DEFAULT_CLI_MAX_BUDGET_USD
from protocol.tool_specs import drop_observations_spec, record_observations_spec, record_reflections_spec

SECRET_PROMPT = "the user's secret project plan 7f3a"
"""Text that must reach the CLI and never a log line or an error."""


def result(answer: object = None, **fields: Any) -> str:
    """The JSON a ``claude -p --output-format json`` run prints."""
    value: dict[str, Any] = {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "api_error_status": None,
        "result": "",
        "usage": {
            "input_tokens": 120,
            "cache_creation_input_tokens": 30,
            "cache_read_input_tokens": 50,
            "output_tokens": 40,
        },
        "total_cost_usd": 0.001,
    }
    if answer is not None:
        value["structured_output"] = answer
    value.update(fields)
    return json.dumps(value)


class FakeRunner:
    """Records each run and answers from a list of outputs (or raises a queued exception)."""

    def __init__(self, *outputs: str | BaseException, returncode: int = 0) -> None:
        self.outputs = list(outputs)
        self.returncode = returncode
        self.runs: list[dict[str, Any]] = []

    def __call__(
        self, argv: list[str], *, stdin: str, cwd: str, env: Mapping[str, str], timeout_s: float
    ) -> CliRun:
        system_file = argv[argv.index("--system-prompt-file") + 1]
        self.runs.append(
            {
                "argv": argv,
                "stdin": stdin,
                "cwd": cwd,
                "env": dict(env),
                "timeout_s": timeout_s,
                "system": Path(system_file).read_text(encoding="utf-8"),
            }
        )
        output = self.outputs.pop(0)
        if isinstance(output, BaseException):
            raise output
        return CliRun(self.returncode, output)


@pytest.fixture
def fake_claude(tmp_path: Path) -> Path:
    """An executable named ``claude`` on a PATH of its own (never run: the runner is fake)."""
    path = tmp_path / "bin" / "claude"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    return path


def model_with(runner: FakeRunner, fake_claude: Path, **environ: str) -> ClaudeCliChatModel:
    env = {"PATH": str(fake_claude.parent), "HOME": "/home/u", **environ}
    return ClaudeCliChatModel("claude", 60.0, 0.25, runner=runner, environ=env)


def observations(*seqs: int) -> dict[str, Any]:
    items = [
        {
            "timestamp": "2026-12-01 10:00",
            "content": f"Entry {seq} happened",
            "relevance": "low",
            "source_refs": [{"run_id": "s1", "seq": seq}],
        }
        for seq in seqs
    ]
    return {"observations": items}


def request(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> ChatRequest:
    return ChatRequest("haiku", messages, tools or [record_observations_spec()], 30.0)


# --- rendering and the answer schema ---------------------------------------------------------


def test_first_round_prompt_is_the_input_and_the_system_prompt_carries_tools_and_rules() -> None:
    system, prompt = render_prompt(
        [{"role": "system", "content": "You observe."}, {"role": "user", "content": "CHUNK 1"}],
        [record_observations_spec()],
    )
    assert prompt == "CHUNK 1"
    assert system.startswith("You observe.\n\n")
    assert "- record_observations:" in system and '{"tool_calls": []}' in system


def test_later_rounds_carry_every_answer_and_receipt_by_call_id() -> None:
    messages = [
        {"role": "system", "content": "You observe."},
        {"role": "user", "content": "CHUNK 1"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "cli_1_1",
                    "type": "function",
                    "function": {"name": "record_observations", "arguments": '{"observations": []}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "cli_1_1", "content": '{"status":"rejected"}'},
    ]
    _, prompt = render_prompt(messages, [record_observations_spec()])
    assert prompt.startswith("CHUNK 1\n\n")
    assert (
        '[Answer 1] {"tool_calls":[{"id":"cli_1_1","name":"record_observations",'
        '"arguments":{"observations":[]}}]}' in prompt
    )
    assert '[Receipt of call cli_1_1] {"status":"rejected"}' in prompt
    assert prompt.endswith("when you are done.")


def test_answer_schema_offers_each_tool_with_its_own_parameters() -> None:
    one = answer_schema([record_observations_spec()])
    item = one["properties"]["tool_calls"]["items"]
    assert one["required"] == ["tool_calls"] and one["additionalProperties"] is False
    assert item["properties"]["name"] == {"type": "string", "enum": ["record_observations"]}
    assert item["properties"]["arguments"] == record_observations_spec()["function"]["parameters"]
    two = answer_schema([record_reflections_spec(), drop_observations_spec()])
    names = [v["properties"]["name"]["enum"][0] for v in two["properties"]["tool_calls"]["items"]["anyOf"]]
    assert names == ["record_reflections", "drop_observations"]


# --- parsing ----------------------------------------------------------------------------------------


def test_answer_becomes_tool_calls_with_round_ids() -> None:
    calls = parse_answer(
        {
            "tool_calls": [
                {"name": "record_observations", "arguments": observations(3)},
                {"name": "x", "arguments": {}},
            ]
        },
        2,
    )
    assert [(c.call_id, c.name) for c in calls] == [("cli_2_1", "record_observations"), ("cli_2_2", "x")]
    assert json.loads(calls[0].arguments) == observations(3)
    assert parse_answer({"tool_calls": []}, 1) == ()


@pytest.mark.parametrize(
    "answer",
    [
        None,
        [],
        "text",
        {},
        {"tool_calls": {}},
        {"tool_calls": [], "extra": 1},
        {"tool_calls": ["record_observations"]},
        {"tool_calls": [{"name": "record_observations"}]},
        {"tool_calls": [{"name": "", "arguments": {}}]},
        {"tool_calls": [{"name": "record_observations", "arguments": "[]"}]},
        {"tool_calls": [{"name": "record_observations", "arguments": {}, "why": "x"}]},
    ],
)
def test_anything_else_is_a_bad_answer(answer: object) -> None:
    with pytest.raises(ModelCallError) as raised:
        parse_answer(answer, 1)
    assert raised.value.category == "bad_answer"


# --- one run ------------------------------------------------------------------------------------------


def test_a_run_is_locked_down_and_reports_usage(fake_claude: Path) -> None:
    answer = {"tool_calls": [{"name": "record_observations", "arguments": observations(3)}]}
    runner = FakeRunner(result(answer))
    model = model_with(runner, fake_claude, CLAUDECODE="1", CLAUDE_CODE_ENTRYPOINT="cli", KEEP="yes")
    response = model.complete(
        request([{"role": "system", "content": "You observe."}, {"role": "user", "content": SECRET_PROMPT}])
    )
    assert [c.name for c in response.tool_calls] == ["record_observations"]
    assert response.usage.prompt_tokens == 200 and response.usage.cached_prompt_tokens == 50
    assert response.usage.completion_tokens == 40
    assert response.usage.cost_usd == 0.001  # the CLI's total_cost_usd: what the daily budget counts
    run = runner.runs[0]
    argv = run["argv"]
    assert argv[0] == str(fake_claude) and argv[1] == "-p"
    pairs = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
    assert pairs["--output-format"] == "json" and pairs["--model"] == "haiku"
    assert pairs["--tools"] == "" and pairs["--setting-sources"] == ""
    assert pairs["--mcp-config"] == '{"mcpServers":{}}' and "--strict-mcp-config" in argv
    assert "--no-session-persistence" in argv and "--disable-slash-commands" in argv
    assert pairs["--max-budget-usd"] == "0.25"
    assert json.loads(pairs["--json-schema"]) == answer_schema([record_observations_spec()])
    assert run["stdin"] == SECRET_PROMPT and SECRET_PROMPT not in " ".join(argv)
    assert run["system"].startswith("You observe.")
    assert Path(pairs["--system-prompt-file"]).parent == Path(run["cwd"])
    assert not Path(run["cwd"]).exists()  # the scratch directory is gone after the run
    env = run["env"]
    assert env[OBSERVER_CALL_ENV] == "1" and env["MAX_THINKING_TOKENS"] == "0"
    assert env["KEEP"] == "yes" and not set(NOT_INHERITED) & set(env)
    assert run["timeout_s"] == 30.0


def test_the_tool_loop_runs_on_cli_answers_and_sends_receipts_back(fake_claude: Path) -> None:
    first = {"tool_calls": [{"name": "record_observations", "arguments": {"observations": "no"}}]}
    runner = FakeRunner(result(first), result({"tool_calls": []}))
    received: list[object] = []

    def handler(arguments: object) -> dict[str, Any]:
        received.append(arguments)
        return {"status": "rejected", "error": "invalid_arguments"}

    loop = run_tool_loop(
        model_with(runner, fake_claude),
        model="claude-code/haiku",
        instructions="You observe.",
        input_text="CHUNK",
        tools=[(record_observations_spec(), handler)],
        max_tool_calls=6,
        max_duration_s=60,
        skip_receipt_round=True,
    )
    assert received == [{"observations": "no"}]
    assert loop.rounds == 2 and loop.tool_calls == 1 and loop.stop_reason == "model_stopped"
    assert loop.prompt_tokens == 400
    assert (
        '[Receipt of call cli_1_1] {"status":"rejected","error":"invalid_arguments"}'
        in runner.runs[1]["stdin"]
    )


def failing(**fields: Any) -> str:
    return result(None, is_error=True, **fields)


@pytest.mark.parametrize(
    ("output", "category", "reason"),
    [
        (failing(result="Not logged in · Please run /login"), "not_logged_in", "model_cli_login"),
        (failing(api_error_status=401, result="Failed to authenticate."), "not_logged_in", "model_cli_login"),
        (
            failing(api_error_status=429, result="Claude AI usage limit reached"),
            "quota_exhausted",
            "model_quota",
        ),
        (failing(api_error_status=400, result="Credit balance is too low"), "quota_exhausted", "model_quota"),
        (failing(api_error_status=429, result="API Error: Request rejected (429)"), "rate_limited", None),
        (failing(api_error_status=529, result="API Error: 529 overloaded"), "server_error", None),
        (failing(api_error_status=404, result="model not found"), "bad_response", "model_not_found"),
        (
            failing(result="API Error: Unable to connect to API (ECONNREFUSED)"),
            "connection",
            "model_unreachable",
        ),
        (failing(subtype="error_max_budget_usd"), "budget_exceeded", "model_call_budget"),
        (failing(subtype="error_max_structured_output_retries"), "bad_answer", "model_bad_answer"),
        (failing(result="something else"), "cli_failed", "model_cli_failed"),
        ("error: unknown option '--json-schema'", "cli_failed", "model_cli_failed"),
        (result(None, result="plain words"), "bad_answer", "model_bad_answer"),
        (result({"tool_calls": "no"}), "bad_answer", "model_bad_answer"),
        (subprocess.TimeoutExpired(["claude"], 1), "cli_timeout", "model_cli_timeout"),
        (FileNotFoundError("claude"), "cli_missing", "model_cli_missing"),
    ],
)
def test_failures_are_typed_and_never_carry_output(
    fake_claude: Path,
    caplog: pytest.LogCaptureFixture,
    output: str | BaseException,
    category: str,
    reason: str | None,
) -> None:
    runner = FakeRunner(output, returncode=1)
    with pytest.raises(ModelCallError) as raised:
        model_with(runner, fake_claude).complete(request([{"role": "user", "content": SECRET_PROMPT}]))
    assert raised.value.category == category
    code, retryable = failure_reason(raised.value)
    assert code == (reason or "transient_runtime") and retryable
    if reason is not None and reason != "model_not_found" and reason != "model_unreachable":
        assert code in FAILURE_HELP
    for text in [str(raised.value), caplog.text]:
        assert SECRET_PROMPT not in text and "usage limit" not in text and "Not logged in" not in text


def test_a_missing_cli_fails_before_any_run(tmp_path: Path) -> None:
    runner = FakeRunner()
    model = ClaudeCliChatModel("claude", 60, 0.25, runner=runner, environ={"PATH": str(tmp_path)})
    with pytest.raises(ModelCallError) as raised:
        model.complete(request([{"role": "user", "content": "x"}]))
    assert raised.value.category == "cli_missing" and runner.runs == []


def test_quota_is_told_apart_from_a_plain_rate_limit() -> None:
    assert classify_failure(
        {"is_error": True, "api_error_status": 429, "result": "You've hit your limit"}
    ).category == ("quota_exhausted")
    assert (
        classify_failure({"is_error": True, "api_error_status": 429, "result": "rate"}).category
        == "rate_limited"
    )


def test_every_cli_failure_has_a_cause_and_a_fix() -> None:
    for code in (
        "model_cli_missing",
        "model_cli_login",
        "model_quota",
        "model_call_budget",
        "model_cli_timeout",
        "model_cli_failed",
        "model_bad_answer",
    ):
        cause, fix = explain_failure(code)
        assert cause and fix and code not in cause


def test_cli_env_adds_the_hook_guard_and_drops_a_parent_session() -> None:
    env = cli_env({"PATH": "/bin", "CLAUDECODE": "1", "CLAUDE_CODE_SSE_PORT": "5"})
    assert env["PATH"] == "/bin" and env[OBSERVER_CALL_ENV] == "1"
    assert "CLAUDECODE" not in env and "CLAUDE_CODE_SSE_PORT" not in env


# --- the hook guard ------------------------------------------------------------------------------------


def test_the_hook_honours_the_observer_call_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert hook_fast.OBSERVER_CALL_ENV == OBSERVER_CALL_ENV
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"type":"user"}\n')
    event = {
        "session_id": "s1",
        "hook_event_name": "Stop",
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
    }
    monkeypatch.setenv(OBSERVER_CALL_ENV, "1")
    monkeypatch.setattr("sys.stdin", _Stdin(json.dumps(event)))
    called: list[object] = []
    monkeypatch.setattr(hook_fast, "claude_code", lambda *a: called.append(a))
    monkeypatch.setattr(hook_fast, "codex", lambda *a: called.append(a))
    assert hook_fast.run(["claude-code"]) is True
    assert hook_fast.run(["codex", '{"type":"agent-turn-complete"}']) is True
    assert called == [] and capsys.readouterr().out == ""
    assert not (tmp_path / ".hatfield").exists()


class _Stdin:
    def __init__(self, text: str) -> None:
        self.buffer = _Buffer(text.encode())


class _Buffer:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, size: int = -1) -> bytes:
        return self.data


# --- settings and resolution ---------------------------------------------------------------------------


def test_claude_code_needs_no_providers_block() -> None:
    settings = settings_from_mapping({"model": "claude-code/haiku"})
    model, window = model_for(settings, "claude-code/haiku")
    assert isinstance(model, ClaudeCliChatModel)
    assert window == CLAUDE_CODE_CONTEXT_WINDOW
    assert model.command == "claude" and model.max_budget_usd == DEFAULT_CLI_MAX_BUDGET_USD


def test_claude_code_provider_settings() -> None:
    settings = settings_from_mapping(
        {
            "model": "claude-code/haiku",
            "providers": {
                "claude-code": {
                    "command": "/opt/claude/bin/claude",
                    "context_window": 64000,
                    "timeout_s": 120,
                    "max_budget_usd": 0.1,
                }
            },
        }
    )
    model, window = model_for(settings, "claude-code/haiku")
    assert isinstance(model, ClaudeCliChatModel)
    assert (model.command, window, model.timeout_s, model.max_budget_usd) == (
        "/opt/claude/bin/claude",
        64000,
        120.0,
        0.1,
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"base_url": "http://127.0.0.1:1"}, "unknown keys ['base_url']"),
        ({"api_key_env": "KEY"}, "unknown keys ['api_key_env']"),
        ({"command": ""}, "providers.claude-code.command"),
        ({"max_budget_usd": 0}, "providers.claude-code.max_budget_usd"),
        ({"max_budget_usd": float("nan")}, "providers.claude-code.max_budget_usd"),
        ({"max_budget_usd": 10_000}, "providers.claude-code.max_budget_usd must be at most"),
        ({"timeout_s": -1}, "providers.claude-code.timeout_s"),
    ],
)
def test_bad_claude_code_settings_name_the_key(entry: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("[", r"\[").replace("]", r"\]")):
        settings_from_mapping({"model": "claude-code/haiku", "providers": {"claude-code": entry}})


def test_cli_keys_are_refused_on_other_providers() -> None:
    with pytest.raises(SettingsError, match="unknown keys"):
        settings_from_mapping(
            {"providers": {"local": {"base_url": "http://x", "context_window": 10, "max_budget_usd": 1}}}
        )


def test_a_cli_model_shows_neither_its_environment_nor_its_options(fake_claude: Path) -> None:
    claude = model_with(FakeRunner(), fake_claude, ANTHROPIC_API_KEY="sk-ant-secret-value")
    codex = CodexCliChatModel(
        "codex", 60.0, environ={"OPENAI_API_KEY": "sk-secret-value"}, extra_config=("model_provider=x",)
    )
    for model in (claude, codex):
        assert "secret" not in repr(model) and "secret" not in str(model)
    assert codex.extra_config == ("model_provider=x",) and claude.max_budget_usd == 0.25
