"""The chunker of reference §14.3 and chunk ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.canonical import sha256_hex
from protocol.semantic import ChunkingError, ChunkingRules, chunk_memory, split_text


def test_ascii_overlap_example() -> None:
    assert split_text("abcdefghijklmnop", ChunkingRules(10, 3, 80)) == ["abcdefghij", "hijklmnop"]


def test_multibyte_characters_are_never_split() -> None:
    assert split_text("😀abcdéfgh😀ij", ChunkingRules(10, 3, 80)) == ["😀abcdé", "défgh😀", "ij"]


def test_max_lines_keeps_first_lines_plus_newline() -> None:
    assert split_text("a\nb\nc\nd", ChunkingRules(12, 8, 2)) == ["a\nb\n", "\nb\n", "b\nc\n", "\nc\n", "c\nd"]


def test_empty_text_has_no_chunks() -> None:
    assert split_text("", ChunkingRules(10, 3, 80)) == []
    assert chunk_memory("observation", "a" * 64, "", ChunkingRules(10, 3, 80)) == []


def test_text_that_is_not_utf8_encodable_is_rejected() -> None:
    with pytest.raises(ChunkingError, match="valid UTF-8"):
        split_text("bad \ud800 surrogate", ChunkingRules(10, 3, 80))


def test_chunk_ids_hash_parent_key_position_and_text_with_literal_separator() -> None:
    memory_id = "b" * 64
    chunks = chunk_memory("reflection", memory_id, "abcdefghijklmnop", ChunkingRules(10, 3, 80))
    assert [chunk.position for chunk in chunks] == [0, 1]
    assert {chunk.parent_key for chunk in chunks} == {f"reflection:{memory_id}"}
    expected = sha256_hex(f"reflection:{memory_id}\\0" + "1" + "\\0" + "hijklmnop")[:32]
    assert chunks[1].chunk_id == expected
    assert len(chunks[0].chunk_id) == 32 and chunks[0].chunk_id != chunks[1].chunk_id


@given(
    text=st.text(st.characters(exclude_categories=["Cs"]), max_size=200),
    chunk_bytes=st.integers(4, 40),
    overlap_ratio=st.floats(0, 0.99),
    max_lines=st.integers(1, 5),
)
def test_chunks_are_bounded_substrings_that_reach_the_end(
    text: str, chunk_bytes: int, overlap_ratio: float, max_lines: int
) -> None:
    rules = ChunkingRules(chunk_bytes, int(chunk_bytes * overlap_ratio), max_lines)
    chunks = split_text(text, rules)
    assert (chunks == []) == (text == "")
    for chunk in chunks:
        assert len(chunk.encode("utf-8")) <= chunk_bytes
        assert chunk.count("\n") <= max_lines
        assert chunk.rstrip("\n") in text
    if chunks:
        assert text.startswith(chunks[0])
