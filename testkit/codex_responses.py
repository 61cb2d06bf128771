"""OpenAI Responses API answers for the scripted server, as ``codex exec`` reads them (tests).

``codex exec`` pointed at the scripted server (a ``model_providers`` entry with ``wire_api =
"responses"``) streams ``POST /v1/responses``. :func:`responses_reply` is one answer as that event
stream, and :class:`StructuredResponsesModel` answers omray's runs, whose output schema asks for
``{"tool_calls": [...]}``, with a memory model's ``calls_for``
(:class:`testkit.scripted_models.ScriptedMemoryModel`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from testkit.anthropic_messages import HISTORY_MARKER, MemoryModel
from testkit.scripted_server import Reply
from testkit.sse import sse_body


def response_message(
    text: str, usage: tuple[int, int], *, ids: str, model: str | None = None
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """One output message ``text`` as the Responses API streams it: the message item, the response as
    created (``in_progress``, no output yet) and as completed; ``ids`` names the message
    (``msg_<ids>``) and the response (``resp_<ids>``), ``usage`` is (input, output) tokens."""
    item = {
        "type": "message",
        "id": f"msg_{ids}",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    response = {
        "id": f"resp_{ids}",
        "object": "response",
        "created_at": 0,
        "status": "in_progress",
        **({"model": model} if model is not None else {}),
        "output": [],
    }
    done = {
        **response,
        "status": "completed",
        "output": [item],
        "usage": {
            "input_tokens": usage[0],
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage[1],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": sum(usage),
        },
    }
    return item, response, done


def responses_reply(text: str, usage: tuple[int, int] = (100, 20)) -> Reply:
    """A streamed response holding one output message ``text``."""
    item, response, done = response_message(text, usage, ids="scripted")
    events: list[tuple[str, Mapping[str, Any]]] = [
        ("response.created", {"type": "response.created", "response": response}),
        (
            "response.output_item.added",
            {"type": "response.output_item.added", "output_index": 0, "item": item},
        ),
        ("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}),
        ("response.completed", {"type": "response.completed", "response": done}),
    ]
    return Reply(body=sse_body(events), content_type="text/event-stream")


def _input_text(body: Mapping[str, Any]) -> str:
    texts = []
    for item in body.get("input") or ():
        if isinstance(item, Mapping) and item.get("role") == "user":
            for part in item.get("content") or ():
                if isinstance(part, Mapping) and isinstance(part.get("text"), str):
                    texts.append(part["text"])
    return "\n".join(texts)


def offered_tool(body: Mapping[str, Any]) -> str | None:
    """The omray tool the output schema offers (the first), or ``None`` without one."""
    fmt = (body.get("text") or {}).get("format") or {}
    schema = fmt.get("schema") if isinstance(fmt, Mapping) else None
    if not isinstance(schema, Mapping) or "tool_calls" not in (schema.get("properties") or {}):
        return None
    items = schema["properties"]["tool_calls"]["items"]
    first = items["anyOf"][0] if "anyOf" in items else items
    return str(first["properties"]["name"]["enum"][0])


class StructuredResponsesModel:
    """Answers omray's ``codex exec`` runs: a first round gets the model's calls, a later one none."""

    def __init__(self, model: MemoryModel) -> None:
        self.model = model

    def __call__(self, body: Mapping[str, Any]) -> Reply:
        tool = offered_tool(body)
        if tool is None:
            return responses_reply("Done.")
        prompt = _input_text(body)
        calls: Sequence[tuple[str, Mapping[str, Any]]] = []
        if HISTORY_MARKER not in prompt:
            calls = self.model.calls_for(tool, prompt)
        answer = {"tool_calls": [{"name": name, "arguments": dict(args)} for name, args in calls]}
        return responses_reply(json.dumps(answer))
