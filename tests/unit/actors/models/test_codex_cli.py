"""The ``codex`` provider without the CLI: the command line, event parsing and failure mapping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actors.models.chat import ChatRequest, ModelCallError
from actors.models.claude_cli import OBSERVER_CALL_ENV
from actors.models.cli_prompt import answer_schema
from actors.models.codex_cli import DISABLED_FEATURES, CodexCliChatModel, codex_argv
from actors.models.registry import model_for
from persistence.settings.parse import settings_from_mapping
from protocol.errors import SettingsError
from protocol.tool_specs import record_observations_spec
from tests.unit.actors.models.test_claude_cli import SECRET_PROMPT, FakeRunner, fake_claude  # noqa: F401


def events(*items: dict[str, Any]) -> str:
    return "\n".join(json.dumps(item) for item in items) + "\n"


def answered(answer: object) -> str:
    return events(
        {"type": "thread.started", "thread_id": "t"},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"id": "i", "type": "agent_message", "text": json.dumps(answer)}},
        {
            "type": "turn.completed",
            "usage": {"input_tokens": 300, "cached_input_tokens": 100, "output_tokens": 9},
        },
    )


def request() -> ChatRequest:
    messages = [{"role": "system", "content": "You observe."}, {"role": "user", "content": SECRET_PROMPT}]
    return ChatRequest("gpt-5-mini", messages, [record_observations_spec()], 30.0)


def model_with(runner: FakeRunner, cli: Path) -> CodexCliChatModel:
    return CodexCliChatModel(
        "claude", 60.0, runner=runner, environ={"PATH": str(cli.parent), "CLAUDECODE": "1"}
    )


def test_a_run_is_locked_down_and_its_answer_read(fake_claude: Path) -> None:  # noqa: F811
    answer = {"tool_calls": [{"name": "record_observations", "arguments": {"observations": []}}]}
    runner = _SchemaRunner(answered(answer))
    response = model_with(runner, fake_claude).complete(request())
    assert [c.name for c in response.tool_calls] == ["record_observations"]
    usage = response.usage
    assert (usage.prompt_tokens, usage.cached_prompt_tokens, usage.completion_tokens) == (300, 100, 9)
    argv, run = runner.argv, runner.run
    assert argv[1] == "exec" and argv[-1] == "-"
    for flag in ("--json", "--ephemeral", "--ignore-user-config", "--ignore-rules", "--skip-git-repo-check"):
        assert flag in argv
    assert argv[argv.index("--sandbox") + 1] == "read-only"
    assert argv[argv.index("--cd") + 1] == run["cwd"]
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--disable"] == list(DISABLED_FEATURES)
    assert runner.schema == answer_schema([record_observations_spec()])
    assert run["stdin"].startswith("You observe.") and run["stdin"].endswith(SECRET_PROMPT)
    assert run["env"][OBSERVER_CALL_ENV] == "1" and "CLAUDECODE" not in run["env"]
    assert not Path(run["cwd"]).exists()


class _SchemaRunner:
    def __init__(self, output: str) -> None:
        self.output = output

    def __call__(self, argv: list[str], *, stdin: str, cwd: str, env: Any, timeout_s: float) -> Any:
        from actors.models.claude_cli import CliRun

        self.argv = argv
        self.schema = json.loads(Path(argv[argv.index("--output-schema") + 1]).read_text())
        self.run = {"stdin": stdin, "cwd": cwd, "env": dict(env)}
        return CliRun(0, self.output)


@pytest.mark.parametrize(
    ("output", "category"),
    [
        (events({"type": "turn.failed", "error": {"message": "401 Unauthorized"}}), "not_logged_in"),
        (events({"type": "error", "message": "You've hit your usage limit."}), "quota_exhausted"),
        (events({"type": "turn.failed", "error": {"message": "429 Too Many Requests"}}), "rate_limited"),
        (events({"type": "error", "message": "stream error: 503 overloaded"}), "server_error"),
        (events({"type": "error", "message": "error sending request"}), "connection"),
        (events({"type": "thread.started"}), "cli_failed"),
        ("error: unexpected argument '--ephemeral'", "cli_failed"),
        (events({"type": "turn.completed", "usage": {}}), "bad_answer"),
        (answered("not an answer"), "bad_answer"),
    ],
)
def test_failures_are_typed_and_never_carry_output(
    fake_claude: Path,  # noqa: F811
    caplog: pytest.LogCaptureFixture,
    output: str,
    category: str,
) -> None:
    with pytest.raises(ModelCallError) as raised:
        model_with(_SchemaRunner(output), fake_claude).complete(request())
    assert raised.value.category == category
    assert SECRET_PROMPT not in caplog.text and "usage limit" not in caplog.text


def test_extra_config_goes_before_the_prompt() -> None:
    argv = codex_argv("codex", "m", "/s", "/s/f.json", ['model_provider="mock"'])
    assert argv[-3:] == ["-c", 'model_provider="mock"', "-"]


def test_codex_settings() -> None:
    settings = settings_from_mapping({"model": "codex/gpt-5-mini", "providers": {"codex": {"timeout_s": 90}}})
    model, window = model_for(settings, "codex/gpt-5-mini")
    assert isinstance(model, CodexCliChatModel) and model.command == "codex" and model.timeout_s == 90.0
    assert window == 200_000
    assert isinstance(model_for(settings_from_mapping({}), "codex/o4-mini")[0], CodexCliChatModel)
    with pytest.raises(SettingsError, match="unknown keys"):
        settings_from_mapping({"providers": {"codex": {"max_budget_usd": 1}}})
    with pytest.raises(SettingsError, match="max_budget_usd"):
        settings_from_mapping({"providers": {"claude-code": {"max_budget_usd": None}}})


def test_a_codex_endpoint_of_the_users_becomes_a_provider_override() -> None:
    settings = settings_from_mapping(
        {
            "model": "codex/m",
            "providers": {"codex": {"base_url": "http://127.0.0.1:9/v1", "api_key_env": "GATEWAY_KEY"}},
        }
    )
    model, _ = model_for(settings, "codex/m")
    assert isinstance(model, CodexCliChatModel)
    assert model.extra_config == (
        'model_provider="omray-endpoint"',
        'model_providers.omray-endpoint={name = "omray-endpoint", base_url = "http://127.0.0.1:9/v1", '
        'wire_api = "responses", env_key = "GATEWAY_KEY"}',
    )
    with pytest.raises(SettingsError, match="needs a base_url"):
        settings_from_mapping({"providers": {"codex": {"api_key_env": "K"}}})
    with pytest.raises(SettingsError, match="api_key_env must be the name"):
        settings_from_mapping({"providers": {"codex": {"base_url": "http://x", "api_key_env": "sk-123 456"}}})
