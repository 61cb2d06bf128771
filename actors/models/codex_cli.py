"""``codex/<model>``: the Observer, Reflector and Dropper on the user's own Codex login (``codex exec``).

:class:`CodexCliChatModel` answers each :class:`~actors.models.chat.ChatRequest` with one
``codex exec`` run, as :mod:`actors.models.claude_cli` does with ``claude -p``: the conversation as
one prompt on stdin (Codex has no system prompt flag: the instructions open the prompt), the answer
schema as ``--output-schema``, the JSON events (``--json``) read back for the final message and the
turn's usage. The run is locked down (flags of Codex CLI 0.171; see :func:`codex_argv`):

* ``--ignore-user-config`` (no ``config.toml``: no ``notify`` program such as omray's hook, no MCP
  server, no profile; the login in ``CODEX_HOME`` still applies), ``--ignore-rules``;
* ``--ephemeral``: no session rollout under ``$CODEX_HOME/sessions`` for omray to import later;
* ``--sandbox read-only`` and the shell, exec, image, web-search, goal, multi-agent, app, plugin,
  skill-search and hook features off: the model has no tool to act with;
* a private scratch directory as working root (``-C``), removed afterwards, and
  ``--skip-git-repo-check`` (it is no repository); minimal reasoning effort;
* :data:`~actors.models.claude_cli.OBSERVER_CALL_ENV` set, on which ``omray hook`` does nothing.

Failures map to the same :class:`~actors.models.chat.ModelCallError` categories as ``claude-code``;
the CLI's output is read to classify them, never logged.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from actors.models.chat import ChatRequest, ChatResponse, ModelCallError, TokenUsage
from actors.models.claude_cli import NOT_INHERITED, OBSERVER_CALL_ENV
from actors.models.cli_model import CliChatModel, CliRun
from actors.models.cli_prompt import answer_schema, parse_answer

log = logging.getLogger("omray.models.codex_cli")

DISABLED_FEATURES = (
    "shell_tool",
    "unified_exec",
    "shell_snapshot",
    "view_image",
    "image_generation",
    "goals",
    "multi_agent",
    "apps",
    "plugins",
    "skill_search",
    "hooks",
)
"""Codex features switched off in every run (``--disable``): tools the model could act with."""
SCHEMA_FILE = "answer-schema.json"
"""Name of the answer schema file in a run's scratch directory."""

_NOT_LOGGED_IN = re.compile(r"not logged in|please log ?in|codex login|unauthorized|401", re.IGNORECASE)
_QUOTA = re.compile(r"usage limit|quota|insufficient_quota|credits|billing", re.IGNORECASE)
_RATE = re.compile(r"rate limit|429|too many requests", re.IGNORECASE)
_SERVER = re.compile(r"\b5\d\d\b|internal server error|overloaded|server error", re.IGNORECASE)
_CONNECTION = re.compile(r"error sending request|connection refused|stream disconnected|dns", re.IGNORECASE)


def codex_argv(
    command: str, model: str, scratch: str, schema_file: str, extra_config: Sequence[str] = ()
) -> list[str]:
    """The command line of one run (the prompt goes to stdin, ``-``); ``extra_config`` are more
    ``-c key=value`` overrides (tests point Codex at a local mock with them)."""
    argv = [
        command,
        "exec",
        "--json",
        "--ephemeral",
        "--ignore-user-config",
        "--ignore-rules",
        "--skip-git-repo-check",
        "--sandbox",
        "read-only",
        "--cd",
        scratch,
        "--output-schema",
        schema_file,
        "--model",
        model,
        "-c",
        'web_search="disabled"',
        "-c",
        'model_reasoning_effort="minimal"',
    ]
    for feature in DISABLED_FEATURES:
        argv += ["--disable", feature]
    for override in extra_config:
        argv += ["-c", override]
    return [*argv, "-"]


ENDPOINT_PROVIDER = "omray-endpoint"
"""Name of the Codex ``model_providers`` entry omray defines for ``providers.codex.base_url``."""


def endpoint_config(base_url: str | None, api_key_env: str | None) -> tuple[str, ...]:
    """``-c`` overrides sending Codex to a Responses-API endpoint of the user's (``providers.codex.base_url``,
    its key in the variable ``api_key_env``) instead of its login's; none without a ``base_url``."""
    if base_url is None:
        return ()
    entry = {"name": ENDPOINT_PROVIDER, "base_url": base_url, "wire_api": "responses"}
    if api_key_env is not None:
        entry["env_key"] = api_key_env
    # TOML inline table; JSON strings are valid TOML basic strings.
    table = ", ".join(f"{key} = {json.dumps(value)}" for key, value in entry.items())
    return (
        f"model_provider={json.dumps(ENDPOINT_PROVIDER)}",
        f"model_providers.{ENDPOINT_PROVIDER}={{{table}}}",
    )


def codex_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The runtime's environment without a parent agent session's variables, plus the hook guard."""
    env = {key: value for key, value in environ.items() if key not in NOT_INHERITED}
    env[OBSERVER_CALL_ENV] = "1"
    return env


def _events(stdout: str) -> list[Mapping[str, Any]]:
    found = []
    for line in stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, Mapping):
            found.append(value)
    return found


def classify_failure(text: str) -> ModelCallError:
    """The error a failed turn's message stands for (matched, never kept)."""
    if _QUOTA.search(text):
        return ModelCallError("quota_exhausted")
    if _NOT_LOGGED_IN.search(text):
        return ModelCallError("not_logged_in")
    if _RATE.search(text):
        return ModelCallError("rate_limited")
    if _SERVER.search(text):
        return ModelCallError("server_error")
    if _CONNECTION.search(text):
        return ModelCallError("connection")
    return ModelCallError("cli_failed")


def _usage(events: list[Mapping[str, Any]]) -> TokenUsage:
    prompt = cached = completion = 0
    for event in events:
        usage = event.get("usage") if event.get("type") == "turn.completed" else None
        if isinstance(usage, Mapping):
            # OpenAI counts cached input inside ``input_tokens``, as omray does.
            prompt += max(0, int(usage.get("input_tokens") or 0))
            cached += max(0, int(usage.get("cached_input_tokens") or 0))
            completion += max(0, int(usage.get("output_tokens") or 0))
    return TokenUsage(
        prompt_tokens=prompt, cached_prompt_tokens=min(cached, prompt), completion_tokens=completion
    )


def response_of(run: CliRun, round_no: int) -> ChatResponse:
    """The model's answer in a run's events, or the :class:`ModelCallError` its failure stands for."""
    events = _events(run.stdout)
    for event in events:
        kind = event.get("type")
        if kind == "turn.failed" or kind == "error":
            error = event.get("error")
            message = error.get("message") if isinstance(error, Mapping) else event.get("message")
            raise classify_failure(str(message or ""))
    messages = [
        event["item"].get("text")
        for event in events
        if event.get("type") == "item.completed"
        and isinstance(event.get("item"), Mapping)
        and event["item"].get("type") == "agent_message"
    ]
    if not any(event.get("type") == "turn.completed" for event in events):
        raise ModelCallError("cli_failed")
    if not messages or not isinstance(messages[-1], str):
        raise ModelCallError("bad_answer")
    try:
        answer = json.loads(messages[-1])
    except ValueError:
        raise ModelCallError("bad_answer") from None
    return ChatResponse(tool_calls=parse_answer(answer, round_no), usage=_usage(events))


@dataclass(eq=False, repr=False)
class CodexCliChatModel(CliChatModel):
    """A model reached through the installed ``codex`` CLI on the user's login; one ``codex exec`` run per
    request (:class:`~actors.models.cli_model.CliChatModel`), with ``extra_config`` (``-c`` values)."""

    label: ClassVar[str] = "codex"
    log: ClassVar[logging.Logger] = log

    extra_config: tuple[str, ...] = field(default=(), kw_only=True)
    """``-c`` values added to every run (:func:`endpoint_config`)."""

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """:func:`codex_env`."""
        return codex_env(environ)

    def invocation(
        self, executable: str, request: ChatRequest, scratch: str, system_prompt: str, prompt: str
    ) -> tuple[list[str], str]:
        """:func:`codex_argv`, the answer's schema in a file of the scratch directory, the system prompt
        and the prompt on stdin."""
        schema_file = os.path.join(scratch, SCHEMA_FILE)
        with open(schema_file, "w", encoding="utf-8") as handle:
            json.dump(answer_schema(request.tools), handle)
        argv = codex_argv(executable, request.model_name, scratch, schema_file, self.extra_config)
        return argv, system_prompt + "\n\n" + prompt

    def answer(self, run: CliRun, round_no: int) -> ChatResponse:
        """:func:`response_of`."""
        return response_of(run, round_no)
