"""Candidate rows of a 1-2 character exact search, found by index (``persistence.search.reader``).

A trigram index cannot match fewer than three characters, yet it holds what is needed: where a row
holds the query at a position ``i``, either a whole trigram (index term) starts at ``i``, and it
starts with the query, or ``i`` is within the row's last two characters. So the rows holding a
query ``q`` are among

* the rows of the trigram terms that start with ``q`` folded as the tokenizer folds it, read from
  the index's ``fts5vocab`` (instance) table by a term range, and
* the rows whose ``substr(content, -2)`` is ``q`` (2 characters), or whose ``substr(content, -1)``
  is ``q`` or ``substr(content, -2)`` starts with it (1 character), read from two expression
  indexes (migration ``omray_006``); ``LIKE`` folds ASCII letters, so each ASCII case variant is
  looked up. Rows shorter than three characters are found this way too.

Every ``LIKE`` match is a candidate; the caller's ``LIKE`` decides, so the answer is the scan's.
"""

from __future__ import annotations

import functools
import itertools
import sqlite3
from dataclasses import dataclass
from typing import Any, Final

from persistence.database.omray_tables import TRIGRAM_TOKENIZER

SHORT_QUERY_CHARACTERS: Final = (1, 2)
"""Query lengths the candidates here serve (longer ones use the trigram phrase)."""

_MAX_CHARACTER: Final = "\U0010ffff"
"""The last code point: ``p`` then it sorts after every text that starts with ``p``, in UTF-8 order."""


@dataclass(frozen=True, slots=True)
class Candidates:
    """Rows that may hold the query: trigram-index rowids, and memory ids found by their content's tail."""

    trigram_rowids: tuple[int, ...]
    """Rowids of the table's trigram index."""
    tail_ids: tuple[str, ...] = ()
    """Memory ids (1-2 character queries only)."""

    def __len__(self) -> int:
        return len(self.trigram_rowids) + len(self.tail_ids)


def vocabulary_table(trigram_table: str) -> str:
    """The ``fts5vocab`` instance table of a trigram index (in the connection's ``temp`` schema)."""
    return f"{trigram_table}_vocab"


def vocabulary_ddl(trigram_table: str) -> str:
    """Creates :func:`vocabulary_table` on one connection (``temp``: nothing is written to the file)."""
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocabulary_table(trigram_table)} "
        f"USING fts5vocab(main, {trigram_table}, instance)"
    )


@functools.lru_cache(maxsize=256)
def trigram_fold(text: str) -> str:
    """``text`` (1-2 characters) as the trigram tokenizer folds it: the start of its index terms.

    Asked of the tokenizer itself (a throwaway in-memory index), so it is exactly its folding,
    whatever Unicode version its case tables follow.
    """
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute(f"CREATE VIRTUAL TABLE probe USING fts5(x, tokenize = '{TRIGRAM_TOKENIZER}')")
        probe.execute("CREATE VIRTUAL TABLE probe_terms USING fts5vocab(probe, instance)")
        probe.execute("INSERT INTO probe (x) VALUES (?)", (text + "\x01\x01",))
        term = probe.execute("SELECT term FROM probe_terms WHERE offset = 0").fetchone()[0]
    finally:
        probe.close()
    return str(term)[: len(text)]


def ascii_case_variants(text: str) -> list[str]:
    """Every text ``LIKE`` treats as equal to ``text``: each ASCII letter in both cases (sorted)."""
    choices = [sorted({c.lower(), c.upper()}) if c.isascii() and c.isalpha() else [c] for c in text]
    return sorted("".join(parts) for parts in itertools.product(*choices))


def vocabulary_sql(trigram_table: str, query: str, cap: int | None) -> tuple[str, dict[str, Any]]:
    """Rowids of the trigram index whose terms start with ``query`` (folded), at most ``cap``."""
    folded = trigram_fold(query)
    sql = (
        f"SELECT DISTINCT doc FROM temp.{vocabulary_table(trigram_table)} "
        "WHERE term >= :low AND term <= :high"
    )
    params: dict[str, Any] = {"low": folded, "high": folded + _MAX_CHARACTER * 2}
    if cap is not None:
        sql += " LIMIT :cap"
        params["cap"] = cap
    return sql, params


def tail_sql(table: str, id_column: str, query: str, cap: int | None) -> tuple[str, dict[str, Any]]:
    """Ids of the rows holding ``query`` (1-2 characters) in their last two characters, at most ``cap``."""
    variants = ascii_case_variants(query)
    params: dict[str, Any] = {f"tail_{index}": variant for index, variant in enumerate(variants)}
    listed = ", ".join(f":{name}" for name in params)
    if len(query) == 2:
        selects = [f"SELECT {id_column} FROM {table} WHERE substr(content, -2) IN ({listed})"]
    else:
        selects = [f"SELECT {id_column} FROM {table} WHERE substr(content, -1) IN ({listed})"]
        for name in list(params):
            params[f"{name}_high"] = params[name] + _MAX_CHARACTER
            selects.append(
                f"SELECT {id_column} FROM {table} WHERE substr(content, -2) BETWEEN :{name} AND :{name}_high"
            )
    sql = " UNION ".join(selects)
    if cap is not None:
        sql += " LIMIT :cap"
        params["cap"] = cap
    return sql, params
