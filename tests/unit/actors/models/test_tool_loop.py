"""The tool loop through the real ``openai`` client against the local scripted server."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from actors.models.chat import (
    TOOL_CALL_LIMIT_MESSAGE,
    ChatResponse,
    ModelCallError,
    OpenAIChatModel,
    ToolCall,
    ToolLoopResult,
    run_tool_loop,
)
from protocol.tool_specs import RECORD_OBSERVATIONS, record_observations_spec
from protocol.tools import (
    ObservationReceipt,
    invalid_observations_receipt,
    observation_items,
    observation_receipt,
    parse_observation_draft,
)
from testkit.scripted_server import Reply, ScriptedServer, chat_text, chat_tool_calls, http_error

MODEL = "local/gpt-test"
GOOD_ITEM = {
    "timestamp": "2026-07-23 00:00",
    "content": "User wants feature flags",
    "relevance": "high",
    "source_refs": [{"run_id": "run-1", "seq": 1}],
}


class RecordingHandler:
    """A ``record_observations`` handler that keeps the arguments it got and counts accepted items."""

    def __init__(self) -> None:
        self.arguments: list[object] = []
        self.total = 0

    def __call__(self, arguments: object) -> ObservationReceipt:
        self.arguments.append(arguments)
        items = observation_items(arguments) if isinstance(arguments, Mapping) else None
        if items is None:
            return invalid_observations_receipt(self.total)
        drafts = [parse_observation_draft(item) for item in items]
        added = sum(draft is not None for draft in drafts)
        self.total += added
        return observation_receipt(added, 0, len(drafts) - added, self.total)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as scripted:
        yield scripted


def client_for(server: ScriptedServer, *, timeout_s: float = 5.0, max_retries: int = 0) -> OpenAIChatModel:
    return OpenAIChatModel(server.base_url, "sk-test", timeout_s=timeout_s, max_retries=max_retries)


def run(client: OpenAIChatModel, handler: RecordingHandler, **overrides: Any) -> ToolLoopResult:
    options: dict[str, Any] = {
        "model": MODEL,
        "instructions": "You are the observer.",
        "input_text": "CHUNK",
        "tools": [(record_observations_spec(), handler)],
        "max_tool_calls": 6,
        "max_duration_s": 30.0,
    }
    options.update(overrides)
    return run_tool_loop(client, **options)


def tool_messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [message for message in body["messages"] if message["role"] == "tool"]


def test_receipts_return_as_tool_messages_and_loop_stops_when_model_stops(server: ScriptedServer) -> None:
    server.push_chat(
        chat_tool_calls(
            (RECORD_OBSERVATIONS, {"observations": [GOOD_ITEM]}, "call_a"),
            (RECORD_OBSERVATIONS, {"observations": [{"content": "no timestamp"}]}, "call_b"),
            usage=(100, 20),
        ),
        chat_text("Recorded.", usage=(150, 3)),
    )
    handler = RecordingHandler()

    result = run(client_for(server), handler)

    assert result == ToolLoopResult(
        stop_reason="model_stopped",
        tool_calls=2,
        refused_tool_calls=0,
        rounds=2,
        prompt_tokens=250,
        completion_tokens=23,
    )
    first, second = (request.body for request in server.chat_requests)
    assert first["model"] == "gpt-test"
    assert first["tools"] == [record_observations_spec()]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][1]["content"] == "CHUNK"
    assistant = second["messages"][2]
    assert [call["id"] for call in assistant["tool_calls"]] == ["call_a", "call_b"]
    answers = tool_messages(second)
    assert [m["tool_call_id"] for m in answers] == ["call_a", "call_b"]
    assert json.loads(answers[0]["content"])["added"] == 1
    assert json.loads(answers[1]["content"])["error"] == "all_rejected"
    assert handler.total == 1


def test_cap_refuses_calls_beyond_it_in_the_same_reply_and_stops(server: ScriptedServer) -> None:
    call = (RECORD_OBSERVATIONS, {"observations": [GOOD_ITEM]})
    server.push_chat(chat_tool_calls(call, call, call), chat_text("never requested"))
    handler = RecordingHandler()

    result = run(client_for(server), handler, max_tool_calls=2)

    assert result.stop_reason == "tool_call_limit"
    assert (result.tool_calls, result.refused_tool_calls, result.rounds) == (2, 1, 1)
    assert len(handler.arguments) == 2
    assert len(server.chat_requests) == 1
    assert server.pending("chat") == 1


def test_cap_bounds_a_model_that_never_stops_calling() -> None:
    with ScriptedServer(
        chat_default=lambda _body: chat_tool_calls((RECORD_OBSERVATIONS, {"observations": []}))
    ) as endless:
        handler = RecordingHandler()
        result = run(client_for(endless), handler, max_tool_calls=3)
        assert (result.tool_calls, result.rounds, result.stop_reason) == (3, 3, "tool_call_limit")
        assert len(endless.chat_requests) == 3


def test_refused_calls_are_answered_with_the_limit_message() -> None:
    # A plain fake model (no HTTP): it keeps the transcript list the loop hands it.
    transcripts: list[Any] = []

    class Fake:
        def complete(
            self, model_name: str, messages: Any, tools: Any, timeout_s: float, **_: Any
        ) -> ChatResponse:
            transcripts.append(messages)
            calls = (
                ToolCall(call_id="a", name="t", arguments="{}"),
                ToolCall(call_id="b", name="t", arguments="{}"),
            )
            return ChatResponse(tool_calls=calls)

    spec = {"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}
    result = run_tool_loop(
        Fake(),
        model=MODEL,
        instructions="i",
        input_text="x",
        tools=[(spec, lambda args: {"ok": True})],
        max_tool_calls=1,
        max_duration_s=10,
    )

    assert (result.tool_calls, result.refused_tool_calls, result.rounds) == (1, 1, 1)
    answers = [m for m in transcripts[0] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == ["a", "b"]
    assert json.loads(answers[0]["content"]) == {"ok": True}
    assert TOOL_CALL_LIMIT_MESSAGE in answers[1]["content"]


def test_invalid_json_arguments_reach_the_handler_and_the_correction_goes_back(
    server: ScriptedServer,
) -> None:
    server.push_chat(
        chat_tool_calls((RECORD_OBSERVATIONS, '{"observations": [', "call_bad")),
        chat_tool_calls((RECORD_OBSERVATIONS, {"observations": [GOOD_ITEM]}, "call_good")),
        chat_text("done"),
    )
    handler = RecordingHandler()

    result = run(client_for(server), handler)

    assert handler.arguments[0] == '{"observations": ['
    assert result.tool_calls == 2 and result.rounds == 3
    correction = json.loads(tool_messages(server.chat_requests[1].body)[0]["content"])
    assert correction["status"] == "rejected"
    assert correction["error"] == "invalid_arguments"
    assert tool_messages(server.chat_requests[1].body)[0]["tool_call_id"] == "call_bad"
    assert handler.total == 1


def test_unknown_tool_gets_a_rejection_receipt(server: ScriptedServer) -> None:
    server.push_chat(chat_tool_calls(("delete_everything", {}, "call_x")), chat_text("ok"))
    handler = RecordingHandler()

    result = run(client_for(server), handler)

    answer = json.loads(tool_messages(server.chat_requests[1].body)[0]["content"])
    assert answer["error"] == "unknown_tool"
    assert handler.arguments == []
    assert result.tool_calls == 1


def test_server_error_then_success_is_retried_by_the_client(server: ScriptedServer) -> None:
    server.push_chat(http_error(500), chat_text("fine"))

    result = run(client_for(server, max_retries=1), RecordingHandler())

    assert result.rounds == 1
    assert len(server.chat_requests) == 2


def test_server_error_without_retries_is_a_model_call_error(server: ScriptedServer) -> None:
    server.push_chat(http_error(500))

    with pytest.raises(ModelCallError) as caught:
        run(client_for(server, max_retries=0), RecordingHandler())

    assert caught.value.category == "server_error"
    assert caught.value.status_code == 500
    assert "scripted error" not in str(caught.value)


@pytest.mark.parametrize(
    ("reply", "category", "status"),
    [
        (http_error(429), "rate_limited", 429),
        (http_error(400), "bad_response", 400),
        (Reply(body=b"this is not json"), "bad_response", None),
        (Reply(body={"id": "x", "object": "chat.completion", "choices": []}), "bad_response", None),
    ],
)
def test_errors_map_to_categories(
    server: ScriptedServer, reply: Reply, category: str, status: int | None
) -> None:
    server.push_chat(reply)

    with pytest.raises(ModelCallError) as caught:
        run(client_for(server), RecordingHandler())

    assert (caught.value.category, caught.value.status_code) == (category, status)


def test_slow_reply_past_the_timeout_is_a_timeout(server: ScriptedServer) -> None:
    server.push_chat(chat_text("too late", delay_s=30))

    with pytest.raises(ModelCallError) as caught:
        run(client_for(server, timeout_s=0.3), RecordingHandler())

    assert caught.value.category == "timeout"


def test_loop_budget_shrinks_request_timeouts_and_stops_when_spent(server: ScriptedServer) -> None:
    server.push_chat(chat_tool_calls((RECORD_OBSERVATIONS, {"observations": []})), chat_text("never"))
    ticks = iter([0.0, 1.0, 11.0])

    with pytest.raises(ModelCallError) as caught:
        run(client_for(server), RecordingHandler(), max_duration_s=10.0, clock=lambda: next(ticks))

    assert caught.value.category == "timeout"
    assert len(server.chat_requests) == 1


def test_connection_refused_is_a_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = OpenAIChatModel(f"http://127.0.0.1:{port}/v1", "sk-test", timeout_s=2, max_retries=0)

    with pytest.raises(ModelCallError) as caught:
        run(client, RecordingHandler())

    assert caught.value.category == "connection"


def test_thinking_off_body_is_sent_only_when_configured_and_asked(server: ScriptedServer) -> None:
    server.push_chat(chat_text("a"), chat_text("b"), chat_text("c"))
    switch = {"chat_template_kwargs": {"enable_thinking": False}}
    configured = OpenAIChatModel(server.base_url, "k", timeout_s=5, max_retries=0, thinking_off_body=switch)

    run(configured, RecordingHandler(), thinking_off=True)
    run(configured, RecordingHandler(), thinking_off=False)
    run(client_for(server), RecordingHandler(), thinking_off=True)

    bodies = [request.body for request in server.chat_requests]
    assert bodies[0]["chat_template_kwargs"] == {"enable_thinking": False}
    assert "chat_template_kwargs" not in bodies[1]
    assert "chat_template_kwargs" not in bodies[2]
