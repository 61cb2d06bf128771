"""The complete-bytes count shared by the Stop hook and the live import."""

from __future__ import annotations

import io
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from cluster.commands import hook_fast
from persistence.files.file_tail import TAIL_CHUNK, complete_length_of
from persistence.importers import live


@given(st.binary(max_size=300), st.integers(min_value=0, max_value=400))
def test_the_count_ends_at_the_last_newline_before_the_end(data: bytes, end: int) -> None:
    end = min(end, len(data))
    expected = data[:end].rfind(b"\n") + 1
    assert complete_length_of(io.BytesIO(data), end) == expected


def test_a_newline_several_chunks_back_is_found_by_both_callers(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"x" * 10 + b"\n" + b"y" * (3 * TAIL_CHUNK + 7))
    assert hook_fast.complete_length(str(path)) == 11
    assert live.complete_length(path) == 11
    path.write_bytes(b"z" * (2 * TAIL_CHUNK))
    assert hook_fast.complete_length(str(path)) == 0
    assert live.complete_length(path) == 0
