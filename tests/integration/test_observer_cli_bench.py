"""``omray bench observer --provider claude-code``: the real ``claude`` CLI beside the openai client.

No Ray: the bench runs the Observer pipeline in-process. Skipped, saying how to install the CLI, when
there is none (``npm install --prefix ~/.cache/omray-cli @anthropic-ai/claude-code``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli import bench_app
from bench.observer_cli_bench import find_claude_cli
from testkit.agent_cli import AgentCliMissing

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "transcripts" / "pi-session.jsonl"


def test_both_providers_observe_the_whole_transcript_and_report_their_prompt_cost() -> None:
    try:
        find_claude_cli()
    except AgentCliMissing as exc:
        pytest.skip(str(exc))
    result = CliRunner().invoke(
        bench_app, ["observer", "--provider", "claude-code", "--transcript", str(FIXTURE), "--json"]
    )
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["claude_cli_version"]
    openai, cli = figures["providers"]["openai"], figures["providers"]["claude-code"]
    for provider in (openai, cli):
        # Every event covered, every source block seen by the model once, one observation each.
        assert provider["covered_through"] == provider["last_seq"] > 0
        assert provider["source_blocks_seen"] == provider["observations"] > 0
        assert provider["observer_calls"] >= 1 and provider["api_requests"] >= provider["observer_calls"]
    # The same jobs and source through both; the CLI adds its own system prompt and tools on top.
    assert (cli["jobs"], cli["source_tokens"]) == (openai["jobs"], openai["source_tokens"])
    assert cli["prompt_tokens"] > openai["prompt_tokens"]
    assert figures["prompt_tokens_ratio_cli_vs_openai"] > 1


def test_an_unknown_provider_is_refused() -> None:
    result = CliRunner().invoke(bench_app, ["observer", "--provider", "anthropic", "--json"])
    assert result.exit_code == 2
    assert "must be openai or claude-code" in result.output
