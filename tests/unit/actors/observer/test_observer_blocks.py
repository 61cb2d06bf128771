"""Source block rendering (reference §7.4) and the synthetic empty block (§7.3 step 7)."""

from __future__ import annotations

import json

import pytest

from actors.observer.blocks import (
    MalformedEventError,
    SourceBlock,
    build_source_blocks,
    empty_source_block,
    event_timestamp,
    role_label,
)
from protocol.errors import OmrayError
from protocol.events import SessionEvent
from protocol.records import SourceRef
from tests.unit.actors.observer.helpers import (
    NOW,
    RUN,
    TS_SHOWN,
    event,
    simple_count,
    tool_call_step,
    tool_result,
)


def build(*events: SessionEvent) -> list[SourceBlock]:
    return build_source_blocks(list(events), NOW, simple_count)


def body(text: str) -> str:
    return text.split("\n", 1)[1]


def test_run_started_renders_conversation_messages_and_skips_prompt_context() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "Developer", "content": "dev"},
        {"role": "user-context", "content": "ctx"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, "b", {"type": "image"}]},
        {"content": "no role"},
        {"role": "custom", "text": "via text"},
        {"role": "TOOL", "content": "t"},
        "not a message",
    ]
    blocks = build(event(5, "run_started", {"payload": {"messages": messages}}))
    assert [b.kind for b in blocks] == ["message"] * 4
    assert {b.seq for b in blocks} == {5}
    assert [body(b.rendered_text) for b in blocks] == [
        f"[User @ {TS_SHOWN}]: a\nb",
        f"[User @ {TS_SHOWN}]: no role",
        f"[Custom @ {TS_SHOWN}]: via text",
        f"[Tool @ {TS_SHOWN}]: t",
    ]
    assert all(b.rendered_text.startswith(f"[Source entry id: {RUN}:5]\n") for b in blocks)
    assert all(b.source_refs == (SourceRef(run_id=RUN, seq=5),) for b in blocks)


def test_run_started_falls_back_to_top_level_messages_and_only_prompt_context_gives_nothing() -> None:
    blocks = build(event(1, "run_started", {"messages": [{"role": "user", "content": "hi"}]}))
    assert [body(b.rendered_text) for b in blocks] == [f"[User @ {TS_SHOWN}]: hi"]
    only_system = build(event(1, "run_started", {"messages": [{"role": "system", "content": "x"}]}))
    assert only_system == []


def test_agent_command_applied_uses_text_then_message() -> None:
    blocks = build(
        event(1, "agent_command_applied", {"text": "Use feature flags"}),
        event(
            2, "agent_command_applied", {"text": "", "message": {"role": "user", "content": "from message"}}
        ),
    )
    assert [b.kind for b in blocks] == ["user", "user"]
    assert body(blocks[0].rendered_text) == f"[User @ {TS_SHOWN}]: Use feature flags"
    assert body(blocks[1].rendered_text) == f"[User @ {TS_SHOWN}]: from message"


def test_assistant_text_and_message_without_tool_calls() -> None:
    blocks = build(
        event(1, "llm_step_completed", {"text": "plain"}),
        event(2, "llm_step_completed", {"assistant_message": {"role": "assistant", "content": "hello"}}),
        event(3, "llm_step_completed", {"other": 1}),
    )
    assert [(b.kind, body(b.rendered_text)) for b in blocks] == [
        ("assistant", f"[Assistant @ {TS_SHOWN}]: plain"),
        ("assistant", f"[Assistant @ {TS_SHOWN}]: hello"),
    ]


def test_null_content_renders_the_whole_message_as_json() -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [{"name": "x/y", "arguments": {"p": "é"}}]}
    blocks = build(event(1, "llm_step_completed", {"assistant_message": message}))
    expected_json = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    assert body(blocks[0].rendered_text) == (
        f'[Assistant @ {TS_SHOWN}]: {expected_json}\n[Tool call  name=x/y args={{"p":"é"}}]'
    )
    # A call without an id is not pending: it stays in the assistant block.
    assert blocks[0].kind == "assistant"


def test_tool_call_and_result_form_one_atomic_group_at_the_call_seq() -> None:
    blocks = build(
        tool_call_step(3, "c1"),
        event(4, "agent_command_applied", {"text": "meanwhile"}),
        tool_result(5, "c1"),
    )
    assert [b.kind for b in blocks] == ["user", "tool_group"]
    group = blocks[1]
    assert group.seq == 3
    assert group.source_refs == (SourceRef(run_id=RUN, seq=3), SourceRef(run_id=RUN, seq=5))
    assert group.rendered_text == (
        f"[Source entry id: {RUN}:3]\n"
        f"[Assistant @ {TS_SHOWN}]: running it\n"
        '[Tool call c1 name=bash args={"cmd":"ls"}]\n'
        f"[Source entry id: {RUN}:5]\n"
        f"[Tool result for bash @ {TS_SHOWN}]: file.txt"
    )


def test_function_style_tool_calls_and_assistant_text_goes_with_the_first_call() -> None:
    step = event(
        2,
        "llm_step_completed",
        {
            "assistant_message": {
                "role": "assistant",
                "content": "two calls",
                "tool_calls": [
                    {"tool_call_id": "a", "function": {"name": "read", "arguments": '{"path":"/x"}'}},
                    {"id": "b", "function": {"name": "grep"}},
                ],
            }
        },
    )
    blocks = build(step, tool_result(3, "b", "B out", "grep"), tool_result(4, "a", "A out", "read"))
    assert [(b.kind, b.seq) for b in blocks] == [("tool_group", 2), ("tool_group", 2)]
    assert "two calls" not in blocks[0].rendered_text
    assert "[Tool call b name=grep args=[]]" in blocks[0].rendered_text
    assert f"[Assistant @ {TS_SHOWN}]: two calls" in blocks[1].rendered_text
    assert '[Tool call a name=read args="{\\"path\\":\\"/x\\"}"]' in blocks[1].rendered_text


def test_unmatched_call_is_appended_at_the_end_and_unmatched_result_stands_alone() -> None:
    blocks = build(
        tool_call_step(2, "open-call"),
        tool_result(3, "other-call", "orphan"),
        event(4, "agent_end", {"reason": "completed"}),
    )
    assert [(b.kind, b.seq) for b in blocks] == [("tool_result", 3), ("outcome", 4), ("tool_call", 2)]
    assert (
        blocks[0].rendered_text == f"[Source entry id: {RUN}:3]\n[Tool result for bash @ {TS_SHOWN}]: orphan"
    )
    assert blocks[2].rendered_text == (
        f"[Source entry id: {RUN}:2]\n[Assistant @ {TS_SHOWN}]: running it\n"
        '[Tool call open-call name=bash args={"cmd":"ls"}]'
    )
    assert blocks[2].source_refs == (SourceRef(run_id=RUN, seq=2),)


def test_error_result_is_marked_and_missing_result_defaults() -> None:
    failing = event(2, "tool_execution_end", {"tool_result": {"tool_call_id": "", "is_error": True}})
    blocks = build(failing)
    assert body(blocks[0].rendered_text) == f"[Tool result for tool @ {TS_SHOWN}] (error): {{}}"


def test_tool_output_is_kept_whole_up_to_5000_tokens_and_digested_beyond() -> None:
    def exact(text: str) -> int:
        return len(text)

    whole = "w" * 5000
    kept = build_source_blocks([tool_result(1, "c", whole)], NOW, exact)
    assert kept[0].rendered_text.endswith(": " + whole)

    big = "abc" * 2000
    digested = build_source_blocks([tool_result(1, "c", big)], NOW, exact)[0].rendered_text
    shown = body(digested).split(": ", 1)[1]
    assert shown.startswith(big[:400] + "\n...[")
    assert big[:401] not in shown
    assert "6000" in shown  # the marker says how big the output was
    assert len(shown) < 600


def test_malformed_tool_result_raises_a_typed_error_naming_the_seq_not_content() -> None:
    for bad in (["secret-looking content"], "secret-looking content", None):
        with pytest.raises(MalformedEventError) as caught:
            build(event(7, "tool_execution_end", {"tool_result": bad}))
        assert isinstance(caught.value, OmrayError)
        assert caught.value.seq == 7
        assert "seq 7" in str(caught.value)
        assert "secret-looking" not in str(caught.value)


def test_outcomes() -> None:
    blocks = build(
        event(1, "llm_step_failed", {"retryable": True}),
        event(2, "llm_step_failed", {"retryable": 0}),
        event(3, "agent_end", {"reason": "cancelled"}),
        event(4, "agent_end", {}),
    )
    assert [(b.kind, body(b.rendered_text)) for b in blocks] == [
        ("outcome", f"[Outcome @ {TS_SHOWN}]: llm_step_failed retryable=true"),
        ("outcome", f"[Outcome @ {TS_SHOWN}]: llm_step_failed retryable=false"),
        ("outcome", f"[Outcome @ {TS_SHOWN}]: agent_end reason=cancelled"),
        ("outcome", f"[Outcome @ {TS_SHOWN}]: agent_end reason=completed"),
    ]


@pytest.mark.parametrize(
    "event_type",
    [
        "agent_command_queued",
        "turn_advanced",
        "tool_batch_committed",
        "message_end",
        "context_compaction_started",
        "context_compacted",
        "tool_call_result_received",
    ],
)
def test_other_event_types_are_skipped(event_type: str) -> None:
    assert build(event(1, event_type, {"text": "x", "reason": "completed"})) == []


def test_events_are_rendered_in_seq_order_with_timestamps_and_trailing_space_trimmed() -> None:
    blocks = build(
        event(9, "agent_command_applied", {"text": "later  \n\t"}, ts="garbage"),
        event(2, "agent_command_applied", {"text": "first"}, ts=""),
    )
    assert [b.seq for b in blocks] == [2, 9]
    assert body(blocks[0].rendered_text) == f"[User @ {NOW}]: first"
    assert body(blocks[1].rendered_text) == "[User @ 1970-01-01 00:00]: later"


def test_timestamp_and_role_helpers() -> None:
    assert event_timestamp("2026-07-20T15:30:59+02:00", NOW) == "2026-07-20 15:30"
    assert event_timestamp("", NOW) == NOW
    assert event_timestamp("2026-07-20", NOW) == "1970-01-01 00:00"
    assert [role_label(r) for r in ("USER", "assistant", "Tool", "custom", "")] == [
        "User",
        "Assistant",
        "Tool",
        "Custom",
        "",
    ]


def test_empty_block_is_citable_at_the_range_start() -> None:
    block = empty_source_block(RUN, 83)
    assert block.kind == "empty"
    assert block.seq == 83
    assert block.rendered_text.startswith(f"[Source entry id: {RUN}:83]\n")
    assert block.source_refs == (SourceRef(run_id=RUN, seq=83),)
