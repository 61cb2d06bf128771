"""A tool-calling conversation as one prompt for an agent's CLI, and the CLI's answer back as tool calls.

An agent's CLI run headless (``claude -p``) answers one prompt and exits: it has no native tool
calls of omray's tools and no memory of an earlier run. :func:`render_prompt` therefore turns a
:class:`~actors.models.chat.ChatRequest` into a system prompt and one user prompt holding the whole
conversation so far (the stage's input, then each earlier answer and the receipts its calls got),
and :func:`answer_schema` into a JSON schema the CLI's structured output must follow::

    {"tool_calls": [{"name": "record_observations", "arguments": {...}}, ...]}

:func:`parse_answer` validates that answer strictly and gives it back as :class:`ToolCall` values,
so :func:`~actors.models.chat.run_tool_loop` runs the handlers, sends the receipts and decides
about another round exactly as with a native tool-calling model. Pure functions: no I/O.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from actors.models.chat import ModelCallError, ToolCall

ANSWER_KEY = "tool_calls"
"""The one key of an answer: the list of tool calls (empty: no call, the task is done)."""

_ANSWER_RULES = (
    "HOW TO ANSWER: you cannot call tools directly here. Answer with one JSON object through the "
    'structured output: {"tool_calls": [{"name": <tool name>, "arguments": {<the tool\'s arguments>}}]}. '
    "List every call you would make now, in order. Each call gets a receipt; when the receipts are "
    "shown to you, answer again with further calls for what is missing or was rejected. When nothing "
    'is left to do (or nothing is worth recording), answer {"tool_calls": []}.'
)
_HISTORY_HEADER = "YOUR EARLIER ANSWERS IN THIS TASK, AND THE RECEIPTS OF THEIR CALLS:"
_CONTINUE = (
    "Answer again now: further tool calls for what is still uncovered or was rejected, or "
    '{"tool_calls": []} when you are done.'
)


def _function(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    function = spec.get("function")
    return function if isinstance(function, Mapping) else {}


def answer_schema(tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The JSON schema of an answer: a list of calls, each one of ``tools`` with its own parameters."""
    variants = [
        {
            "type": "object",
            "additionalProperties": False,
            "required": ["name", "arguments"],
            "properties": {
                "name": {"type": "string", "enum": [str(_function(spec).get("name", ""))]},
                "arguments": dict(_function(spec).get("parameters") or {"type": "object"}),
            },
        }
        for spec in tools
    ]
    item: dict[str, Any] = variants[0] if len(variants) == 1 else {"anyOf": variants}
    return {
        "type": "object",
        "additionalProperties": False,
        "required": [ANSWER_KEY],
        "properties": {ANSWER_KEY: {"type": "array", "items": item}},
    }


def _compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _tools_text(tools: Sequence[Mapping[str, Any]]) -> str:
    lines = ["TOOLS YOU MAY CALL:"]
    for spec in tools:
        function = _function(spec)
        lines.append(f"- {function.get('name', '')}: {function.get('description', '')}")
        lines.append(f"  arguments (JSON schema): {_compact(function.get('parameters') or {})}")
    return "\n".join(lines)


def _answer_text(message: Mapping[str, Any]) -> str:
    calls = []
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        arguments: object = function.get("arguments", "")
        with contextlib.suppress(ValueError):  # else shown as the string it was
            arguments = json.loads(str(arguments))
        calls.append({"id": call.get("id"), "name": function.get("name"), "arguments": arguments})
    return _compact({ANSWER_KEY: calls})


def render_prompt(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
) -> tuple[str, str]:
    """``(system prompt, user prompt)`` of a conversation in the OpenAI wire format.

    The system prompt is the stage's instructions, the tools and :data:`_ANSWER_RULES`. The user
    prompt is the stage's input; after a first round it goes on with every earlier answer (its calls
    with their ids) and every receipt (by call id), then asks for the next answer.
    """
    system = [str(m.get("content") or "") for m in messages if m.get("role") == "system"]
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    history: list[str] = []
    round_no = 0
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            round_no += 1
            history.append(f"[Answer {round_no}] {_answer_text(message)}")
        elif role == "tool":
            history.append(f"[Receipt of call {message.get('tool_call_id')}] {message.get('content') or ''}")
    system_prompt = "\n\n".join([*system, _tools_text(tools), _ANSWER_RULES])
    prompt = "\n\n".join(users)
    if history:
        prompt = "\n\n".join([prompt, _HISTORY_HEADER + "\n" + "\n".join(history), _CONTINUE])
    return system_prompt, prompt


def answer_round(messages: Sequence[Mapping[str, Any]]) -> int:
    """The number of the answer a request asks for (1 for the first round)."""
    return 1 + sum(1 for message in messages if message.get("role") == "assistant")


def parse_answer(answer: object, round_no: int) -> tuple[ToolCall, ...]:
    """The tool calls of a structured answer; :class:`ModelCallError` ``bad_answer`` when it is not one.

    Strict: an object whose only key is ``tool_calls``, a list of objects each with a string
    ``name`` and an object ``arguments`` (nothing else). A name that is no offered tool passes: the
    tool loop answers it with an ``unknown_tool`` receipt, as for a native call. Call ids are
    ``cli_<round>_<n>``, unique in one tool loop.
    """
    if not isinstance(answer, Mapping) or set(answer) != {ANSWER_KEY}:
        raise ModelCallError("bad_answer")
    items = answer[ANSWER_KEY]
    if not isinstance(items, list):
        raise ModelCallError("bad_answer")
    calls = []
    for index, item in enumerate(items, start=1):
        if not isinstance(item, Mapping) or set(item) != {"name", "arguments"}:
            raise ModelCallError("bad_answer")
        name, arguments = item["name"], item["arguments"]
        if not isinstance(name, str) or not name or not isinstance(arguments, Mapping):
            raise ModelCallError("bad_answer")
        calls.append(ToolCall(call_id=f"cli_{round_no}_{index}", name=name, arguments=_compact(arguments)))
    return tuple(calls)
