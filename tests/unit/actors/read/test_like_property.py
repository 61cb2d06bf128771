"""``like_matches`` agrees with SQLite's own LIKE (stdlib sqlite3, in memory, test only)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.read.search import like_matches
from persistence.search.request import like_pattern

# Small alphabets make matches (and near misses) likely; the wide one covers non-ASCII folding.
# NUL is included: SQLite reads both strings only up to their first NUL.
ALPHABET = st.sampled_from(list("aAbB%_\\zZé É\u00e0\u00c0ß\0"))
WIDE_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)


@pytest.fixture(scope="module")
def connection() -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(":memory:")
    yield db
    db.close()


def _sqlite_like(db: sqlite3.Connection, pattern: str, text: str) -> bool:
    row = db.execute("SELECT ? LIKE ? ESCAPE '\\'", (text, pattern)).fetchone()
    return bool(row[0])


@settings(max_examples=400, deadline=None)
@given(pattern=st.text(ALPHABET, max_size=8), text=st.text(ALPHABET, max_size=10))
def test_raw_patterns_agree_with_sqlite(connection: sqlite3.Connection, pattern: str, text: str) -> None:
    assert like_matches(pattern, text) == _sqlite_like(connection, pattern, text)


@settings(max_examples=400, deadline=None)
@given(query=st.text(ALPHABET, min_size=1, max_size=5), text=st.text(ALPHABET, max_size=12))
def test_escaped_queries_agree_with_sqlite(connection: sqlite3.Connection, query: str, text: str) -> None:
    pattern = like_pattern(query)
    assert like_matches(pattern, text) == _sqlite_like(connection, pattern, text)


@settings(max_examples=300, deadline=None)
@given(query=WIDE_TEXT, text=WIDE_TEXT)
def test_wide_text_agrees_with_sqlite(connection: sqlite3.Connection, query: str, text: str) -> None:
    pattern = like_pattern(query)
    assert like_matches(pattern, text) == _sqlite_like(connection, pattern, text)
    assert like_matches(query, text) == _sqlite_like(connection, query, text)


@settings(max_examples=200, deadline=None)
@given(query=WIDE_TEXT, prefix=WIDE_TEXT, suffix=WIDE_TEXT)
def test_escaped_query_matches_any_text_containing_it(query: str, prefix: str, suffix: str) -> None:
    nul_free = [value.replace("\0", "") for value in (query, prefix, suffix)]
    trimmed = nul_free[0].strip(" \t\n\r\x0b")
    assert like_matches(like_pattern(nul_free[0]), nul_free[1] + trimmed + nul_free[2])
