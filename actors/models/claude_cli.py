"""``claude-code/<model>``: the Observer, Reflector and Dropper on the user's own Claude Code login.

:class:`ClaudeCliChatModel` answers each :class:`~actors.models.chat.ChatRequest` with one headless
run of the installed ``claude`` CLI: the conversation rendered as one prompt
(:mod:`actors.models.cli_prompt`) on stdin, the tool calls asked for as structured output
(``--json-schema``), the CLI's JSON result read back as tool calls and token usage. Each run is a
turn on the user's plan, so it is locked down to what one model call needs (flags of Claude Code
2.1; see :func:`claude_argv`):

* no tools (``--tools ""``), no MCP server (``--strict-mcp-config`` with an empty config), no skills
  (``--disable-slash-commands``), thinking off (``MAX_THINKING_TOKENS=0``);
* no user, project or local settings (``--setting-sources ""``): neither omray's hooks nor any
  other hook, plugin or permission rule of the user's is loaded; no ``CLAUDE.md`` and no auto-memory;
* no session persistence (``--no-session-persistence``): no transcript under
  ``~/.claude/projects`` that omray (or the user's ``/resume``) could pick up later;
* a fresh private scratch directory as working directory, removed afterwards: nothing is written
  into the user's project, and no project configuration applies;
* a per-call budget (``--max-budget-usd``), a timeout (the process group is killed at it), and few
  retries of the CLI's own (``CLAUDE_CODE_MAX_RETRIES``): the queue's retry policy retries jobs;
* :data:`OBSERVER_CALL_ENV` set, which omray's hooks honour by doing nothing, in case a managed
  policy still installs them.

Failures become :class:`~actors.models.chat.ModelCallError` with a category (CLI missing, not
logged in, allowance used up, budget exceeded, timeout, bad answer, ...): the CLI's output is read
to classify it and never logged, since it can quote the prompt or the model's answer.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from actors.models.chat import ChatRequest, ChatResponse, ModelCallError, TokenUsage
from actors.models.cli_model import CliChatModel, CliRun
from actors.models.cli_prompt import answer_schema, parse_answer

log = logging.getLogger("omray.models.claude_cli")

OBSERVER_CALL_ENV = "OMRAY_OBSERVER_CALL"
"""Set (``1``) in the environment of every CLI run omray makes; ``omray hook`` then does nothing."""
CLI_MAX_RETRIES = 2
"""``CLAUDE_CODE_MAX_RETRIES`` of a run: the CLI's own retries of 429/5xx, few (the queue retries jobs)."""
CLI_ENV: Mapping[str, str] = {
    OBSERVER_CALL_ENV: "1",
    "MAX_THINKING_TOKENS": "0",
    "CLAUDE_CODE_MAX_RETRIES": str(CLI_MAX_RETRIES),
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY": "1",
    "CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1",
}
"""Environment every run gets on top of the runtime's own."""
NOT_INHERITED = ("CLAUDECODE", "CLAUDE_CODE_ENTRYPOINT", "CLAUDE_CODE_SSE_PORT", "CLAUDE_CODE_SESSION_ID")
"""Variables a Claude Code session sets for its children: a runtime started from inside one must not
make omray's runs look like that session's nested calls."""
EMPTY_MCP_CONFIG = '{"mcpServers":{}}'
"""The ``--mcp-config`` that, with ``--strict-mcp-config``, loads no MCP server at all."""
SYSTEM_PROMPT_FILE = "system-prompt.txt"
"""Name of the system prompt file in a run's scratch directory (a file: no argv size limit)."""

_NOT_LOGGED_IN = re.compile(
    r"not logged in|please run /login|invalid api key|oauth token (?:has )?(?:expired|revoked)|"
    r"failed to authenticate|authentication failed",
    re.IGNORECASE,
)
_QUOTA = re.compile(
    r"usage limit|hit your (?:\w+ )?limit|out of (?:extra )?usage|usage credits|credit balance|"
    r"spend cap|out of usage",
    re.IGNORECASE,
)
_CONNECTION = re.compile(
    r"unable to connect|connection error|econnrefused|fetch failed|enotfound", re.IGNORECASE
)


def claude_argv(
    command: str, model: str, system_file: str, schema: Mapping[str, Any], budget_usd: float
) -> list[str]:
    """The command line of one run (the prompt goes to stdin)."""
    return [
        command,
        "-p",
        "--output-format",
        "json",
        "--model",
        model,
        "--tools",
        "",
        "--strict-mcp-config",
        "--mcp-config",
        EMPTY_MCP_CONFIG,
        "--no-session-persistence",
        "--setting-sources",
        "",
        "--disable-slash-commands",
        "--system-prompt-file",
        system_file,
        "--json-schema",
        json.dumps(schema, ensure_ascii=False, separators=(",", ":")),
        "--max-budget-usd",
        f"{budget_usd:g}",
    ]


def cli_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of a run: the runtime's, without :data:`NOT_INHERITED`, plus :data:`CLI_ENV`."""
    env = {key: value for key, value in environ.items() if key not in NOT_INHERITED}
    env.update(CLI_ENV)
    return env


def _result_of(stdout: str) -> Mapping[str, Any] | None:
    """The ``{"type": "result", ...}`` object the CLI prints last, if any."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, Mapping) and value.get("type") == "result":
            return value
    return None


def _usage(result: Mapping[str, Any]) -> TokenUsage:
    usage = result.get("usage")
    if not isinstance(usage, Mapping):
        return TokenUsage()

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and value > 0 else 0

    cached = count("cache_read_input_tokens")
    # Anthropic counts cached and cache-writing input apart from ``input_tokens``; omray's prompt
    # tokens include both (``cached_prompt_tokens`` is part of ``prompt_tokens``).
    prompt = count("input_tokens") + count("cache_creation_input_tokens") + cached
    return TokenUsage(
        prompt_tokens=prompt,
        cached_prompt_tokens=cached,
        completion_tokens=count("output_tokens"),
        cost_usd=_cost(result),
    )


def _cost(result: Mapping[str, Any]) -> float | None:
    """The run's ``total_cost_usd``: what the CLI counts the run as costing (on a subscription, what
    it draws from the allowance), ``None`` when absent or not a finite amount."""
    value = result.get("total_cost_usd")
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        return None
    return float(value)


def classify_failure(result: Mapping[str, Any]) -> ModelCallError:
    """The error a failed result stands for (its text is matched, never kept)."""
    subtype = result.get("subtype")
    if subtype == "error_max_budget_usd":
        return ModelCallError("budget_exceeded")
    if subtype == "error_max_structured_output_retries":
        return ModelCallError("bad_answer")
    text = str(result.get("result") or "")
    status = result.get("api_error_status")
    status = status if isinstance(status, int) and not isinstance(status, bool) else None
    if _QUOTA.search(text):
        return ModelCallError("quota_exhausted", status)
    if status in (401, 403) or _NOT_LOGGED_IN.search(text):
        return ModelCallError("not_logged_in")
    if status == 429:
        return ModelCallError("rate_limited", status)
    if status is not None and status >= 500:
        return ModelCallError("server_error", status)
    if status is not None:
        return ModelCallError("bad_response", status)
    if _CONNECTION.search(text):
        return ModelCallError("connection")
    return ModelCallError("cli_failed")


def response_of(run: CliRun, round_no: int) -> ChatResponse:
    """The model's answer in a run's output, or the :class:`ModelCallError` its failure stands for."""
    result = _result_of(run.stdout)
    if result is None:
        # No JSON result: the CLI refused its command line (too old for these flags?) or crashed.
        raise ModelCallError("cli_failed")
    if result.get("is_error") or result.get("subtype") != "success":
        raise classify_failure(result)
    answer = result.get("structured_output")
    if answer is None:
        try:
            answer = json.loads(str(result.get("result") or ""))
        except ValueError:
            raise ModelCallError("bad_answer") from None
    return ChatResponse(tool_calls=parse_answer(answer, round_no), usage=_usage(result))


@dataclass(eq=False, repr=False)
class ClaudeCliChatModel(CliChatModel):
    """A Claude model reached through the installed ``claude`` CLI on the user's login; one run per request
    (:class:`~actors.models.cli_model.CliChatModel`), each with a budget of ``max_budget_usd``."""

    label: ClassVar[str] = "claude"
    log: ClassVar[logging.Logger] = log

    max_budget_usd: float
    """Budget of one run in US dollars (``--max-budget-usd``)."""

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """:func:`cli_env`."""
        return cli_env(environ)

    def invocation(
        self, executable: str, request: ChatRequest, scratch: str, system_prompt: str, prompt: str
    ) -> tuple[list[str], str]:
        """:func:`claude_argv`, the system prompt in a file of the scratch directory, the prompt on stdin."""
        system_file = os.path.join(scratch, SYSTEM_PROMPT_FILE)
        with open(system_file, "w", encoding="utf-8") as handle:
            handle.write(system_prompt)
        argv = claude_argv(
            executable, request.model_name, system_file, answer_schema(request.tools), self.max_budget_usd
        )
        return argv, prompt

    def answer(self, run: CliRun, round_no: int) -> ChatResponse:
        """:func:`response_of`."""
        return response_of(run, round_no)
