"""One model, embedding and rerank client per endpoint and process, reused by every job, closed once."""

from __future__ import annotations

from typing import Any

import pytest

from actors.models.chat import OpenAIChatModel
from actors.models.clients import ClientPool, worker_clients
from actors.models.embeddings import OpenAIEmbedder
from actors.models.registry import embedder_for, model_for, reranker_for
from persistence.settings.parse import semantic_from_mapping, settings_from_mapping
from protocol.settings import OmSettings

KEY_ENV = "OMRAY_TEST_KEY"


def settings(base_url: str = "http://127.0.0.1:9/v1", timeout_s: int = 7) -> OmSettings:
    provider = {"base_url": base_url, "context_window": 8192, "timeout_s": timeout_s, "api_key_env": KEY_ENV}
    return settings_from_mapping({"model": "local/qwen3", "providers": {"local": provider}})


def chat(pool: ClientPool | None, base: OmSettings, key: str = "k1") -> Any:
    model, _ = model_for(base, "local/qwen3", environ={KEY_ENV: key}, clients=pool)
    return model


def test_one_chat_client_per_endpoint_is_reused_across_jobs() -> None:
    pool = ClientPool()
    first = chat(pool, settings())
    assert isinstance(first, OpenAIChatModel)
    assert chat(pool, settings()) is first
    assert chat(pool, settings("http://127.0.0.1:10/v1")) is not first
    assert chat(pool, settings(timeout_s=9)) is not first
    assert chat(pool, settings(), key="k2") is not first  # another key is another client
    assert len(pool) == 4
    pool.close()


def test_without_a_pool_each_call_builds_its_own_client() -> None:
    first, second = chat(None, settings()), chat(None, settings())
    assert first is not second
    first.close()
    second.close()


def test_close_closes_every_client_and_later_jobs_get_fresh_ones() -> None:
    pool = ClientPool()
    first = chat(pool, settings())
    other = chat(pool, settings("http://127.0.0.1:10/v1"))
    pool.close()
    assert first._client.is_closed() and other._client.is_closed()
    assert len(pool) == 0
    again = chat(pool, settings())
    assert again is not first and not again._client.is_closed()
    pool.close()


class Exploding:
    def close(self) -> None:
        raise OSError("socket already gone")


class Counting:
    closed = 0

    def close(self) -> None:
        Counting.closed += 1


def test_a_failing_close_does_not_keep_the_others_open(caplog: pytest.LogCaptureFixture) -> None:
    pool = ClientPool()
    pool.get("a", Exploding)
    pool.get("b", Counting)
    pool.close()
    assert Counting.closed == 1
    assert "OSError" in caplog.text and "socket already gone" not in caplog.text


def test_embedding_and_rerank_clients_are_reused_from_the_pool() -> None:
    semantic = semantic_from_mapping(
        {
            "embedding_api": {"base_url": "http://127.0.0.1:9/v1", "model_id": "nomic"},
            "reranker_api": {"base_url": "http://127.0.0.1:9/v1", "model_id": "bge"},
        }
    )
    assert semantic is not None
    pool = ClientPool()
    embedder = embedder_for(semantic, pool)
    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder_for(semantic, pool) is embedder
    reranker = reranker_for(semantic, pool)
    assert reranker is not None and reranker_for(semantic, pool) is reranker
    assert embedder_for(semantic) is not embedder
    pool.close()
    assert embedder._client.is_closed()


def test_the_worker_pool_is_one_per_process() -> None:
    assert worker_clients() is worker_clients()
