"""A temporary memory database per test, and a scripted OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from actors.models.chat import OpenAIChatModel
from testkit.scripted_server import ScriptedServer

THINKING_OFF_BODY = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


@pytest.fixture
def chat(server: ScriptedServer) -> Iterator[OpenAIChatModel]:
    client = OpenAIChatModel(
        server.base_url, "sk-test", timeout_s=10, max_retries=0, thinking_off_body=THINKING_OFF_BODY
    )
    yield client
    client.close()
