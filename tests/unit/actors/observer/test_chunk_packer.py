"""Chunk packing (reference §7.5), coverage normalization (§7.6), memory context (§7.3 step 6), A.1."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.models.tokens import token_counter
from actors.observer.blocks import BlockKind, SourceBlock, build_source_blocks
from actors.observer.packer import (
    ChunkPart,
    MemoryLine,
    PackerInvariantError,
    memory_context_lines,
    memory_text,
    normalize_coverage,
    pack_parts,
    source_budget,
    split_text,
    trim_memory_lines,
)
from protocol.identities import chunk_key, coverage_key, part_digest, source_digest
from protocol.records import ActiveReflection, ObservationRecord, SourceRef
from tests.unit.actors.observer.helpers import NOW, RUN, event, simple_count, tool_call_step, tool_result

A1_MESSAGE = """CURRENT REFLECTIONS:
(none yet)

CURRENT OBSERVATIONS:
(none yet)

NEW SOURCE-ADDRESSED CONVERSATION CHUNK:
[Source entry id: run-1:1]
[User @ 2026-07-23 00:00]: Use feature flags

[Source entry id: run-1:2]
[Outcome @ 2026-07-23 00:00]: agent_end reason=completed

Current local time fallback: 2026-07-23 09:15"""


def pack(
    blocks: Sequence[SourceBlock],
    envelope: int = 83200,
    overhead: int = 0,
    memory: Sequence[MemoryLine] = (),
    local_time: str = NOW,
    count: Callable[[str], int] = simple_count,
) -> list[ChunkPart]:
    return pack_parts(
        session_id=RUN,
        blocks=blocks,
        envelope_tokens=envelope,
        fixed_overhead_tokens=overhead,
        memory_lines=memory,
        local_time=local_time,
        renderer_version="1",
        observer_schema_version="1",
        count_tokens=count,
    )


def block(seq: int, text: str, kind: BlockKind = "user") -> SourceBlock:
    return SourceBlock(
        session_id=RUN,
        seq=seq,
        kind=kind,
        rendered_text=f"[Source entry id: {RUN}:{seq}]\n{text}",
        source_refs=(SourceRef(run_id=RUN, seq=seq),),
    )


def identities(parts: Sequence[ChunkPart]) -> list[tuple[str, str, str, str, int, int]]:
    return [
        (p.source_digest, p.chunk_key, p.part_digest, p.coverage_key, p.source_start_seq, p.source_end_seq)
        for p in parts
    ]


def test_appendix_a1_user_message_is_reproduced_exactly() -> None:
    counter = token_counter("o200k_base")
    events = [
        event(1, "agent_command_applied", {"text": "Use feature flags"}, ts="2026-07-23T00:00:00+00:00"),
        event(2, "agent_end", {"reason": "completed"}, ts="2026-07-23T00:00:01+00:00"),
    ]
    blocks = build_source_blocks(events, "2026-07-23 09:15", counter)
    assert [(b.kind, b.seq) for b in blocks] == [("user", 1), ("outcome", 2)]
    parts = normalize_coverage(pack(blocks, overhead=3000, count=counter), 1, 2)
    assert len(parts) == 1
    part = parts[0]
    assert part.user_message == A1_MESSAGE
    assert (part.part_index, part.part_count, part.source_start_seq, part.source_end_seq) == (1, 1, 1, 2)
    assert part.source_refs == (SourceRef(run_id=RUN, seq=1), SourceRef(run_id=RUN, seq=2))
    assert part.token_estimate == counter(A1_MESSAGE)
    assert part.source_digest == source_digest(b.digest_entry() for b in blocks)
    assert part.chunk_key == chunk_key(RUN, 1, 2, "1", "1", part.source_digest, 1)
    assert part.part_digest == part_digest(part.rendered_part)
    assert part.coverage_key == coverage_key(part.chunk_key, 1, part.part_digest)
    coverage = part.to_coverage_part("2026-07-23T09:15:00+00:00")
    assert coverage.boundary_key == coverage.chunk_key == part.chunk_key
    assert coverage.observation_count == 0


def mixed_blocks() -> list[SourceBlock]:
    events = [event(1, "agent_command_applied", {"text": "x" * 900})]
    for i in range(2, 30, 3):
        events.append(tool_call_step(i, f"c{i}", text="t" * 150))
        events.append(tool_result(i + 1, f"c{i}", "r" * 300))
        events.append(event(i + 2, "llm_step_completed", {"text": "a" * (i * 10)}))
    events.append(event(40, "agent_command_applied", {"text": "huge " * 1500}))
    return build_source_blocks(events, NOW, simple_count)


def test_changing_only_the_local_time_keeps_every_digest_and_key() -> None:
    blocks = mixed_blocks()
    morning = normalize_coverage(
        pack(blocks, envelope=900, overhead=100, local_time="2026-07-23 09:15"), 1, 41
    )
    evening = normalize_coverage(
        pack(blocks, envelope=900, overhead=100, local_time="2031-12-31 23:59"), 1, 41
    )
    assert len(morning) > 3
    assert identities(morning) == identities(evening)
    assert morning[0].user_message != evening[0].user_message
    assert all(p.user_message.endswith("\n\nCurrent local time fallback: 2031-12-31 23:59") for p in evening)


def test_no_part_exceeds_its_budget_and_every_block_is_packed_once_in_order() -> None:
    blocks = mixed_blocks()
    envelope, overhead = 900, 100
    parts = pack(blocks, envelope=envelope, overhead=overhead)
    memory = memory_text([], [])
    budget = source_budget(envelope, overhead, memory, simple_count)
    assert all(simple_count(p.rendered_part) <= budget for p in parts)
    assert all(p.token_estimate <= envelope - overhead for p in parts)
    # Reassembling the parts gives back every block exactly once, in builder order.
    chunks: dict[int, str] = {}
    for p in parts:
        chunks[p.chunk_ordinal] = chunks.get(p.chunk_ordinal, "") + p.rendered_part
    assert "\n\n".join(chunks[k] for k in sorted(chunks)) == "\n\n".join(b.rendered_text for b in blocks)


def test_real_tokenizer_packing_stays_within_budget() -> None:
    counter = token_counter("o200k_base")
    events = [event(1, "agent_command_applied", {"text": "Please refactor the parser. " * 40})]
    for i in range(2, 60, 2):
        events.append(tool_call_step(i, f"c{i}", text=f"Step {i}: checking src/module_{i}.py"))
        events.append(tool_result(i + 1, f"c{i}", f"def f{i}(x):\n    return x * {i}\n" * 12))
    blocks = build_source_blocks(events, NOW, counter)
    parts = pack(blocks, envelope=1500, overhead=300, count=counter)
    budget = source_budget(1500, 300, memory_text([], []), counter)
    assert len({p.chunk_ordinal for p in parts}) > 3
    assert all(counter(p.rendered_part) <= budget for p in parts)
    assert all(p.token_estimate <= 1500 - 300 for p in parts)


def test_tool_groups_stay_atomic() -> None:
    blocks = mixed_blocks()
    groups = [b for b in blocks if b.kind == "tool_group"]
    assert len(groups) == 10
    parts = pack(blocks, envelope=700, overhead=100)
    for group in groups:
        holders = [p for p in parts if group.rendered_text in p.rendered_part]
        assert len(holders) == 1
        assert {ref.seq for ref in group.source_refs} <= {ref.seq for ref in holders[0].source_refs}


def test_a_single_huge_block_splits_into_parts_sharing_one_chunk() -> None:
    huge = block(7, "ü" * 5000 + "end")
    parts = pack([block(6, "before"), huge, block(8, "after")], envelope=600, overhead=100)
    split = [p for p in parts if p.source_start_seq == p.source_end_seq == 7]
    assert len(split) > 2
    assert [p.part_index for p in split] == list(range(1, len(split) + 1))
    assert {p.part_count for p in split} == {len(split)}
    assert len({p.chunk_key for p in split}) == 1
    assert {p.source_digest for p in split} == {source_digest([huge.digest_entry()])}
    assert len({p.coverage_key for p in split}) == len(split)
    assert "".join(p.rendered_part for p in split) == huge.rendered_text
    assert [p.source_start_seq for p in parts if p not in split] == [6, 8]


def test_split_respects_a_real_tokenizer_on_token_dense_text() -> None:
    counter = token_counter("o200k_base")
    text = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(3000))
    slices = split_text(text, 100, counter)
    assert "".join(slices) == text
    assert all(counter(s) <= 100 for s in slices)
    assert len(slices) > 1


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=25),
    envelope=st.integers(min_value=200, max_value=2000),
)
def test_packing_property_budget_and_completeness(sizes: list[int], envelope: int) -> None:
    blocks = [block(i + 1, "z" * size) for i, size in enumerate(sizes)]
    parts = normalize_coverage(pack(blocks, envelope=envelope, overhead=50), 1, len(sizes) + 2)
    budget = source_budget(envelope, 50, memory_text([], []), simple_count)
    assert all(simple_count(p.rendered_part) <= budget for p in parts)
    # Normalized coverage tiles 1..N+2 with no hole and no overlap.
    ranges = sorted({(p.chunk_key, p.source_start_seq, p.source_end_seq) for p in parts}, key=lambda r: r[1])
    assert ranges[0][1] == 1 and ranges[-1][2] == len(sizes) + 2
    assert all(b[1] == a[2] + 1 for a, b in itertools.pairwise(ranges))
    # Every chunk's parts are exactly 1..part_count.
    by_chunk: dict[str, list[int]] = {}
    for p in parts:
        by_chunk.setdefault(p.chunk_key, []).append(p.part_index)
    assert all(sorted(v) == list(range(1, len(v) + 1)) for v in by_chunk.values())


def test_gap_of_unrendered_events_is_covered_by_the_next_chunk() -> None:
    run = "run-gap"
    events = [
        event(83, "agent_command_queued", {"text": "queued"}, session_id=run),
        event(84, "agent_command_applied", {"text": "do it"}, session_id=run),
        event(85, "turn_advanced", {}, session_id=run),
        event(86, "llm_step_completed", {"text": "done"}, session_id=run),
        event(87, "tool_batch_committed", {}, session_id=run),
        event(88, "agent_end", {"reason": "completed"}, session_id=run),
    ]
    blocks = build_source_blocks(events, NOW, simple_count)
    raw = pack_parts(
        session_id=run,
        blocks=blocks,
        envelope_tokens=83200,
        fixed_overhead_tokens=1000,
        memory_lines=[],
        local_time=NOW,
        renderer_version="1",
        observer_schema_version="1",
        count_tokens=simple_count,
    )
    parts = normalize_coverage(raw, observe_start=83, terminal_end_seq=88)
    assert len(parts) == 1
    assert "[Source entry id: run-gap:84]" in parts[0].user_message
    assert "run-gap:83" not in parts[0].user_message
    assert (raw[0].source_start_seq, raw[0].source_end_seq) == (84, 88)
    assert (parts[0].source_start_seq, parts[0].source_end_seq) == (83, 88)
    assert parts[0].chunk_key == chunk_key(run, 83, 88, "1", "1", raw[0].source_digest, 1)
    assert parts[0].chunk_key != raw[0].chunk_key
    assert parts[0].coverage_key == coverage_key(parts[0].chunk_key, 1, raw[0].part_digest)
    assert (parts[0].rendered_part, parts[0].source_digest, parts[0].part_digest) == (
        raw[0].rendered_part,
        raw[0].source_digest,
        raw[0].part_digest,
    )
    assert parts[0].source_refs == raw[0].source_refs


def test_internal_holes_attach_to_the_next_chunk_and_the_last_chunk_reaches_the_terminal() -> None:
    blocks = [block(3, "a" * 600), block(7, "b" * 600), block(9, "c" * 600)]
    parts = normalize_coverage(pack(blocks, envelope=400, overhead=50), observe_start=1, terminal_end_seq=12)
    assert [(p.source_start_seq, p.source_end_seq) for p in parts] == [(1, 3), (4, 7), (8, 12)]


def test_separately_packed_chunks_on_the_same_seq_stay_separate_chunks() -> None:
    # run_started messages share seq 1 but are too big to share a part. The original groups consecutive
    # parts by equal (start, end, part_count), which would merge the first two into one chunk with
    # part_index 1 twice (reference §19.5).
    messages = [{"role": "user", "content": c * 900} for c in "pqr"]
    blocks = build_source_blocks(
        [event(1, "run_started", {"messages": messages}), event(2, "agent_end", {})], NOW, simple_count
    )
    raw = pack(blocks, envelope=450, overhead=50)
    assert [(p.source_start_seq, p.source_end_seq, p.part_count) for p in raw[:2]] == [(1, 1, 1), (1, 1, 1)]
    parts = normalize_coverage(raw, observe_start=1, terminal_end_seq=2)
    assert [(p.part_index, p.part_count) for p in parts] == [(1, 1), (1, 1), (1, 1)]
    assert [p.chunk_ordinal for p in parts] == [0, 1, 2]
    assert [(p.source_start_seq, p.source_end_seq) for p in parts] == [(1, 1), (1, 1), (1, 2)]
    assert len({p.chunk_key for p in parts}) == 3
    assert len({(p.chunk_key, p.part_index) for p in parts}) == 3
    assert parts[0].chunk_key == chunk_key(RUN, 1, 1, "1", "1", raw[0].source_digest, 1)
    assert parts[1].chunk_key == chunk_key(RUN, 1, 1, "1", "1", raw[1].source_digest, 1)


def test_multi_block_group_over_budget_is_an_invariant_error() -> None:
    def lumpy(text: str) -> int:
        # Not subadditive: joining two blocks costs far more than the blocks do.
        return 10**6 if "a\n\n[" in text else len(text) // 4 + 1

    with pytest.raises(PackerInvariantError, match="run-1"):
        pack([block(1, "a"), block(2, "b")], count=lumpy)
    with pytest.raises(PackerInvariantError):
        pack([])


def test_memory_context_lines_and_text() -> None:
    reflection = ActiveReflection(
        reflection_id="b" * 64,
        content="User wants flags",
        supporting_observation_ids=(),
        token_count=3,
        position=1,
    )
    observation = ObservationRecord(
        observation_id="a" * 64,
        session_id=RUN,
        boundary_key="k",
        source_start_seq=1,
        source_end_seq=2,
        source_refs=(SourceRef(run_id=RUN, seq=1),),
        content="Tests pass",
        content_hash="h",
        relevance="low",
        timestamp="2026-07-23 10:00",
        token_count=2,
        observer_model="p/m",
        observer_schema_version="1",
        created_at="2026-07-23T10:00:00+00:00",
    )
    lines = memory_context_lines([reflection], [observation])
    assert [line.text for line in lines] == [
        f"[{'b' * 64}] User wants flags",
        f"[{'a' * 64}] 2026-07-23 10:00 [low] Tests pass",
    ]
    assert memory_text(lines[:1], lines[1:]) == (
        f"CURRENT REFLECTIONS:\n[{'b' * 64}] User wants flags\n\n"
        f"CURRENT OBSERVATIONS:\n[{'a' * 64}] 2026-07-23 10:00 [low] Tests pass"
    )
    parts = pack([block(1, "x")], memory=lines)
    assert parts[0].user_message.startswith(memory_text(lines[:1], lines[1:]) + "\n\nNEW SOURCE-ADDRESSED")


def obs_line(memory_id: str, timestamp: str, relevance: str) -> MemoryLine:
    return MemoryLine(
        kind="observation", memory_id=memory_id, text="o" * 36, timestamp=timestamp, relevance=relevance
    )


def ref_line(memory_id: str) -> MemoryLine:
    return MemoryLine(kind="reflection", memory_id=memory_id, text="r" * 36)


def test_memory_trimming_drops_whole_pages_of_the_oldest_observations_then_last_reflections() -> None:
    # Each line counts 10 tokens with the simple counter; observations come in source order.
    observations = [obs_line(f"o{i}", "2026-07-01 00:00", "low") for i in range(1, 5)]
    reflections = [ref_line("r1"), ref_line("r2")]
    lines = [*reflections, *observations]

    kept_r, kept_o = trim_memory_lines(lines, 60, simple_count)
    assert ([r.memory_id for r in kept_r], [o.memory_id for o in kept_o]) == (
        ["r1", "r2"],
        ["o1", "o2", "o3", "o4"],
    )

    # Budget 40: pages of floor(40 * 0.5) = 20 tokens (two lines); the oldest page goes.
    kept_r, kept_o = trim_memory_lines(lines, 40, simple_count)
    assert [r.memory_id for r in kept_r] == ["r1", "r2"]
    assert [o.memory_id for o in kept_o] == ["o3", "o4"]

    kept_r, kept_o = trim_memory_lines(lines, 10, simple_count)
    assert ([r.memory_id for r in kept_r], kept_o) == (["r1"], [])

    kept_r, kept_o = trim_memory_lines(lines, 5, simple_count)
    assert (kept_r, kept_o) == ([], [])


def test_trimmed_memory_stays_a_prefix_while_observations_are_appended() -> None:
    # Budget 200 -> pages of 100 tokens (10 lines). Appending one line at a time moves the cut only
    # every page, so consecutive calls mostly share their whole memory section.
    def kept(count: int) -> list[str]:
        lines = [obs_line(f"o{i:03}", "2026-07-01 00:00", "low") for i in range(count)]
        return [o.memory_id for o in trim_memory_lines(lines, 200, simple_count)[1]]

    cuts = 0
    for count in range(21, 60):
        before, after = kept(count), kept(count + 1)
        if after[: len(before)] != before:
            cuts += 1
            assert after[0] != before[0]  # the cut moved by a whole page
        assert sum(10 for _ in after) <= 200
    assert 0 < cuts <= (60 - 21) // 10 + 1


def test_packer_trims_memory_to_its_share_of_the_envelope() -> None:
    lines = [obs_line(f"o{i:03}", f"2026-07-01 00:{i:02}", "medium") for i in range(60)]
    parts = pack([block(1, "x")], envelope=500, overhead=100, memory=lines)
    # memory budget = max(64, floor(400 * 0.55)) = 220 tokens; pages of floor(220 * 0.5) = 110 tokens
    # (11 lines): the oldest 4 pages go, the newest 16 lines stay.
    assert parts[0].user_message.count("o" * 36) == 16


def test_split_parts_depend_on_their_count_not_on_the_budget() -> None:
    # A retry packs the same oversized block after earlier parts committed observations, so the memory
    # section is longer and the source budget smaller. When the part count (part of the chunk key) is
    # unchanged, the parts must be identical, or the stored part 1 conflicts with the retry's part 1.
    huge = block(7, "q" * 9000)
    memory = [
        MemoryLine(kind="observation", memory_id="a" * 64, text="[" + "a" * 64 + "] 2026-07-23 10:00 [low] x")
    ]
    before = normalize_coverage(pack([huge], envelope=1000, overhead=100), 7, 7)
    after = normalize_coverage(pack([huge], envelope=1000, overhead=100, memory=memory), 7, 7)
    assert len(before) == len(after) > 1
    assert identities(before) == identities(after)
    assert "".join(p.rendered_part for p in after) == huge.rendered_text
