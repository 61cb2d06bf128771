"""Session event envelope, terminal detection (§7.1) and compaction hook models (§10.1)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from protocol.errors import InvalidPayloadError
from protocol.events import (
    AfterTurnCommit,
    BeforeCompactionContext,
    CompactionDecision,
    EventSummary,
    InvalidSessionEventError,
    SessionEvent,
    TerminalBoundary,
    detect_terminal_boundary,
    is_compatible_schema_version,
    projection_failure_reason,
    projection_metadata,
)


def line(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "schema_version": "1.0",
        "run_id": "32",
        "seq": 17,
        "turn_no": 3,
        "type": "llm_step_completed",
        "payload": {"text": "secret memory text"},
        "ts": "2026-07-23T00:00:00+00:00",
    }
    data.update(overrides)
    return data


def test_parses_envelope_and_keeps_numeric_looking_run_id_a_string() -> None:
    event = SessionEvent.parse(line())
    assert event.run_id == "32"
    assert event.seq == 17
    assert event.is_compatible


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"run_id": 32}, "run_id"),
        ({"run_id": ""}, "run_id"),
        ({"seq": 0}, "seq"),
        ({"seq": "17"}, "seq"),
        ({"seq": True}, "seq"),
        ({"type": ""}, "type"),
        ({"payload": ["secret memory text"]}, "payload"),
        ({"schema_version": "one"}, "schema_version"),
    ],
)
def test_rejects_bad_envelopes_without_echoing_values(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSessionEventError) as info:
        SessionEvent.parse(line(**overrides))
    assert field in info.value.reason
    assert "secret memory text" not in str(info.value)
    assert isinstance(info.value, InvalidPayloadError)


def test_unknown_envelope_fields_of_a_newer_minor_version_are_ignored() -> None:
    event = SessionEvent.parse({**line(), "schema_version": "1.9", "trace_id": "abc"})
    assert event.seq == line()["seq"] and not hasattr(event, "trace_id")


def test_rejects_missing_field_and_non_objects() -> None:
    data = line()
    del data["ts"]
    with pytest.raises(InvalidSessionEventError, match="ts"):
        SessionEvent.parse(data)
    with pytest.raises(InvalidSessionEventError, match="JSON object"):
        SessionEvent.parse(["not", "an", "object"])


@pytest.mark.parametrize(
    ("version", "ok"),
    [("1.0", True), ("1.7", True), ("1", True), ("2.0", False), ("0.9", False), ("", False), ("x.y", False)],
)
def test_schema_compatibility(version: str, ok: bool) -> None:
    assert is_compatible_schema_version(version) is ok


def ctx(status: str, *events: tuple[int, str, dict[str, Any]]) -> AfterTurnCommit:
    return AfterTurnCommit(
        session_id="run-1",
        turn_no=1,
        status=status,
        events=tuple(EventSummary(seq=s, type=t, payload=p) for s, t, p in events),
    )


@pytest.mark.parametrize(
    ("context", "expected"),
    [
        (ctx("completed"), None),
        (
            ctx("completed", (5, "agent_end", {"reason": "completed"})),
            TerminalBoundary(end_seq=5, status="completed"),
        ),
        (
            ctx("cancelled", (6, "agent_end", {"reason": "cancelled"})),
            TerminalBoundary(end_seq=6, status="cancelled"),
        ),
        (
            ctx(
                "completed", (4, "agent_end", {"reason": "error"}), (7, "agent_end", {"reason": "completed"})
            ),
            TerminalBoundary(end_seq=7, status="completed"),
        ),
        (ctx("running", (3, "tool_batch_committed", {})), None),
        (ctx("running", (3, "llm_step_failed", {"retryable": False})), None),
        (ctx("failed", (8, "llm_step_failed", {"retryable": True})), None),
        (
            ctx("failed", (8, "llm_step_failed", {"retryable": False})),
            TerminalBoundary(end_seq=8, status="failed"),
        ),
        (ctx("failed", (8, "llm_step_failed", {})), TerminalBoundary(end_seq=8, status="failed")),
        (
            ctx("failed", (8, "llm_step_failed", {"retryable": True, "retries_exhausted": True})),
            TerminalBoundary(end_seq=8, status="failed"),
        ),
        (
            ctx(
                "failed",
                (8, "llm_step_failed", {"retryable": 1, "retries_exhausted": "0"}),
                (9, "llm_step_failed", {"retryable": ""}),
            ),
            TerminalBoundary(end_seq=9, status="failed"),
        ),
        (
            ctx(
                "failed",
                (8, "llm_step_failed", {"retryable": False}),
                (9, "agent_end", {"reason": "cancelled"}),
            ),
            TerminalBoundary(end_seq=9, status="cancelled"),
        ),
        (ctx("failed", (9, "agent_end", {"reason": "failed"})), None),
    ],
)
def test_detect_terminal_boundary(context: AfterTurnCommit, expected: TerminalBoundary | None) -> None:
    assert detect_terminal_boundary(context) == expected


def compaction(**kw: Any) -> BeforeCompactionContext:
    return BeforeCompactionContext(session_id="5", turn_no=2, **kw)


def test_coverage_watermark_needs_both_seqs() -> None:
    assert compaction(trigger="compact_run", required_start_seq=1, required_end_seq=40).has_coverage_watermark
    assert not compaction(trigger="snapshot").has_coverage_watermark
    assert not compaction(trigger="compact_run", required_start_seq=1).has_coverage_watermark


def test_compaction_decisions() -> None:
    assert CompactionDecision.continue_().action == "continue"
    cancel = CompactionDecision.cancel(projection_failure_reason("OperationalError"))
    assert cancel.reason == "observational_memory active-memory projection failed: OperationalError"
    replaced = CompactionDecision.replace_summary("memory", projection_metadata(True))
    assert replaced.summary_text == "memory"
    assert list(replaced.metadata) == ["om_source", "om_projection", "om_has_coverage_watermark"]
    assert replaced.metadata["om_has_coverage_watermark"] is True


@pytest.mark.parametrize(
    "kwargs",
    [
        {"action": "replace_summary", "summary_text": "  "},
        {"action": "replace_summary"},
        {"action": "cancel"},
        {"action": "continue", "reason": "x"},
        {"action": "continue", "summary_text": "x"},
    ],
)
def test_compaction_decision_fields_must_match_action(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        CompactionDecision(**kwargs)


def test_php_truthy_is_phps_bool_cast() -> None:
    from protocol.events import php_truthy

    falsy: list[object] = [None, False, 0, 0.0, "", "0", [], {}]
    truthy: list[object] = [True, 1, -1, 0.5, "0.0", "false", " ", [0], {"a": 0}, object()]
    assert [php_truthy(v) for v in falsy] == [False] * len(falsy)
    assert [php_truthy(v) for v in truthy] == [True] * len(truthy)
