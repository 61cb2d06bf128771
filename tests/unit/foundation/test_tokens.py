"""Offline token counting: the cache is seeded from shipped files and tiktoken accepts them."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from actors.models.tokens import TokenCounter
from persistence.files.tokenizer_cache import ENCODING_FILES, TokenizerUnavailableError, seed_tiktoken_cache


def test_seeding_writes_files_tiktoken_verifies(tmp_path: Path) -> None:
    cache = seed_tiktoken_cache(tmp_path / "cache")
    for url, expected in ENCODING_FILES.values():
        data = (cache / hashlib.sha1(url.encode()).hexdigest()).read_bytes()
        assert hashlib.sha256(data).hexdigest() == expected


def test_seeding_repairs_a_corrupted_file(tmp_path: Path) -> None:
    cache = seed_tiktoken_cache(tmp_path / "cache")
    url, expected = ENCODING_FILES["cl100k_base"]
    target = cache / hashlib.sha1(url.encode()).hexdigest()
    target.write_bytes(b"garbage")
    seed_tiktoken_cache(cache)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == expected


@pytest.mark.parametrize(
    ("encoding", "text", "expected"),
    [
        ("cl100k_base", "hello world", 2),
        ("o200k_base", "hello world", 2),
        ("cl100k_base", "", 0),
    ],
)
def test_counts_match_known_tokenizations(encoding: str, text: str, expected: int) -> None:
    assert TokenCounter(encoding).count(text) == expected


def test_special_token_text_is_counted_not_rejected() -> None:
    counter = TokenCounter("cl100k_base")
    assert counter.count("<|endoftext|>") > 1


def test_truncate_respects_the_budget() -> None:
    counter = TokenCounter("o200k_base")
    text = "The observer writes dated observations. " * 50
    short = counter.truncate(text, 10)
    assert counter.count(short) <= 10
    assert text.startswith(short)
    assert counter.truncate("tiny", 10) == "tiny"


def test_unknown_encoding_is_a_typed_error() -> None:
    with pytest.raises(TokenizerUnavailableError, match="'p50k_edit'"):
        TokenCounter("p50k_edit")
