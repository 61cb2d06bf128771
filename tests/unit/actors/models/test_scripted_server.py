"""The scripted server's embeddings and rerank routes (used by the semantic tests too)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from testkit.scripted_server import (
    ScriptedServer,
    embeddings_reply,
    hash_vector,
    http_error,
    rerank_reply,
)


def post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_embeddings_default_is_deterministic_and_queued_replies_come_first() -> None:
    with ScriptedServer() as server:
        server.push_embeddings(embeddings_reply([[1.0, 0.0]]), http_error(503))

        assert post(server.base_url + "/embeddings", {"model": "m", "input": ["a"]})[1]["data"][0][
            "embedding"
        ] == [1.0, 0.0]
        assert post(server.base_url + "/embeddings", {"model": "m", "input": ["a"]})[0] == 503
        status, body = post(server.base_url + "/embeddings", {"model": "m", "input": ["a", "b"]})

        assert status == 200
        assert [item["embedding"] for item in body["data"]] == [hash_vector("a"), hash_vector("b")]
        assert server.requests_to("/embeddings")[2].body == {"model": "m", "input": ["a", "b"]}


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank"])
def test_rerank_default_scores_word_overlap_and_respects_top_n(path: str) -> None:
    with ScriptedServer() as server:
        body = {
            "model": "r",
            "query": "red fox",
            "documents": ["blue sky", "red fox", "a red car"],
            "top_n": 2,
        }
        status, reply = post(server.root_url + path, body)

        assert status == 200
        assert reply["results"] == [
            {"index": 1, "relevance_score": 2.0},
            {"index": 2, "relevance_score": 1.0},
        ]

        server.push_rerank(rerank_reply([(0, 0.5)]))
        assert post(server.root_url + path, body)[1]["results"] == [{"index": 0, "relevance_score": 0.5}]


def test_empty_chat_queue_is_a_non_retryable_error() -> None:
    with ScriptedServer() as server:
        status, _ = post(server.base_url + "/chat/completions", {"model": "m", "messages": []})
        assert status == 500
        assert len(server.chat_requests) == 1
