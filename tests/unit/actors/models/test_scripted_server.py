"""The scripted server's embeddings, rerank and Anthropic Messages routes (used by the semantic and
claude-code tests too)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from actors.models.cli_prompt import answer_schema
from protocol.tool_specs import record_observations_spec
from testkit.anthropic_messages import (
    HISTORY_MARKER,
    STRUCTURED_OUTPUT_TOOL,
    StructuredMemoryModel,
    api_error,
    structured_reply,
)
from testkit.scripted_models import ScriptedMemoryModel
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


def _raw_post(url: str, body: dict[str, Any]) -> tuple[str, bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return str(response.headers["Content-Type"]), response.read()


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in raw.decode().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields:
            found.append((fields["event"], json.loads(fields["data"])))
    return found


def test_messages_are_streamed_when_asked_and_json_otherwise() -> None:
    calls = [("record_observations", {"observations": []})]
    with ScriptedServer() as server:
        server.push_messages(
            structured_reply(calls), structured_reply(calls), api_error(401, "authentication_error")
        )
        kind, raw = _raw_post(server.root_url + "/v1/messages?beta=true", {"stream": True, "messages": []})
        assert kind == "text/event-stream"
        events = _events(raw)
        assert [name for name, _ in events] == [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        assert events[1][1]["content_block"]["name"] == STRUCTURED_OUTPUT_TOOL
        arguments = json.loads(events[2][1]["delta"]["partial_json"])
        assert arguments == {
            "tool_calls": [{"name": "record_observations", "arguments": {"observations": []}}]
        }
        assert events[4][1]["delta"]["stop_reason"] == "tool_use"
        status, body = post(server.root_url + "/v1/messages", {"messages": []})
        assert status == 200 and body["content"][0]["input"] == arguments
        status, body = post(server.root_url + "/v1/messages", {"stream": True, "messages": []})
        assert status == 401 and body["error"]["type"] == "authentication_error"
        assert post(server.root_url + "/v1/messages/count_tokens", {})[1] == {"input_tokens": 10}
        assert len(server.messages_requests) == 3


def test_the_structured_memory_model_answers_first_rounds_only() -> None:
    model = StructuredMemoryModel(ScriptedMemoryModel())
    schema = answer_schema([record_observations_spec()])
    chunk = "NEW SOURCE-ADDRESSED CONVERSATION CHUNK:\n[Source entry id: s1:4]\n[User @ 2026-12-01 10:00]: hi"
    tools = [{"name": STRUCTURED_OUTPUT_TOOL, "input_schema": schema}]
    first = model(
        {"tools": tools, "messages": [{"role": "user", "content": [{"type": "text", "text": chunk}]}]}
    )
    [block] = first.body["content"]
    [call] = block["input"]["tool_calls"]
    assert call["name"] == "record_observations"
    assert call["arguments"]["observations"][0]["source_refs"] == [{"run_id": "s1", "seq": 4}]
    later = chunk + "\n\n" + HISTORY_MARKER + ":\n[Answer 1] {}"
    again = model({"tools": tools, "messages": [{"role": "user", "content": later}]})
    assert again.body["content"][0]["input"] == {"tool_calls": []}
    result = [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]
    assert (
        model({"tools": tools, "messages": [{"role": "user", "content": result}]}).body["stop_reason"]
        == "end_turn"
    )
