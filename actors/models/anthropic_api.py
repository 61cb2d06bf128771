"""``anthropic/<model>``: the Observer, Reflector and Dropper on the Anthropic Messages API (issue 41 item 5).

For users who have an API key: :class:`AnthropicChatModel` answers each
:class:`~actors.models.chat.ChatRequest` with one ``messages.create`` call of the official
``anthropic`` SDK, with native tool use. The tool loop's OpenAI-format conversation is converted
here (:func:`anthropic_request`): the system message becomes ``system``, assistant tool calls
``tool_use`` blocks, tool answers ``tool_result`` blocks of the next user message.

Prompt caching on the stable prefix: the system prompt and the tools (the same for every call of a
stage) end with a cache breakpoint, and so does the memory section that opens an Observer call's
input (it changes only when observations are added, at its end), so consecutive calls of a session
are read from the provider's cache. The cached tokens come back as ``cache_read_input_tokens`` and
are counted as ``cached_prompt_tokens``.

Failures become :class:`~actors.models.chat.ModelCallError` with a category and at most the HTTP
status; the error body is read to tell a used-up credit balance apart (``quota_exhausted``) and is
never logged, since it can quote the request.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from actors.models.chat import ChatRequest, ChatResponse, ModelCallError, TokenUsage, ToolCall

log = logging.getLogger("omray.models.anthropic")

MAX_OUTPUT_TOKENS = 8192
"""``max_tokens`` of every call (the API requires one): far above any stage's answer."""
STABLE_PREFIX_END = "\n\nNEW SOURCE-ADDRESSED CONVERSATION CHUNK:\n"
"""Where the memory section of an Observer input ends (``actors.observer.packer.SOURCE_SECTION_PREFIX``):
everything before it is the session's memory, the same prefix for consecutive calls."""
API_VERSION_PATH = "/v1"
"""The SDK adds ``/v1/messages`` to its base URL: a ``base_url`` given with it is taken without it."""
_EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}
_CREDIT = re.compile(r"credit balance|billing|quota", re.IGNORECASE)


def _tool(spec: Mapping[str, Any]) -> dict[str, Any]:
    function = spec.get("function")
    function = function if isinstance(function, Mapping) else {}
    tool: dict[str, Any] = {
        "name": str(function.get("name", "")),
        "input_schema": dict(function.get("parameters") or {"type": "object"}),
    }
    if function.get("description"):
        tool["description"] = str(function["description"])
    return tool


def _text_blocks(text: str, cache_prefix: bool) -> list[dict[str, Any]]:
    """A user text as blocks; with ``cache_prefix``, the memory section before the source is its own
    block with a cache breakpoint."""
    head, marker, tail = text.partition(STABLE_PREFIX_END)
    if not cache_prefix or not marker or not head.strip():
        return [{"type": "text", "text": text}]
    return [
        {"type": "text", "text": head, "cache_control": dict(_EPHEMERAL)},
        {"type": "text", "text": marker + tail},
    ]


def _arguments(text: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _assistant_blocks(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if isinstance(message.get("content"), str) and message["content"]:
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id", "")),
                "name": str(function.get("name", "")),
                "input": _arguments(str(function.get("arguments", ""))),
            }
        )
    return blocks


def anthropic_request(request: ChatRequest) -> dict[str, Any]:
    """The ``messages.create`` arguments of one request (pure): system, messages, tools, cache breakpoints."""
    system = "\n\n".join(str(m.get("content") or "") for m in request.messages if m.get("role") == "system")
    messages: list[dict[str, Any]] = []
    first_user = True
    for message in request.messages:
        role = message.get("role")
        if role == "user":
            blocks = _text_blocks(str(message.get("content") or ""), cache_prefix=first_user)
            first_user = False
            messages.append({"role": "user", "content": blocks})
        elif role == "assistant":
            messages.append({"role": "assistant", "content": _assistant_blocks(message)})
        elif role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": str(message.get("tool_call_id", "")),
                "content": str(message.get("content") or ""),
            }
            if messages and messages[-1]["role"] == "user" and messages[-1].get("tool_results"):
                messages[-1]["content"].append(result)
            else:
                messages.append({"role": "user", "content": [result], "tool_results": True})
    for message in messages:
        message.pop("tool_results", None)
    tools = [_tool(spec) for spec in request.tools]
    if tools:
        tools[-1]["cache_control"] = dict(_EPHEMERAL)  # tools and system: the same for every call
    arguments: dict[str, Any] = {
        "model": request.model_name,
        "max_tokens": MAX_OUTPUT_TOKENS,
        "messages": messages,
    }
    if system:
        arguments["system"] = [{"type": "text", "text": system, "cache_control": dict(_EPHEMERAL)}]
    if tools:
        arguments["tools"] = tools
    return arguments


def _count(usage: Any, name: str) -> int:
    value = getattr(usage, name, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def response_of(message: Any) -> ChatResponse:
    """The answer in a ``Message``: its text, its tool uses as tool calls, and its token usage."""
    content: Sequence[Any] = getattr(message, "content", None) or ()
    texts = [str(block.text) for block in content if getattr(block, "type", None) == "text"]
    calls = tuple(
        ToolCall(
            call_id=str(block.id),
            name=str(block.name),
            arguments=json.dumps(block.input, ensure_ascii=False, separators=(",", ":")),
        )
        for block in content
        if getattr(block, "type", None) == "tool_use"
    )
    usage = getattr(message, "usage", None)
    cached = _count(usage, "cache_read_input_tokens")
    # The API counts cached and cache-writing input apart from ``input_tokens``; omray's prompt
    # tokens include both (``cached_prompt_tokens`` is part of ``prompt_tokens``).
    prompt = _count(usage, "input_tokens") + _count(usage, "cache_creation_input_tokens") + cached
    return ChatResponse(
        text="\n".join(texts) if texts else None,
        tool_calls=calls,
        usage=TokenUsage(
            prompt_tokens=prompt,
            cached_prompt_tokens=cached,
            completion_tokens=_count(usage, "output_tokens"),
        ),
    )


def classify_failure(exc: Exception) -> ModelCallError:
    """The :class:`ModelCallError` an SDK exception stands for (its body matched, never kept)."""
    import anthropic

    if isinstance(exc, anthropic.APITimeoutError):
        return ModelCallError("timeout")
    if isinstance(exc, anthropic.APIConnectionError):
        return ModelCallError("connection")
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status == 429:
            return ModelCallError("rate_limited", status)
        if status >= 500:
            return ModelCallError("server_error", status)
        if status in (400, 402) and _CREDIT.search(str(getattr(exc, "message", ""))):
            return ModelCallError("quota_exhausted", status)
        return ModelCallError("bad_response", status)
    return ModelCallError("bad_response")


def sdk_base_url(base_url: str | None) -> str | None:
    """The SDK's base URL for a provider's ``base_url`` (``None``: the SDK's default endpoint)."""
    if base_url is None:
        return None
    return base_url[: -len(API_VERSION_PATH)] if base_url.endswith(API_VERSION_PATH) else base_url


class AnthropicChatModel:
    """A Claude model on the Anthropic Messages API, through the official ``anthropic`` client.

    The client retries 408/409/429/5xx and connection errors up to ``max_retries`` times itself; what
    still fails becomes :class:`ModelCallError`. Thread-safe (the SDK client is).
    """

    def __init__(self, base_url: str | None, api_key: str, timeout_s: float, max_retries: int = 2) -> None:
        import anthropic

        self.base_url = sdk_base_url(base_url)
        self.timeout_s = timeout_s
        self._client = anthropic.Anthropic(
            api_key=api_key, base_url=self.base_url, timeout=timeout_s, max_retries=max_retries
        )

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def complete(self, request: ChatRequest) -> ChatResponse:
        """One ``messages.create`` request with native tool use."""
        import anthropic

        arguments = anthropic_request(request)
        try:
            message = self._client.messages.create(
                **arguments, timeout=min(request.timeout_s, self.timeout_s)
            )
            return response_of(message)
        except (anthropic.AnthropicError, ValueError, TypeError, AttributeError) as exc:
            error = classify_failure(exc)
            log.warning(
                "model request failed: category=%s status=%s error_class=%s",
                error.category,
                error.status_code,
                type(exc).__name__,
            )
            raise error from None
