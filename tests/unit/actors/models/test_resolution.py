"""Choosing the embedder and reranker from settings, and the query text of §14.5 step 6."""

from __future__ import annotations

from typing import Any

import pytest

from actors.models.embeddings import HttpReranker, OpenAIEmbedder
from actors.models.offline_embedder import MiniLMEmbedder, default_offline_embedder
from actors.models.registry import embedder_for, reranker_for
from actors.read.retrieval import query_text_for_embedding
from persistence.settings.parse import semantic_from_mapping
from protocol.settings import BUILTIN_EMBEDDING_MODEL, SemanticSettings


def semantic(block: dict[str, Any]) -> SemanticSettings:
    settings = semantic_from_mapping(block)
    assert settings is not None
    return settings


def test_builtin_model_id_selects_the_shared_offline_embedder() -> None:
    settings = semantic({"embedding_api": {"model_id": BUILTIN_EMBEDDING_MODEL}})
    first = embedder_for(settings)
    assert isinstance(first, MiniLMEmbedder)
    assert first is embedder_for(settings) is default_offline_embedder()
    assert reranker_for(settings) is None


def test_endpoint_settings_select_the_http_clients() -> None:
    settings = semantic(
        {
            "embedding_api": {"base_url": "http://127.0.0.1:9/v1/", "model_id": "nomic"},
            "reranker_api": {
                "base_url": "http://127.0.0.1:9/v1",
                "model_id": "bge",
                "batch_size": 3,
                "document_characters": 100,
                "min_score": -4,
            },
        }
    )
    embedder = embedder_for(settings)
    assert isinstance(embedder, OpenAIEmbedder)
    assert (embedder.base_url, embedder.model_id, embedder.timeout_s) == (
        "http://127.0.0.1:9/v1",
        "nomic",
        10,
    )
    reranker = reranker_for(settings)
    assert isinstance(reranker, HttpReranker)
    assert reranker.url == "http://127.0.0.1:9/v1/rerank"
    assert (reranker.model_id, reranker.batch_size, reranker.document_characters, reranker.min_score) == (
        "bge",
        3,
        100,
        -4.0,
    )


@pytest.mark.parametrize(
    ("prefix", "query", "expected"),
    [
        (
            "Represent this query for searching relevant code:",
            "parse dates",
            "Represent this query for searching relevant code: parse dates",
        ),
        ("", "parse dates", "parse dates"),
        ("q:", "", "q: "),
    ],
)
def test_query_text_for_embedding(prefix: str, query: str, expected: str) -> None:
    assert query_text_for_embedding(prefix, query) == expected
