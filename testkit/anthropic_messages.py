"""Anthropic Messages API answers for :class:`testkit.scripted_server.ScriptedServer` (tests, benchmarks).

The real ``claude`` CLI, pointed at the scripted server with ``ANTHROPIC_BASE_URL``, calls
``POST /v1/messages`` (streaming: server-sent events) and sometimes
``/v1/messages/count_tokens``. A scripted Messages reply is a :class:`~testkit.scripted_server.Reply`
whose body is one Messages API ``message``; the server sends it as an event stream when the request
asked to stream (:func:`testkit.anthropic_stream.event_stream`), else as JSON.

:class:`StructuredMemoryModel` answers omray's CLI runs: the CLI turns ``--json-schema`` into a
``StructuredOutput`` tool, and the model's answer is a call of that tool with omray's
``{"tool_calls": [...]}`` (what :mod:`actors.models.cli_prompt` asks for), built by a memory
model's ``calls_for`` (:class:`testkit.scripted_models.ScriptedMemoryModel`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from testkit.scripted_server import Reply

STRUCTURED_OUTPUT_TOOL = "StructuredOutput"
"""The tool name Claude Code gives the ``--json-schema`` answer."""
HISTORY_MARKER = "YOUR EARLIER ANSWERS IN THIS TASK"
"""Opens the earlier rounds in a rendered CLI prompt (``actors.models.cli_prompt``)."""

_ids = itertools.count(1)


def message(
    content: Sequence[Mapping[str, Any]], stop_reason: str, usage: tuple[int, int] = (100, 20)
) -> dict[str, Any]:
    """A Messages API ``message`` with these content blocks."""
    return {
        "id": f"msg_scripted_{next(_ids)}",
        "type": "message",
        "role": "assistant",
        "model": "scripted",
        "content": [dict(block) for block in content],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def text_reply(text: str, usage: tuple[int, int] = (100, 20)) -> Reply:
    """A reply ending the turn with ``text``."""
    return Reply(body=message([{"type": "text", "text": text}], "end_turn", usage))


def tool_use_reply(name: str, arguments: Mapping[str, Any], usage: tuple[int, int] = (100, 20)) -> Reply:
    """A reply calling tool ``name``."""
    block = {"type": "tool_use", "id": f"toolu_scripted_{next(_ids)}", "name": name, "input": dict(arguments)}
    return Reply(body=message([block], "tool_use", usage))


def structured_reply(
    calls: Sequence[tuple[str, Mapping[str, Any]]], usage: tuple[int, int] = (100, 20)
) -> Reply:
    """The ``StructuredOutput`` call holding omray's answer ``{"tool_calls": [...]}``."""
    answer = {"tool_calls": [{"name": name, "arguments": dict(arguments)} for name, arguments in calls]}
    return tool_use_reply(STRUCTURED_OUTPUT_TOOL, answer, usage)


def api_error(status: int, error_type: str = "api_error") -> Reply:
    """An Anthropic error body with this HTTP status (``x-should-retry: false``: no client retries)."""
    body = {"type": "error", "error": {"type": error_type, "message": f"scripted error {status}"}}
    return Reply(status=status, body=body, headers={"x-should-retry": "false"})


def _texts(content: object) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    return [
        str(block.get("text", ""))
        for block in content
        if isinstance(block, Mapping) and block.get("type") == "text"
    ]


def prompt_text(content: object) -> str:
    """The text blocks of a message's content, one per line."""
    return "\n".join(_texts(content))


def has_tool_result(content: object) -> bool:
    """Whether a message's content carries a ``tool_result`` block."""
    return isinstance(content, list) and any(
        isinstance(block, Mapping) and block.get("type") == "tool_result" for block in content
    )


def offered_tool(body: Mapping[str, Any]) -> str | None:
    """The omray tool an answer schema offers (the first one), or ``None`` without ``StructuredOutput``."""
    for tool in body.get("tools") or ():
        if isinstance(tool, Mapping) and tool.get("name") == STRUCTURED_OUTPUT_TOOL:
            items = tool["input_schema"]["properties"]["tool_calls"]["items"]
            first = items["anyOf"][0] if "anyOf" in items else items
            return str(first["properties"]["name"]["enum"][0])
    return None


class MemoryModel(Protocol):
    """What :class:`StructuredMemoryModel` asks for its answers."""

    def calls_for(self, tool: str, text: str) -> list[tuple[str, dict[str, Any]]]:
        """Tool calls answering a first request offering ``tool`` with input ``text``."""
        ...


class StructuredMemoryModel:
    """Answers omray's ``claude -p`` runs through ``StructuredOutput`` with ``model.calls_for``.

    A first round gets the model's calls; a later round (the prompt holds earlier answers) gets an
    empty answer; a request carrying a tool result (the CLI's turn after the structured answer)
    gets a short text. ``requests`` counts the structured answers given.
    """

    def __init__(self, model: MemoryModel) -> None:
        self.model = model
        self.answers = 0

    def __call__(self, body: Mapping[str, Any]) -> Reply:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        tool = offered_tool(body)
        if tool is None or has_tool_result(last.get("content")):
            return text_reply("Done.")
        self.answers += 1
        prompt = prompt_text(last.get("content"))
        if HISTORY_MARKER in prompt:
            return structured_reply([])
        return structured_reply(self.model.calls_for(tool, prompt))


class ToolUseMemoryModel:
    """Answers omray's own Messages API calls (``anthropic/<model>``: native tool use) with
    ``model.calls_for``: a first request gets ``tool_use`` blocks for the tool it offers; a request
    whose last message carries tool results gets a short text. ``requests`` counts the answers with
    tool calls; ``usage`` is what every answer reports (input, output, cache read)."""

    def __init__(self, model: MemoryModel, usage: tuple[int, int, int] = (100, 20, 0)) -> None:
        self.model = model
        self.usage = usage
        self.requests = 0

    def __call__(self, body: Mapping[str, Any]) -> Reply:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        tools = [str(tool.get("name")) for tool in body.get("tools") or () if isinstance(tool, Mapping)]
        if not tools or has_tool_result(last.get("content")):
            return self._reply([{"type": "text", "text": "Done."}], "end_turn")
        self.requests += 1
        calls = self.model.calls_for(tools[0], prompt_text(last.get("content")))
        blocks = [
            {"type": "tool_use", "id": f"toolu_scripted_{next(_ids)}", "name": name, "input": dict(arguments)}
            for name, arguments in calls
        ]
        return self._reply(blocks, "tool_use")

    def _reply(self, content: list[dict[str, Any]], stop_reason: str) -> Reply:
        body = message(content, stop_reason, self.usage[:2])
        body["usage"]["cache_read_input_tokens"] = self.usage[2]
        return Reply(body=body)
