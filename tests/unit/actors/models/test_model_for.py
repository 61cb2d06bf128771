"""Resolving ``provider/model`` references to chat models (settings -> client)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.models.builtin import BuiltinExtractiveModel
from actors.models.chat import (
    NO_KEY_PLACEHOLDER,
    MissingApiKeyError,
    OpenAIChatModel,
    UnknownModelError,
    UnknownProviderError,
    run_tool_loop,
)
from actors.models.registry import model_for
from persistence.settings.parse import settings_from_mapping
from protocol.errors import ModelSettingsError
from protocol.settings import BUILTIN_CONTEXT_WINDOW, OmSettings
from testkit.scripted_server import ScriptedServer, chat_text

SECRET_VALUE = "sk-live-do-not-print-0123456789"


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def settings_with(base_url: str, api_key_env: str | None = "OMRAY_TEST_KEY") -> OmSettings:
    entry: dict[str, object] = {"base_url": base_url, "context_window": 8192, "timeout_s": 7}
    if api_key_env is not None:
        entry["api_key_env"] = api_key_env
    return settings_from_mapping({"model": "local/qwen3", "providers": {"local": entry}})


def say_hello(client: object) -> None:
    run_tool_loop(
        client,  # type: ignore[arg-type]
        model="local/qwen3",
        instructions="i",
        input_text="x",
        tools=[],
        max_tool_calls=1,
        max_duration_s=10,
    )


def test_builtin_extractive_resolves_without_network_or_key() -> None:
    model, context_window = model_for(OmSettings(), "builtin/extractive", environ={})
    assert isinstance(model, BuiltinExtractiveModel)
    assert context_window == BUILTIN_CONTEXT_WINDOW


def test_other_builtin_models_are_unknown() -> None:
    with pytest.raises(UnknownModelError, match="'builtin/gpt-9'"):
        model_for(OmSettings(), "builtin/gpt-9")


def test_unknown_provider_is_named() -> None:
    with pytest.raises(UnknownProviderError, match="'nope'"):
        model_for(settings_with("http://127.0.0.1:9/v1"), "nope/some-model")


def test_reference_without_provider_is_a_model_settings_error() -> None:
    with pytest.raises(ModelSettingsError):
        model_for(OmSettings(), "gpt-4o")


def test_missing_key_variable_names_the_variable_not_a_value() -> None:
    with pytest.raises(MissingApiKeyError) as caught:
        model_for(settings_with("http://127.0.0.1:9/v1"), "local/qwen3", environ={"OTHER": SECRET_VALUE})
    assert "'OMRAY_TEST_KEY'" in str(caught.value)
    assert SECRET_VALUE not in str(caught.value)


def test_empty_key_variable_counts_as_missing() -> None:
    with pytest.raises(MissingApiKeyError):
        model_for(settings_with("http://127.0.0.1:9/v1"), "local/qwen3", environ={"OMRAY_TEST_KEY": "  "})


def test_provider_key_from_environment_is_sent_as_bearer(server: ScriptedServer) -> None:
    server.push_chat(chat_text("hi"))
    model, context_window = model_for(
        settings_with(server.base_url), "local/qwen3", environ={"OMRAY_TEST_KEY": SECRET_VALUE}
    )
    assert isinstance(model, OpenAIChatModel)
    assert context_window == 8192
    assert model.timeout_s == 7

    say_hello(model)

    request = server.chat_requests[0]
    assert request.headers["authorization"] == f"Bearer {SECRET_VALUE}"
    assert request.body["model"] == "qwen3"


def test_provider_without_key_variable_sends_the_placeholder(server: ScriptedServer) -> None:
    server.push_chat(chat_text("hi"))
    model, _ = model_for(settings_with(server.base_url, api_key_env=None), "local/qwen3", environ={})

    say_hello(model)

    assert server.chat_requests[0].headers["authorization"] == f"Bearer {NO_KEY_PLACEHOLDER}"
