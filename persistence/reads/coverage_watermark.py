"""The contiguous coverage watermark (reference §7.8): pure logic over coverage rows.

The last seq N such that complete chunks cover 1..N without a hole. :class:`persistence.reads.memory_reader.
MemoryReader` and the status view (:mod:`persistence.reads.viewer`) compute it from the rows they read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class CoverageInterval:
    """The coverage-row fields the contiguous watermark (reference §7.8) looks at."""

    chunk_key: str
    """Logical chunk the part belongs to."""
    part_index: int
    """1-based index of the part."""
    part_count: int
    """Parts the chunk was split into."""
    source_start_seq: int
    """First seq of the chunk."""
    source_end_seq: int
    """Last seq of the chunk."""
    source_digest: str
    """Digest of the chunk's source blocks."""


def _complete_chunk_interval(rows: Sequence[CoverageInterval]) -> tuple[int, int] | None:
    """``(start, end)`` of a chunk whose parts are all present and consistent, else ``None``."""
    first = rows[0]
    shape = (first.part_count, first.source_start_seq, first.source_end_seq, first.source_digest)
    for row in rows:
        if (row.part_count, row.source_start_seq, row.source_end_seq, row.source_digest) != shape:
            return None
        sane = (
            row.part_count >= 1
            and row.source_start_seq >= 1
            and row.source_end_seq >= row.source_start_seq
            and row.source_digest != ""
            and row.part_index >= 1
        )
        if not sane:
            return None
    if {row.part_index for row in rows} != set(range(1, first.part_count + 1)):
        return None
    return first.source_start_seq, first.source_end_seq


def contiguous_end(rows: Iterable[CoverageInterval]) -> int | None:
    """Last seq N such that complete chunks cover 1..N without a hole, or ``None`` (reference §7.8).

    Never ``MAX(source_end_seq)``: incomplete chunks are ignored and an island after a hole does
    not advance the watermark.
    """
    by_chunk: dict[str, list[CoverageInterval]] = defaultdict(list)
    for row in rows:
        by_chunk[row.chunk_key].append(row)
    intervals: list[tuple[int, int, str]] = []
    for key, chunk_rows in by_chunk.items():
        interval = _complete_chunk_interval(chunk_rows)
        if interval is not None:
            intervals.append((interval[0], interval[1], key))
    intervals.sort(key=lambda item: (item[0], -item[1], item[2]))
    expected = 1
    for start, end, _key in intervals:
        if end < expected:
            continue
        if start > expected:
            break
        expected = max(expected, end + 1)
    return None if expected == 1 else expected - 1
