"""One model interface for the Observer, Reflector and Dropper (reference §2.2 AgentRunner, §16).

A stage hands :func:`run_tool_loop` its instructions, its input text and its tools (an OpenAI
function spec plus a handler each). The loop asks the model, runs the tool calls it gets through
the handlers, sends each handler's receipt back as the tool message, and stops when the model
stops calling tools or the tool-call budget is spent. Side effects happen only in the handlers;
the loop reports counts, never content.

Models are reached through :class:`ChatModel`: :class:`OpenAIChatModel` talks to any
OpenAI-compatible endpoint with the official ``openai`` client and native tool calling, and
``builtin/extractive`` (:mod:`actors.models.builtin`) runs in-process with no network.
:func:`model_for` resolves a ``provider/model`` reference through the settings.

Transport and provider failures surface as :class:`ModelCallError` with a short category and at
most an HTTP status code: never a response body, a prompt or model output.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field

from actors.models.clients import openai_failure
from protocol.canonical import canonical_json
from protocol.errors import ModelSettingsError, OmrayError, PromptOverCapError, SettingsError

log = logging.getLogger("omray.models")

NO_KEY_PLACEHOLDER = "sk-no-key"
"""API key sent to providers configured without ``api_key_env`` (local servers without auth)."""
DEFAULT_CLIENT_MAX_RETRIES = 2
"""Retries the ``openai`` client makes on its own for 408/409/429/5xx and connection errors."""
TOOL_CALL_LIMIT_MESSAGE = "Tool call limit reached for this run; this call was not executed. Stop now."
"""Tool message answering calls beyond the budget."""
PROMPT_FRAMING_TOKENS = 32
"""Tokens added to a request's counted text for message framing (the Observer's §7.3 slack): a
request's prompt is counted as this, plus its messages' text, plus its tools' argument schemas."""

ModelErrorCategory = Literal[
    "timeout",
    "rate_limited",
    "server_error",
    "bad_response",
    "connection",
    "cli_missing",
    "cli_failed",
    "cli_timeout",
    "not_logged_in",
    "quota_exhausted",
    "budget_exceeded",
    "bad_answer",
]
"""Why a model call failed, coarse enough to log and to decide a retry. The ``cli_*``,
``not_logged_in``, ``quota_exhausted``, ``budget_exceeded`` and ``bad_answer`` categories come from
the providers that run an agent's CLI (:mod:`actors.models.claude_cli`)."""

Messages = Sequence[Mapping[str, Any]]
"""Chat messages in the OpenAI wire format (``role``, ``content``, ``tool_calls``, ``tool_call_id``)."""
ToolHandler = Callable[[object], BaseModel | dict[str, Any]]
"""Takes the parsed arguments (the raw string when they are not valid JSON) and returns a receipt."""
ToolSpecAndHandler = tuple[Mapping[str, Any], ToolHandler]
"""An OpenAI function spec and the handler that executes it."""


# --- errors -------------------------------------------------------------------------------------


class ModelCallError(OmrayError):
    """A model request failed; ``category`` says why (never the response body)."""

    def __init__(self, category: ModelErrorCategory, status_code: int | None = None) -> None:
        self.category: ModelErrorCategory = category
        self.status_code = status_code
        suffix = f", HTTP {status_code}" if status_code is not None else ""
        super().__init__(f"model call failed ({category}{suffix})")


class UnknownProviderError(SettingsError):
    """The provider part of a ``provider/model`` reference is not in ``observational_memory.providers``."""


class UnknownModelError(SettingsError):
    """The built-in provider has no model of that name."""


class MissingApiKeyError(SettingsError):
    """The environment variable a provider names for its API key is unset or empty."""


# --- wire values ----------------------------------------------------------------------------------


class _Value(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Value):
    """One tool call the model asked for."""

    call_id: str
    """Id the tool message must echo as ``tool_call_id``."""
    name: str
    """Name of the tool to call."""
    arguments: str
    """Arguments exactly as the model sent them (normally a JSON object, possibly invalid)."""


class TokenUsage(_Value):
    """Token counts the provider reported for one request (0 when it reported none)."""

    prompt_tokens: int = Field(default=0, ge=0)
    """Input tokens."""
    cached_prompt_tokens: int = Field(default=0, ge=0)
    """Input tokens served from the provider's prompt cache (``prompt_tokens_details.cached_tokens``),
    0 when the endpoint does not report it; included in ``prompt_tokens``."""
    completion_tokens: int = Field(default=0, ge=0)
    """Output tokens."""
    cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """What the provider says the request cost, in US dollars (``claude-code``'s ``total_cost_usd``);
    ``None`` when it says nothing."""


class ChatResponse(_Value):
    """What one model request returned."""

    text: str | None = None
    """Assistant text, if any."""
    tool_calls: tuple[ToolCall, ...] = ()
    """Tool calls, in the order the model gave them."""
    usage: TokenUsage = TokenUsage()
    """Reported token counts."""


class ToolLoopResult(_Value):
    """Counts of one tool loop; never content."""

    stop_reason: Literal["model_stopped", "tool_call_limit", "all_accepted", "prompt_cap"]
    """``model_stopped``: a reply without tool calls; ``tool_call_limit``: the budget was spent;
    ``all_accepted``: every call of a reply was accepted in full, so no receipt round was sent;
    ``prompt_cap``: the receipt round would have been sent more than the prompt cap, so it was not."""
    tool_calls: int = Field(ge=0)
    """Tool calls executed (handlers run)."""
    refused_tool_calls: int = Field(ge=0)
    """Tool calls answered with the limit message instead of being executed."""
    rounds: int = Field(ge=0)
    """Model requests made."""
    prompt_tokens: int = Field(ge=0)
    """Sum of reported input tokens."""
    cached_prompt_tokens: int = Field(default=0, ge=0)
    """Sum of reported cached input tokens (part of ``prompt_tokens``)."""
    completion_tokens: int = Field(ge=0)
    """Sum of reported output tokens."""
    cost_usd: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    """Sum of the US dollars the provider reported (``None`` when no request reported any)."""


@dataclass(frozen=True)
class PromptCap:
    """The most prompt tokens one request of a tool loop may be sent (``budget.max_prompt_tokens``),
    and the counter that measures them (the settings' ``tokens.encoding``)."""

    max_tokens: int
    """The cap."""
    count_tokens: Callable[[str], int]
    """Tokens of a text."""


def tool_schema_tokens(specs: Sequence[Mapping[str, Any]], count_tokens: Callable[[str], int]) -> int:
    """Tokens of the tools' argument schemas, as the prompt cap counts them (canonical JSON)."""
    total = 0
    for spec in specs:
        function = spec.get("function")
        parameters = function.get("parameters") if isinstance(function, Mapping) else None
        total += count_tokens(canonical_json(parameters if parameters is not None else {}))
    return total


def message_tokens(message: Mapping[str, Any], count_tokens: Callable[[str], int]) -> int:
    """Tokens of one message's text and tool calls, as the prompt cap counts them."""
    content = message.get("content")
    total = count_tokens(content) if isinstance(content, str) else 0
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(function, Mapping):
            total += count_tokens(str(function.get("name", ""))) + count_tokens(
                str(function.get("arguments", ""))
            )
    return total


@dataclass(frozen=True)
class ChatRequest:
    """One request to a chat model: what the tool loop sends each round."""

    model_name: str
    """The provider-local model name (after ``provider/``)."""
    messages: Messages
    """The conversation so far (system, user, then assistant turns and tool answers)."""
    tools: Sequence[Mapping[str, Any]]
    """Tool specs offered (OpenAI function format)."""
    timeout_s: float
    """Seconds this request may take."""
    thinking_off: bool = False
    """A hint that reasoning is not wanted; a model may ignore it."""


class ChatModel(Protocol):
    """A chat model with native tool calling."""

    def complete(self, request: ChatRequest) -> ChatResponse:
        """One request; raises :class:`ModelCallError` on transport or provider failure."""
        ...


# --- the tool loop ------------------------------------------------------------------------------


def provider_local_name(model: str) -> str:
    """The part of a ``provider/model`` reference after the first ``/`` (the name the endpoint knows)."""
    provider, slash, name = model.partition("/")
    if not slash or not provider or not name:
        raise ModelSettingsError(f"model reference {model!r} is not provider/model.")
    return name


def _tool_name(spec: Mapping[str, Any]) -> str:
    function = spec.get("function")
    name = function.get("name") if isinstance(function, Mapping) else None
    if not isinstance(name, str) or not name:
        raise SettingsError("a tool spec has no function name.")
    return name


def _parse_arguments(arguments: str) -> object:
    try:
        return cast(object, json.loads(arguments))
    except (ValueError, RecursionError):
        return arguments


def _accepted_in_full(receipt: BaseModel | dict[str, Any]) -> bool:
    return bool(getattr(receipt, "accepted_in_full", False))


def _receipt_json(receipt: BaseModel | dict[str, Any]) -> str:
    if isinstance(receipt, BaseModel):
        to_tool_result = getattr(receipt, "to_tool_result", None)
        data = to_tool_result() if callable(to_tool_result) else receipt.model_dump(mode="json")
    else:
        data = receipt
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def _unknown_tool_json(name: str, known: Sequence[str]) -> str:
    receipt = {
        "status": "rejected",
        "error": "unknown_tool",
        "message": f"There is no tool {name!r}; available tools: {list(known)!r}.",
    }
    return json.dumps(receipt, ensure_ascii=False, separators=(",", ":"))


def _assistant_message(response: ChatResponse) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": response.text}
    if response.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in response.tool_calls
        ]
    return message


def run_tool_loop(
    client: ChatModel,
    *,
    model: str,
    instructions: str,
    input_text: str,
    tools: Sequence[ToolSpecAndHandler],
    max_tool_calls: int,
    max_duration_s: float,
    thinking_off: bool = False,
    skip_receipt_round: bool = False,
    clock: Callable[[], float] = time.monotonic,
    prompt_cap: PromptCap | None = None,
) -> ToolLoopResult:
    """Run one agent call: ask, execute tool calls, send receipts back, until the model stops.

    ``model`` is the exact ``provider/model`` reference. At most ``max_tool_calls`` handlers run;
    further calls in the same reply are answered with :data:`TOOL_CALL_LIMIT_MESSAGE` and the
    loop stops. The whole call must fit in ``max_duration_s`` (each request gets what is left);
    past it, :class:`ModelCallError` ``timeout``. Handler exceptions propagate unchanged.

    With ``skip_receipt_round``, a reply whose every tool call returned a receipt that is
    ``accepted_in_full`` ends the loop (``all_accepted``): the receipts would only tell the model
    that all went well, and the request carrying them costs a whole prompt. A receipt reporting a
    rejection, an unknown tool or unusable arguments is always sent back for correction.

    With ``prompt_cap``, no request is sent more prompt tokens than its cap (counted as
    :data:`PROMPT_FRAMING_TOKENS` + the messages + the tools' argument schemas): a first request over
    it raises :class:`~protocol.errors.PromptOverCapError` before anything is sent; a receipt round
    over it is not sent, and the loop stops (``prompt_cap``) with what the handlers accepted.
    """
    if max_tool_calls < 1:
        raise SettingsError(f"max_tool_calls must be >= 1, got {max_tool_calls!r}.")
    if max_duration_s <= 0:
        raise SettingsError(f"max_duration_s must be > 0, got {max_duration_s!r}.")
    model_name = provider_local_name(model)
    handlers = {_tool_name(spec): handler for spec, handler in tools}
    specs = [dict(spec) for spec, _ in tools]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": instructions},
        {"role": "user", "content": input_text},
    ]
    deadline = clock() + max_duration_s
    executed = refused = rounds = prompt_tokens = cached_tokens = completion_tokens = 0
    cost_usd: float | None = None
    stop_reason: Literal["model_stopped", "tool_call_limit", "all_accepted", "prompt_cap"] = "model_stopped"
    counted = 0  # messages already in ``prompt``
    prompt = 0
    if prompt_cap is not None:
        prompt = PROMPT_FRAMING_TOKENS + tool_schema_tokens(specs, prompt_cap.count_tokens)
    while True:
        if prompt_cap is not None:
            prompt += sum(message_tokens(m, prompt_cap.count_tokens) for m in messages[counted:])
            counted = len(messages)
            if prompt > prompt_cap.max_tokens:
                if rounds == 0:
                    raise PromptOverCapError(prompt, prompt_cap.max_tokens)
                stop_reason = "prompt_cap"
                break
        remaining = deadline - clock()
        if remaining <= 0:
            raise ModelCallError("timeout")
        response = client.complete(ChatRequest(model_name, messages, specs, remaining, thinking_off))
        rounds += 1
        prompt_tokens += response.usage.prompt_tokens
        cached_tokens += response.usage.cached_prompt_tokens
        completion_tokens += response.usage.completion_tokens
        if response.usage.cost_usd is not None:
            cost_usd = (cost_usd or 0.0) + response.usage.cost_usd
        messages.append(_assistant_message(response))
        if not response.tool_calls:
            break
        settled = True
        for call in response.tool_calls:
            if executed >= max_tool_calls:
                refused += 1
                settled = False
                content = json.dumps({"status": "rejected", "message": TOOL_CALL_LIMIT_MESSAGE})
            elif call.name not in handlers:
                executed += 1
                settled = False
                content = _unknown_tool_json(call.name, sorted(handlers))
            else:
                executed += 1
                receipt = handlers[call.name](_parse_arguments(call.arguments))
                settled = settled and _accepted_in_full(receipt)
                content = _receipt_json(receipt)
            messages.append({"role": "tool", "tool_call_id": call.call_id, "content": content})
        if skip_receipt_round and settled:
            stop_reason = "all_accepted"
            break
        if executed >= max_tool_calls:
            stop_reason = "tool_call_limit"
            break
    result = ToolLoopResult(
        stop_reason=stop_reason,
        tool_calls=executed,
        refused_tool_calls=refused,
        rounds=rounds,
        prompt_tokens=prompt_tokens,
        cached_prompt_tokens=cached_tokens,
        completion_tokens=completion_tokens,
        cost_usd=cost_usd,
    )
    log.debug(
        "tool loop finished: stop=%s calls=%d refused=%d rounds=%d",
        stop_reason,
        executed,
        refused,
        rounds,
    )
    return result


# --- OpenAI-compatible endpoints -----------------------------------------------------------------


# ``openai`` is imported where a client is made or used, not with this module: its types cost a
# worker actor about half a second and tens of MB at start, before its first model call.


def _category_for(exc: Exception) -> tuple[ModelErrorCategory, int | None]:
    failure, status = openai_failure(exc)
    # A refused request (4xx other than 429) is a bad response to this model call.
    return ("bad_response" if failure == "client_error" else failure), status


class OpenAIChatModel:
    """An OpenAI-compatible ``/chat/completions`` endpoint reached with the official ``openai`` client.

    ``base_url`` is passed to the client as-is (most servers want it to end in ``/v1``). The client
    retries 408/409/429/5xx and connection errors up to ``max_retries`` times with its own
    backoff; what still fails becomes :class:`ModelCallError`. ``thinking_off_body`` holds the
    extra request fields that switch reasoning off on this endpoint (for example
    ``{"chat_template_kwargs": {"enable_thinking": False}}`` on llama.cpp or vLLM); without it the
    ``thinking_off`` hint is ignored, since endpoints reject fields they do not know.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        timeout_s: float,
        max_retries: int = DEFAULT_CLIENT_MAX_RETRIES,
        thinking_off_body: Mapping[str, Any] | None = None,
    ) -> None:
        self.base_url = base_url
        self.timeout_s = timeout_s
        self.thinking_off_body = dict(thinking_off_body) if thinking_off_body else None
        import openai

        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries
        )

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def complete(self, request: ChatRequest) -> ChatResponse:
        """One ``chat.completions.create`` request with native tool calling."""
        import openai

        extra: dict[str, Any] = {}
        if request.tools:
            extra["tools"] = [dict(tool) for tool in request.tools]
        if request.thinking_off and self.thinking_off_body:
            extra["extra_body"] = self.thinking_off_body
        try:
            completion = self._client.chat.completions.create(
                model=request.model_name,
                messages=cast(Any, [dict(message) for message in request.messages]),
                timeout=min(request.timeout_s, self.timeout_s),
                **extra,
            )
            return _chat_response(completion)
        except (openai.OpenAIError, ValueError, TypeError, AttributeError, KeyError, IndexError) as exc:
            category, status = _category_for(exc)
            log.warning(
                "model request failed: category=%s status=%s error_class=%s",
                category,
                status,
                type(exc).__name__,
            )
            raise ModelCallError(category, status) from None


def _chat_response(completion: Any) -> ChatResponse:
    from openai.types.chat import ChatCompletionMessageFunctionToolCall

    choices = getattr(completion, "choices", None)
    if not choices:
        raise ModelCallError("bad_response")
    message = choices[0].message
    calls = tuple(
        ToolCall(call_id=call.id, name=call.function.name, arguments=call.function.arguments or "")
        for call in (message.tool_calls or [])
        if isinstance(call, ChatCompletionMessageFunctionToolCall)
    )
    usage = completion.usage
    details = getattr(usage, "prompt_tokens_details", None)
    prompt = max(0, int(getattr(usage, "prompt_tokens", 0) or 0))
    return ChatResponse(
        text=message.content if isinstance(message.content, str) else None,
        tool_calls=calls,
        usage=TokenUsage(
            prompt_tokens=prompt,
            cached_prompt_tokens=min(prompt, max(0, int(getattr(details, "cached_tokens", 0) or 0))),
            completion_tokens=max(0, int(getattr(usage, "completion_tokens", 0) or 0)),
        ),
    )
