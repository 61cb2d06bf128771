"""The agent-context model of ``omray bench observer``: when the host compacts and what it replaces."""

from __future__ import annotations

from bench.observer_bench import (
    AGENT_BASE_CONTEXT,
    COMPACTION_RESERVE,
    KEEP_RECENT,
    SUMMARY_TOKENS,
    AgentContext,
    committed_batches,
    shared_prefix,
)
from protocol.events import SessionEvent


def _event(seq: int, kind: str) -> SessionEvent:
    return SessionEvent(
        schema_version="1.0",
        run_id="s",
        seq=seq,
        turn_no=1,
        type=kind,
        payload={},
        ts="2026-11-30T00:00:00+00:00",
    )


def test_compaction_keeps_the_recent_tail_and_replaces_everything_before_it() -> None:
    context = AgentContext(window=100_000)
    context.tokens_by_seq = [(seq, 10_000) for seq in range(1, 10)]  # 90,000 + the base context
    assert context.used == AGENT_BASE_CONTEXT + 90_000
    assert context.needs_compaction() == (context.used > 100_000 - COMPACTION_RESERVE)
    required_end = context.compact()
    # The most recent KEEP_RECENT (20,000) tokens stay: seqs 8 and 9; the summary replaces 1..7.
    assert KEEP_RECENT == 20_000 and required_end == 7
    assert [seq for seq, _ in context.tokens_by_seq] == [8, 9]
    assert context.used == AGENT_BASE_CONTEXT + SUMMARY_TOKENS + 20_000


def test_batches_start_at_each_user_command_and_model_step() -> None:
    kinds = [
        "agent_command_applied",
        "llm_step_completed",
        "tool_execution_end",
        "llm_step_completed",
        "agent_end",
    ]
    batches = committed_batches([_event(seq, kind) for seq, kind in enumerate(kinds, start=1)])
    assert [[e.seq for e in batch] for batch in batches] == [[1], [2, 3], [4, 5]]


def test_shared_prefix_counts_equal_leading_tokens() -> None:
    assert shared_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert shared_prefix([], [1]) == 0
    assert shared_prefix([1, 2], [1, 2]) == 2
