"""Contiguous coverage watermark (reference §7.8): the store cases and a property test."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from persistence.reads.coverage_watermark import CoverageInterval, contiguous_end
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from tests.unit.persistence.builders import OBSERVER_SCHEMA, RENDERER, make_part

RUN = "run-1"


def _end(reader: MemoryReader) -> int | None:
    return reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA)


def test_zero_observation_part_covering_1_to_10(store: Store, reader: MemoryReader) -> None:
    store.commit_observer_part(make_part(RUN, 1, 10), [])
    assert _end(reader) == 10


def test_multi_part_chunk_counts_only_when_complete(store: Store, reader: MemoryReader) -> None:
    store.commit_observer_part(make_part(RUN, 1, 1, part_index=1, part_count=2), [])
    assert _end(reader) is None
    store.commit_observer_part(make_part(RUN, 1, 1, part_index=2, part_count=2), [])
    assert _end(reader) == 1


def test_island_after_a_hole_does_not_advance(store: Store, reader: MemoryReader) -> None:
    store.commit_observer_part(make_part(RUN, 1, 1), [])
    store.commit_observer_part(make_part(RUN, 5, 6), [])
    assert _end(reader) == 1
    store.commit_observer_part(make_part(RUN, 2, 4), [])
    assert _end(reader) == 6


def test_watermark_is_per_session_and_versions(store: Store, reader: MemoryReader) -> None:
    store.commit_observer_part(make_part(RUN, 1, 3), [])
    assert reader.contiguous_covered_end("other", RENDERER, OBSERVER_SCHEMA) is None
    assert reader.contiguous_covered_end(RUN, "renderer-v2", OBSERVER_SCHEMA) is None


def _row(key: str, index: int, count: int, start: int, end: int, digest: str = "d") -> CoverageInterval:
    return CoverageInterval(key, index, count, start, end, digest)


def test_inconsistent_chunks_are_ignored() -> None:
    assert contiguous_end([_row("a", 1, 2, 1, 3), _row("a", 2, 2, 1, 4)]) is None  # ends disagree
    assert contiguous_end([_row("a", 1, 2, 1, 3, "x"), _row("a", 2, 2, 1, 3, "y")]) is None  # digests
    assert contiguous_end([_row("a", 1, 1, 1, 3, "")]) is None  # empty digest
    assert contiguous_end([_row("a", 1, 1, 2, 1)]) is None  # end < start
    assert contiguous_end([_row("a", 1, 2, 1, 3), _row("a", 3, 2, 1, 3)]) is None  # index outside 1..count
    assert contiguous_end([_row("a", 1, 1, 1, 3), _row("b", 1, 1, 2, 8)]) == 8  # overlapping chunks
    assert contiguous_end([]) is None


def _brute_force(rows: list[CoverageInterval]) -> int | None:
    """Largest N with every seq 1..N inside some complete chunk."""
    groups: dict[str, list[CoverageInterval]] = defaultdict(list)
    for row in rows:
        groups[row.chunk_key].append(row)
    covered: set[int] = set()
    for chunk in groups.values():
        count, start, end, digest = (
            chunk[0].part_count,
            chunk[0].source_start_seq,
            chunk[0].source_end_seq,
            chunk[0].source_digest,
        )
        consistent = all(
            (r.part_count, r.source_start_seq, r.source_end_seq, r.source_digest)
            == (count, start, end, digest)
            for r in chunk
        )
        sane = (
            count >= 1
            and start >= 1
            and end >= start
            and digest != ""
            and all(r.part_index >= 1 for r in chunk)
        )
        every_part = all(any(r.part_index == i for r in chunk) for i in range(1, count + 1))
        no_extra = all(r.part_index <= count for r in chunk)
        if consistent and sane and every_part and no_extra:
            covered.update(range(start, end + 1))
    n = 0
    while n + 1 in covered:
        n += 1
    return n or None


_noisy_rows = st.lists(
    st.builds(
        CoverageInterval,
        chunk_key=st.sampled_from(["a", "b", "c", "d"]),
        part_index=st.integers(0, 3),
        part_count=st.integers(0, 3),
        source_start_seq=st.integers(0, 8),
        source_end_seq=st.integers(0, 8),
        source_digest=st.sampled_from(["", "d1", "d2"]),
    ),
    max_size=10,
)


@st.composite
def _chunked_rows(draw: st.DrawFn) -> list[CoverageInterval]:
    """Mostly well-formed chunks, some with missing parts, so the watermark often moves."""
    rows: list[CoverageInterval] = []
    for number in range(draw(st.integers(0, 6))):
        start = draw(st.integers(1, 7))
        end = start + draw(st.integers(0, 4))
        count = draw(st.integers(1, 3))
        indexes = (
            draw(st.sets(st.integers(1, count), min_size=1))
            if draw(st.booleans())
            else set(range(1, count + 1))
        )
        rows += [_row(f"chunk-{number}", i, count, start, end) for i in sorted(indexes)]
    return draw(st.permutations(rows))


@given(st.one_of(_noisy_rows, _chunked_rows()))
def test_contiguous_end_matches_brute_force(rows: list[CoverageInterval]) -> None:
    assert contiguous_end(rows) == _brute_force(rows)
