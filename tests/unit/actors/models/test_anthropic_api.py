"""``anthropic/<model>``: the official SDK against the scripted server's mock Messages API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from actors.models.anthropic_api import (
    STABLE_PREFIX_END,
    AnthropicChatModel,
    anthropic_request,
    sdk_base_url,
)
from actors.models.chat import ChatRequest, MissingApiKeyError, ModelCallError, run_tool_loop
from actors.models.registry import model_for
from actors.worker import failure_reason
from persistence.settings.parse import settings_from_mapping
from protocol.errors import SettingsError
from protocol.tool_specs import record_observations_spec
from testkit.anthropic_messages import ToolUseMemoryModel, api_error
from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import Reply, ScriptedServer

MEMORY = "CURRENT REFLECTIONS:\n(none yet)\n\nCURRENT OBSERVATIONS:\n[1] 2026-07-23 10:00 [low] Old fact"
CHUNK = "[Source entry id: run-1:3]\n[User @ 2026-07-23 10:05]: please fix the parser"
INPUT = MEMORY + STABLE_PREFIX_END + CHUNK + "\n\nCurrent local time fallback: 2026-07-23 10:06"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


def _model(server: ScriptedServer) -> AnthropicChatModel:
    return AnthropicChatModel(server.root_url, "sk-ant-test", timeout_s=10, max_retries=0)


def test_the_conversation_becomes_a_messages_request_with_cache_breakpoints() -> None:
    spec = record_observations_spec()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You observe."},
        {"role": "user", "content": INPUT},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "record_observations", "arguments": "{}"},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "record_observations", "arguments": "[1"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"status":"rejected"}'},
        {"role": "tool", "tool_call_id": "c2", "content": '{"status":"rejected"}'},
    ]
    body = anthropic_request(ChatRequest("claude-haiku-4-5", messages, [spec], 30.0))
    assert body["model"] == "claude-haiku-4-5" and body["max_tokens"] > 0
    assert body["system"] == [
        {"type": "text", "text": "You observe.", "cache_control": {"type": "ephemeral"}}
    ]
    [tool] = body["tools"]
    assert tool["name"] == "record_observations" and tool["cache_control"] == {"type": "ephemeral"}
    assert tool["input_schema"] == spec["function"]["parameters"]
    first, answer, results = body["messages"]
    # The memory section (the stable prefix of a session's calls) is a cached block of its own.
    assert first["content"][0] == {"type": "text", "text": MEMORY, "cache_control": {"type": "ephemeral"}}
    assert "".join(block["text"] for block in first["content"]) == INPUT
    assert [block["type"] for block in answer["content"]] == ["tool_use", "tool_use"]
    assert answer["content"][1]["input"] == {}  # arguments that are no object are sent as {}
    assert results["role"] == "user" and [r["tool_use_id"] for r in results["content"]] == ["c1", "c2"]
    plain = anthropic_request(ChatRequest("m", [{"role": "user", "content": "no memory here"}], [], 5.0))
    assert plain["messages"][0]["content"] == [{"type": "text", "text": "no memory here"}]
    assert "system" not in plain and "tools" not in plain


def test_the_tool_loop_runs_on_native_tool_use_and_counts_cached_tokens(server: ScriptedServer) -> None:
    memory = ToolUseMemoryModel(ScriptedMemoryModel(), usage=(300, 40, 200))
    server.messages_default = memory
    recorded: list[object] = []

    def handler(arguments: object) -> dict[str, Any]:
        recorded.append(arguments)
        return {"status": "accepted"}

    result = run_tool_loop(
        _model(server),
        model="anthropic/claude-haiku-4-5",
        instructions="You observe.",
        input_text=INPUT,
        tools=[(record_observations_spec(), handler)],
        max_tool_calls=4,
        max_duration_s=30,
    )
    assert memory.requests == 1 and result.rounds == 2  # the answer, then the receipt round
    [arguments] = recorded
    assert isinstance(arguments, dict) and arguments["observations"][0]["source_refs"] == [
        {"run_id": "run-1", "seq": 3}
    ]
    assert (result.prompt_tokens, result.cached_prompt_tokens, result.completion_tokens) == (1000, 400, 80)
    first = server.messages_requests[0]
    credentials = first.headers.get("x-api-key", "") + first.headers.get("authorization", "")
    assert first.body["model"] == "claude-haiku-4-5" and "sk-ant-test" in credentials
    assert first.body["tools"][0]["cache_control"] == {"type": "ephemeral"}


@pytest.mark.parametrize(
    ("reply", "category", "reason"),
    [
        (api_error(401, "authentication_error"), "bad_response", "model_auth"),
        (api_error(404, "not_found_error"), "bad_response", "model_not_found"),
        (api_error(429, "rate_limit_error"), "rate_limited", "transient_runtime"),
        (api_error(529, "overloaded_error"), "server_error", "transient_runtime"),
    ],
)
def test_failures_are_typed_with_their_status(
    server: ScriptedServer, reply: Reply, category: str, reason: str
) -> None:
    server.messages_default = lambda body: reply
    with pytest.raises(ModelCallError) as info:
        _model(server).complete(ChatRequest("m", [{"role": "user", "content": "x"}], [], 5.0))
    assert info.value.category == category and failure_reason(info.value)[0] == reason


def test_a_used_up_credit_balance_is_a_quota_failure(server: ScriptedServer) -> None:
    body = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "Your credit balance is too low"},
    }
    server.messages_default = lambda _: Reply(status=400, body=body, headers={"x-should-retry": "false"})
    with pytest.raises(ModelCallError) as info:
        _model(server).complete(ChatRequest("m", [{"role": "user", "content": "x"}], [], 5.0))
    assert info.value.category == "quota_exhausted" and failure_reason(info.value)[0] == "model_quota"
    assert "credit" not in str(info.value)  # the body is matched, never kept


def test_settings_need_no_providers_block_and_read_the_key_from_the_environment() -> None:
    settings = settings_from_mapping({"model": "anthropic/claude-haiku-4-5"})
    provider = settings.model_provider()
    assert (provider.kind, provider.api_key_env, provider.context_window, provider.base_url) == (
        "anthropic",
        "ANTHROPIC_API_KEY",
        200_000,
        None,
    )
    with pytest.raises(MissingApiKeyError, match="ANTHROPIC_API_KEY"):
        model_for(settings, "anthropic/claude-haiku-4-5", environ={})
    model, window = model_for(settings, "anthropic/claude-haiku-4-5", environ={"ANTHROPIC_API_KEY": "k"})
    assert isinstance(model, AnthropicChatModel) and window == 200_000
    custom = settings_from_mapping(
        {
            "model": "anthropic/claude-sonnet-4-5",
            "providers": {
                "anthropic": {
                    "base_url": "https://proxy.example/v1",
                    "api_key_env": "MY_KEY",
                    "context_window": 1000,
                }
            },
        }
    ).model_provider()
    assert (custom.base_url, custom.api_key_env, custom.context_window) == (
        "https://proxy.example/v1",
        "MY_KEY",
        1000,
    )
    assert sdk_base_url(custom.base_url) == "https://proxy.example" and sdk_base_url(None) is None
    with pytest.raises(SettingsError, match=r"providers\.anthropic has unknown keys"):
        settings_from_mapping({"providers": {"anthropic": {"command": "x"}}})
    assert json.dumps(custom.model_dump()).count("sk-") == 0
