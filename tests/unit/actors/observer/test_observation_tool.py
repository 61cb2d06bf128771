"""The ``record_observations`` handler (reference §7.7)."""

from __future__ import annotations

from typing import Any

import pytest

from actors.observer.blocks import build_source_blocks
from actors.observer.packer import ChunkPart, normalize_coverage, pack_parts
from actors.observer.tool import PartMismatchError, RecordObservationsHandler
from protocol.identities import content_hash, observation_id
from protocol.records import SourceRef
from protocol.tools import (
    ALL_OBSERVATIONS_REJECTED_MESSAGE,
    OBSERVATIONS_ACCEPTED_MESSAGE,
    RECORD_OBSERVATIONS_INVALID_MESSAGE,
    SOME_OBSERVATIONS_REJECTED_MESSAGE,
)
from tests.unit.actors.observer.helpers import NOW, RUN, simple_count, tool_call_step, tool_result

ALLOWED = (SourceRef(run_id=RUN, seq=3), SourceRef(run_id=RUN, seq=5))


def handler() -> RecordObservationsHandler:
    return RecordObservationsHandler(
        session_id=RUN,
        observer_schema_version="1",
        allowed_source_refs=ALLOWED,
        count_tokens=simple_count,
        observer_model="provider/model",
    )


def item(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "timestamp": "2026-07-23 10:00",
        "content": "User prefers feature flags",
        "relevance": "high",
        "source_refs": [{"run_id": RUN, "seq": 3}],
    }
    base.update(overrides)
    return base


def test_accepted_item_gets_the_identity_formula_and_normalized_refs() -> None:
    tool = handler()
    refs = [{"run_id": RUN, "seq": 5}, {"run_id": RUN, "seq": "3"}, {"run_id": RUN, "seq": 5}]
    receipt = tool.handle({"observations": [item(content="  Tests pass on main  ", source_refs=refs)]})
    assert receipt.to_tool_result() == {
        "status": "accepted",
        "added": 1,
        "duplicates": 0,
        "rejected": 0,
        "total": 1,
        "message": OBSERVATIONS_ACCEPTED_MESSAGE,
    }
    [accepted] = tool.accepted_drafts()
    assert accepted.content == "Tests pass on main"
    assert accepted.source_refs == ALLOWED
    assert accepted.content_hash == content_hash("Tests pass on main")
    assert accepted.token_count == simple_count("Tests pass on main")
    assert accepted.observation_id == observation_id(
        RUN, "1", "2026-07-23 10:00", "Tests pass on main", ALLOWED
    )


REJECTED_ITEMS: list[object] = [
    "not an object",
    ["list"],
    {"timestamp": "2026-07-23 10:00", "relevance": "high", "source_refs": [{"run_id": RUN, "seq": 3}]},
    item(content=7),
    item(content="   "),
    item(content="two\nlines"),
    item(timestamp="2026-07-23T10:00"),
    item(timestamp="2026-07-23 10:00:00"),
    item(timestamp=None),
    item(relevance="urgent"),
    item(relevance=None),
    item(source_refs=[]),
    item(source_refs={"run_id": RUN, "seq": 3}),
    item(source_refs=["run-1:3"]),
    item(source_refs=[{"run_id": "", "seq": 3}]),
    item(source_refs=[{"seq": 3}]),
    item(source_refs=[{"run_id": RUN, "seq": "three"}]),
    item(source_refs=[{"run_id": RUN, "seq": True}]),
    item(source_refs=[{"run_id": RUN, "seq": 4}]),
    item(source_refs=[{"run_id": "run-2", "seq": 3}]),
    item(source_refs=[{"run_id": RUN, "seq": 3}, {"run_id": RUN, "seq": 4}]),
]


@pytest.mark.parametrize("bad", REJECTED_ITEMS)
def test_every_invalid_item_is_rejected_without_reasons_or_state_change(bad: object) -> None:
    tool = handler()
    tool.handle({"observations": [item()]})
    receipt = tool.handle({"observations": [bad]})
    assert receipt.to_tool_result() == {
        "status": "rejected",
        "added": 0,
        "duplicates": 0,
        "rejected": 1,
        "total": 1,
        "message": ALL_OBSERVATIONS_REJECTED_MESSAGE,
        "error": "all_rejected",
    }
    assert len(tool.accepted_drafts()) == 1


@pytest.mark.parametrize("arguments", [None, "observations", [item()], {"observations": item()}, {}])
def test_unusable_arguments_are_one_rejection_and_change_nothing(arguments: object) -> None:
    tool = handler()
    tool.handle({"observations": [item()]})
    receipt = tool.handle(arguments)
    assert receipt.to_tool_result() == {
        "status": "rejected",
        "added": 0,
        "duplicates": 0,
        "rejected": 1,
        "total": 1,
        "message": RECORD_OBSERVATIONS_INVALID_MESSAGE,
        "error": "invalid_arguments",
    }
    assert len(tool.accepted_drafts()) == 1


def test_mixed_call_accepts_valid_items_and_reports_some_rejected() -> None:
    tool = handler()
    receipt = tool.handle({"observations": [item(), item(relevance="bogus"), item(content="Second fact")]})
    assert (receipt.status, receipt.added, receipt.duplicates, receipt.rejected, receipt.total) == (
        "accepted",
        2,
        0,
        1,
        2,
    )
    assert receipt.message == SOME_OBSERVATIONS_REJECTED_MESSAGE
    assert receipt.error is None
    assert [a.content for a in tool.accepted_drafts()] == ["User prefers feature flags", "Second fact"]


def test_duplicates_within_a_call_and_across_calls_accumulate_once() -> None:
    tool = handler()
    first = tool.handle({"observations": [item(), item(content=" User prefers feature flags ")]})
    assert (first.added, first.duplicates, first.total) == (1, 1, 1)
    second = tool.handle({"observations": [item(), item(content="New fact")]})
    assert (second.status, second.added, second.duplicates, second.rejected, second.total) == (
        "accepted",
        1,
        1,
        0,
        2,
    )
    assert second.message == OBSERVATIONS_ACCEPTED_MESSAGE
    only_duplicate_and_rejected = tool.handle({"observations": [item(), item(timestamp="bad")]})
    assert (only_duplicate_and_rejected.status, only_duplicate_and_rejected.message) == (
        "accepted",
        SOME_OBSERVATIONS_REJECTED_MESSAGE,
    )
    assert len(tool.accepted_drafts()) == 2


def test_same_content_with_different_refs_or_time_is_a_different_observation() -> None:
    tool = handler()
    receipt = tool.handle(
        {
            "observations": [
                item(),
                item(source_refs=[{"run_id": RUN, "seq": 5}]),
                item(timestamp="2026-07-23 10:01"),
            ]
        }
    )
    assert (receipt.added, receipt.duplicates) == (3, 0)


def test_empty_list_is_an_accepted_noop() -> None:
    receipt = handler().handle({"observations": []})
    assert (receipt.status, receipt.added, receipt.rejected, receipt.total) == ("accepted", 0, 0, 0)


def tool_group_part() -> ChunkPart:
    blocks = build_source_blocks([tool_call_step(3, "c"), tool_result(5, "c")], NOW, simple_count)
    raw = pack_parts(
        session_id=RUN,
        blocks=blocks,
        envelope_tokens=8000,
        fixed_overhead_tokens=100,
        memory_lines=[],
        local_time=NOW,
        renderer_version="1",
        observer_schema_version="1",
        count_tokens=simple_count,
    )
    [part] = normalize_coverage(raw, observe_start=2, terminal_end_seq=6)
    return part


def test_both_events_of_a_tool_group_are_citable_and_records_take_the_part_range() -> None:
    part = tool_group_part()
    assert part.source_refs == ALLOWED
    tool = RecordObservationsHandler(RUN, "1", part.source_refs, simple_count, "provider/model")
    tool.handle({"observations": [item(source_refs=[{"run_id": RUN, "seq": 5}, {"run_id": RUN, "seq": 3}])]})
    [record] = tool.to_records(part, "2026-07-23T10:05:00+00:00")
    assert (record.source_start_seq, record.source_end_seq) == (2, 6)
    assert record.boundary_key == part.chunk_key
    assert record.source_refs == ALLOWED
    assert record.created_at == "2026-07-23T10:05:00+00:00"
    assert (record.observer_model, record.observer_schema_version, record.session_id) == (
        "provider/model",
        "1",
        RUN,
    )
    assert record.observation_id == tool.accepted_drafts()[0].observation_id


def test_records_refuse_a_part_of_another_run() -> None:
    part = tool_group_part().model_copy(update={"session_id": "run-2"})
    with pytest.raises(PartMismatchError, match="'run-2'"):
        handler().to_records(part, "2026-07-23T10:05:00+00:00")
