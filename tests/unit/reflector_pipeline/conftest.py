"""A temporary memory database per test, and a scripted OpenAI-compatible server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.models import OpenAIChatModel
from bench.scripted_server import ScriptedServer
from persistence.queries import MemoryReader
from persistence.store import Store

THINKING_OFF_BODY = {"chat_template_kwargs": {"enable_thinking": False}}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "om.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    opened = Store(db_path)
    yield opened
    opened.close()


@pytest.fixture
def reader(store: Store, db_path: Path) -> MemoryReader:
    return MemoryReader(db_path)


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
