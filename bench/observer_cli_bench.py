"""``omray bench observer --provider claude-code``: the Observer on the agent's own Claude Code login,
beside the OpenAI provider, in one run.

The main transcript is replayed under the default policy twice (:func:`bench.observer_bench.replay_policy`):
once through the ``openai`` client against the scripted chat model, once with
``model: claude-code/haiku``, where every Observer model request is one headless run of the REAL
``claude`` CLI (the provider's locked-down flags) against the scripted server's mock of the Anthropic
Messages API. Both mocks answer alike: one observation per source block of the chunk. The figures are
what each provider sends: Observer calls (chat requests, CLI runs), the HTTP requests the model API
sees, and the prompt tokens of those requests (tools, system prompt and messages, tiktoken
``o200k_base``; the CLI's own system prompt and tool list included) per source token.

The CLI is looked up in ``$OMRAY_CLAUDE_CLI``, then ``~/.cache/omray-cli`` (``npm install --prefix
~/.cache/omray-cli @anthropic-ai/claude-code``), then ``PATH``; without one the bench says so and how to
install it. Runs use a throwaway ``CLAUDE_CONFIG_DIR`` and a dummy key: nothing reaches the user's login.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from actors.models.tokens import token_counter
from bench.observer_bench import (
    POLICIES,
    PROMPT_ENCODING,
    SESSION,
    PrefixCachingObserver,
    default_transcripts,
    observations_for,
    replay_policy,
)
from persistence.importers import detect_format, import_transcript
from testkit.agent_cli import find_agent_cli
from testkit.anthropic_messages import (
    HISTORY_MARKER,
    has_tool_result,
    offered_tool,
    prompt_text,
    structured_reply,
    text_reply,
)
from testkit.scripted_server import Reply, ScriptedServer

CLI_MODEL = "claude-code/haiku"
POLICY = "default"


def find_claude_cli() -> str:
    """The ``claude`` executable (:class:`testkit.agent_cli.AgentCliMissing` when there is none)."""
    return find_agent_cli("claude", "OMRAY_CLAUDE_CLI", "@anthropic-ai/claude-code")


class MessagesObserver:
    """The Messages-API twin of :class:`PrefixCachingObserver`: one observation per source block.

    It counts every request the CLI sends (``requests``), the prompt tokens of each (system prompt,
    tools, messages) and the structured answers it gives (``answers``: one per Observer call the CLI
    carries)."""

    def __init__(self) -> None:
        self.encoding = token_counter(PROMPT_ENCODING)
        self.requests = 0
        self.answers = 0
        self.prompt_tokens = 0
        self.source_blocks_seen = 0

    def __call__(self, body: Mapping[str, Any]) -> Reply:
        messages = body.get("messages") or []
        sent = json.dumps(body.get("system", "")) + json.dumps(body.get("tools", [])) + json.dumps(messages)
        tokens = len(self.encoding.encode(sent))
        self.requests += 1
        self.prompt_tokens += tokens
        last = messages[-1] if messages else {}
        if offered_tool(body) is None or has_tool_result(last.get("content")):
            return text_reply("Done.", usage=(tokens, 2))
        self.answers += 1
        prompt = prompt_text(last.get("content"))
        if HISTORY_MARKER in prompt:  # the round after the tool results: nothing more to record
            return structured_reply([], usage=(tokens, 5))
        observations = observations_for(prompt)
        self.source_blocks_seen += len(observations)
        usage = (tokens, 12 * len(observations) + 5)
        return structured_reply([("record_observations", {"observations": observations})], usage)


@contextmanager
def _cli_environment(server: ScriptedServer, config: Path) -> Iterator[None]:
    """The environment the CLI runs inherit: the mock, a dummy key, a throwaway config, no telemetry."""
    values = {
        "ANTHROPIC_BASE_URL": server.root_url,
        "ANTHROPIC_API_KEY": "sk-ant-bench-not-a-key",
        "CLAUDE_CONFIG_DIR": str(config),
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
    }
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _figures(figures: Mapping[str, Any], model: PrefixCachingObserver | MessagesObserver) -> dict[str, Any]:
    """One provider's replay: Observer calls, API requests and prompt tokens, per source token too."""
    calls = model.answers if isinstance(model, MessagesObserver) else model.requests
    source = max(1, int(figures["source_tokens"]))
    kept = ("jobs", "source_tokens", "observations", "covered_through", "last_seq", "seconds")
    return {
        **{key: figures[key] for key in kept},
        "observer_calls": calls,
        "api_requests": model.requests,
        "source_blocks_seen": model.source_blocks_seen,
        "prompt_tokens": model.prompt_tokens,
        "prompt_tokens_per_source_token": round(model.prompt_tokens / source, 3),
        "observer_calls_per_1k_source_tokens": round(1000 * calls / source, 3),
    }


def run_cli_comparison(
    transcript: Path | None = None, context_window: int = 32768, agent_context_window: int = 128_000
) -> dict[str, Any]:
    """The default policy on one transcript through the OpenAI provider and through ``claude-code``."""
    command = find_claude_cli()
    version = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=60, check=False)
    source = transcript or default_transcripts()[0]
    observer, reports_fill = POLICIES[POLICY]
    openai_model, messages_model = PrefixCachingObserver(), MessagesObserver()
    results: dict[str, Any] = {}
    with (
        tempfile.TemporaryDirectory(prefix="omray-bench-observer-cli-") as tmp,
        ScriptedServer(chat_default=openai_model, messages_default=messages_model) as server,
    ):
        root = Path(tmp)
        config = root / "claude-config"
        config.mkdir()
        providers: dict[str, tuple[dict[str, Any], PrefixCachingObserver | MessagesObserver]] = {
            "openai": (
                {
                    "model": "scripted/observer",
                    "providers": {
                        "scripted": {"base_url": server.base_url, "context_window": context_window}
                    },
                },
                openai_model,
            ),
            "claude-code": (
                {
                    "model": CLI_MODEL,
                    "providers": {
                        "claude-code": {
                            "command": command,
                            "timeout_s": 180,
                            "context_window": context_window,
                        }
                    },
                },
                messages_model,
            ),
        }
        for name, (block, model) in providers.items():
            work = root / name
            work.mkdir()
            events_path = work / "events.jsonl"
            import_transcript(detect_format(source), source, SESSION, events_path)  # type: ignore[arg-type]
            with _cli_environment(server, config):
                figures = replay_policy(
                    events_path, work, block, observer, reports_fill, agent_context_window
                )
            results[name] = _figures(figures, model)
    openai_tokens = results["openai"]["prompt_tokens_per_source_token"]
    cli_tokens = results["claude-code"]["prompt_tokens_per_source_token"]
    return {
        "transcript": source.name,
        "policy": POLICY,
        "context_window": context_window,
        "claude_cli_version": version.stdout.strip(),
        "providers": results,
        "prompt_tokens_ratio_cli_vs_openai": round(cli_tokens / openai_tokens, 3) if openai_tokens else None,
    }
