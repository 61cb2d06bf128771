"""The SQL of exact search over one memory table (reference §13.3): one statement per plan.

:class:`TableSearch` binds one table (:class:`SearchTable`: ``om_observation``, ``om_reflection``,
``omray_transcript``) to one read snapshot and one :class:`persistence.search.request.SearchRequest`,
and builds the statements of every plan (scan, trigram pre-filter, ordered walk, session index)
and of the cheap probes ``auto`` chooses by (``persistence.search.plans``). Every statement applies
the same escaped ``LIKE``, date bounds, scope filter and result order, so every plan returns the
rows the plain scan returns.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from persistence.database import schema
from persistence.database.omray_tables import (
    ALL_TAIL_INDEXES,
    OBSERVATION_ORDER_INDEX,
    OBSERVATION_TRIGRAM_TABLE,
    REFLECTION_ORDER_INDEX,
    REFLECTION_TRIGRAM_TABLE,
    TRANSCRIPT_ORDER_INDEX,
    TRANSCRIPT_SESSION_INDEX,
    TRANSCRIPT_TRIGRAM_TABLE,
    trigram_supported,
)
from persistence.search.request import SearchRequest
from persistence.search.short_queries import SHORT_QUERY_CHARACTERS, Candidates, tail_sql, vocabulary_sql

OBSERVATION_HIT_COLUMNS: Final = "observation_id, run_id, timestamp, relevance, content"
"""The columns of an observation hit (``persistence.search.reader.ObservationHit``), in its field order."""
REFLECTION_HIT_COLUMNS: Final = "reflection_id, run_id, created_at, content"
"""The columns of a reflection hit."""
TRANSCRIPT_HIT_COLUMNS: Final = "event_id, run_id, timestamp, seq, content"
"""The columns of a transcript hit."""


@dataclass(frozen=True, slots=True)
class SearchTable:
    """The names exact search needs for one memory table."""

    table: str
    """The memory table."""
    id_column: str
    """Its id column (second sort key, ascending)."""
    time_column: str
    """Its time column (first sort key, descending; the date bounds apply to it)."""
    trigram_table: str
    """Its FTS5 trigram index table."""
    order_index: str
    """Its ``(time DESC, id ASC)`` index."""
    session_index: str
    """Its index leading with ``run_id`` (a scoped search reads only those sessions' rows)."""
    hit_columns: str
    """The columns a hit is built from, in its field order."""


OBSERVATION_SEARCH: Final = SearchTable(
    schema.om_observation.name,
    "observation_id",
    "timestamp",
    OBSERVATION_TRIGRAM_TABLE,
    OBSERVATION_ORDER_INDEX,
    "idx_om_observation_run_timestamp",
    OBSERVATION_HIT_COLUMNS,
)
"""Exact-search names of ``om_observation``."""

REFLECTION_SEARCH: Final = SearchTable(
    schema.om_reflection.name,
    "reflection_id",
    "created_at",
    REFLECTION_TRIGRAM_TABLE,
    REFLECTION_ORDER_INDEX,
    "idx_om_reflection_run",
    REFLECTION_HIT_COLUMNS,
)
"""Exact-search names of ``om_reflection``."""

TRANSCRIPT_SEARCH: Final = SearchTable(
    schema.omray_transcript.name,
    "event_id",
    "timestamp",
    TRANSCRIPT_TRIGRAM_TABLE,
    TRANSCRIPT_ORDER_INDEX,
    TRANSCRIPT_SESSION_INDEX,
    TRANSCRIPT_HIT_COLUMNS,
)
"""Exact-search names of ``omray_transcript`` (dated like observations)."""


def trigram_phrase(query: str) -> str:
    """The FTS5 quoted-phrase query for a literal string (inner ``"`` doubled)."""
    return '"' + query.replace('"', '""') + '"'


def trigram_match(query: str) -> str:
    """The FTS5 query that picks the candidate rows of a literal of 3+ characters.

    An AND of the trigrams that start at every third character, plus the last one, so that every
    character of the query is in one of them. Every row holding the query holds each of them, so
    the candidates include every match (``LIKE`` removes the rest). FTS5 answers an AND by
    skipping through its terms' row lists from the rarest up, with no position lists read, where a
    phrase of the same trigrams reads the positions of each of its common ones in every row that
    has them all (measured on the transcript corpus: 2 ms against 28 ms for a phrase whose trigrams
    are all common).
    """
    if len(query) <= 3:
        return trigram_phrase(query)
    starts = list(range(0, len(query) - 2, 3))
    if starts[-1] != len(query) - 3:
        starts.append(len(query) - 3)
    return " AND ".join(dict.fromkeys(trigram_phrase(query[start : start + 3]) for start in starts))


def uses_trigram(query: str) -> bool:
    """Whether a literal query is clean enough for the trigram pre-filter (see :func:`can_prefilter`).

    SQLite's ``LIKE`` stops reading its pattern at a NUL character, so such queries keep the scan
    to keep exactly its semantics.
    """
    return bool(query) and "\0" not in query


def can_prefilter(query: str, search: SearchTable, names: Collection[str]) -> bool:
    """Whether the trigram pre-filter applies to ``query`` on this table (``names``: the database's).

    3+ characters need the trigram index; 1-2 characters also need the table's tail indexes and
    ``json_each`` (``persistence.search.short_queries``).
    """
    if not (uses_trigram(query) and trigram_supported() and search.trigram_table in names):
        return False
    if len(query) not in SHORT_QUERY_CHARACTERS:
        return True
    return json_each_supported() and all(index in names for index in ALL_TAIL_INDEXES[search.table])


@functools.lru_cache(maxsize=1)
def json_each_supported() -> bool:
    """Whether this process's SQLite has ``json_each`` (built in since 3.38, an option before)."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("SELECT value FROM json_each('[1]')").fetchall()
    except sqlite3.Error:
        return False
    finally:
        probe.close()
    return True


OrderKey = tuple[Any, Any]
"""``(time, id)`` of one row in result order."""
HitRow = Any
"""A row of hit columns (``sqlite3`` tuple) in :attr:`SearchTable.hit_columns` order."""


class TableSearch:
    """The exact-search statements of one table, bound to one connection (one snapshot) and one search.

    Each ``*_rows`` method returns the first ``fetch_limit`` matches in result order, except
    :meth:`ordered_rows` with a ``stop`` key, which only looks at the rows before ``stop``.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        names: SearchTable,
        spec: SearchRequest,
        bounds: tuple[str | None, str | None],
    ) -> None:
        self._conn = conn
        self.names = names
        """The table searched."""
        self.spec = spec
        """The search."""
        self._after, self._before = bounds

    @property
    def dated(self) -> bool:
        """Whether the search has a date bound on this table."""
        return self._after is not None or self._before is not None

    @property
    def scoped(self) -> bool:
        """Whether the search is limited to some sessions."""
        return self.spec.sessions is not None

    def _sessions(self, params: dict[str, Any]) -> str:
        if self.spec.sessions is None:
            return ""
        names = []
        for index, session in enumerate(self.spec.sessions):
            params[f"session_{index}"] = session
            names.append(f":session_{index}")
        return f" AND run_id IN ({', '.join(names)})"

    def _dates(self, column: str, params: dict[str, Any]) -> str:
        clauses = ""
        if self._after is not None:
            clauses += f" AND {column} >= :after"
            params["after"] = self._after
        if self._before is not None:
            clauses += f" AND {column} <= :before"
            params["before"] = self._before
        return clauses

    def _order_by(self) -> str:
        return f" ORDER BY {self.names.time_column} DESC, {self.names.id_column} ASC"

    def _matching(
        self, source: str, prefilter: str, time_column: str, extra: str = ""
    ) -> tuple[str, dict[str, Any]]:
        params: dict[str, Any] = {"pattern": self.spec.like_pattern, "fetch_limit": self.spec.fetch_limit}
        sql = (
            f"SELECT {self.names.hit_columns} FROM {source}"
            f" WHERE {prefilter}content LIKE :pattern ESCAPE '\\'"
            f"{self._sessions(params)}{self._dates(time_column, params)}{extra}{self._order_by()}"
            " LIMIT :fetch_limit"
        )
        return sql, params

    def scan_sql(self) -> tuple[str, dict[str, Any]]:
        """The plain scan: every row tested, every match sorted (``NOT INDEXED`` keeps that plan)."""
        return self._matching(f"{self.names.table} NOT INDEXED", "", self.names.time_column)

    def trigram_sql(self, candidates: Candidates | None = None) -> tuple[str, dict[str, Any]]:
        """Candidates by id from the trigram index, then the same ``LIKE`` and date bounds.

        ``candidates`` are what a probe already found (so the phrase is not matched twice);
        ``None`` matches the phrase here. The unary ``+`` keeps the date bounds off every index, so
        candidates are always looked up by id rather than walked in time order.
        """
        names = self.names
        index = names.trigram_table
        if candidates is None:
            candidate_ids = f"SELECT {names.id_column} FROM {index} WHERE {index} MATCH :phrase"
        else:
            selector = "rowid IN (SELECT value FROM json_each(:candidates))"
            candidate_ids = f"SELECT {names.id_column} FROM {index} WHERE {selector}"
            if candidates.tail_ids:
                candidate_ids += " UNION ALL SELECT value FROM json_each(:tail_ids)"
        prefilter = f"{names.id_column} IN ({candidate_ids}) AND "
        sql, params = self._matching(names.table, prefilter, f"+{names.time_column}")
        if candidates is None:
            params["phrase"] = trigram_match(self.spec.query)
        else:
            params["candidates"] = json.dumps(list(candidates.trigram_rowids))
            if candidates.tail_ids:
                params["tail_ids"] = json.dumps(list(candidates.tail_ids))
        return sql, params

    def ordered_sql(self, stop: OrderKey | None, start: OrderKey | None = None) -> tuple[str, dict[str, Any]]:
        """The walk in result order inside the date range, from the ``start`` row (included; ``None``:
        the first) up to the ``stop`` row (not included; ``None``: the end)."""
        names = self.names
        extra = ""
        if stop is not None:
            # Rows before the stop row in (time DESC, id ASC) order; ids are unique, so no ties.
            extra = (
                f" AND {names.time_column} >= :stop_time"
                f" AND ({names.time_column} > :stop_time OR {names.id_column} < :stop_id)"
            )
        if start is not None:
            # The start row and every row after it.
            extra += (
                f" AND {names.time_column} <= :start_time"
                f" AND ({names.time_column} < :start_time OR {names.id_column} >= :start_id)"
            )
        sql, params = self._matching(
            f"{names.table} INDEXED BY {names.order_index}", "", names.time_column, extra
        )
        # A date bound and the stop (start) bound on the same column: SQLite walks the index range
        # of only one of them and filters by the other, so both get the tighter value (the
        # conjunction is unchanged), and the walk never runs past its stop row to the range's end.
        if stop is not None:
            params["stop_time"], params["stop_id"] = stop
            if "after" in params:
                params["after"] = max(params["after"], stop[0])
        if start is not None:
            params["start_time"], params["start_id"] = start
            if "before" in params:
                params["before"] = min(params["before"], start[0])
        return sql, params

    def session_sql(self) -> tuple[str, dict[str, Any]]:
        """The scoped sessions' rows by their ``run_id`` index, tested and sorted (no other session read)."""
        names = self.names
        return self._matching(f"{names.table} INDEXED BY {names.session_index}", "", names.time_column)

    def boundary_sql(self, offset: int) -> tuple[str, dict[str, Any]]:
        """The key of the row ``offset`` places into the date range in result order (index only)."""
        names = self.names
        params: dict[str, Any] = {"offset": offset}
        dates = self._dates(names.time_column, params)
        sql = (
            f"SELECT {names.time_column}, {names.id_column} FROM {names.table} "
            f"INDEXED BY {names.order_index} WHERE 1 = 1{dates}{self._order_by()} LIMIT 1 OFFSET :offset"
        )
        return sql, params

    def _rows(self, statement: tuple[str, dict[str, Any]]) -> list[HitRow]:
        return self._conn.execute(statement[0], statement[1]).fetchall()

    def scan_rows(self) -> list[HitRow]:
        """Matches by the plain scan."""
        return self._rows(self.scan_sql())

    def trigram_rows(self) -> list[HitRow]:
        """Matches by the trigram pre-filter (a 1-2 character query: by all its candidates)."""
        if len(self.spec.query) in SHORT_QUERY_CHARACTERS:
            return self.candidate_rows(self.trigram_candidates(None))
        return self._rows(self.trigram_sql())

    def ordered_rows(
        self, stop: OrderKey | None = None, start: OrderKey | None = None, limit: int | None = None
    ) -> list[HitRow]:
        """Matches by the ordered walk (only among the rows from ``start`` and before ``stop`` when
        given), at most ``limit`` (default: ``fetch_limit``)."""
        sql, params = self.ordered_sql(stop, start)
        if limit is not None:
            params["fetch_limit"] = min(limit, self.spec.fetch_limit)
        return self._rows((sql, params))

    def session_rows(self) -> list[HitRow]:
        """Matches among the scoped sessions' rows."""
        return self._rows(self.session_sql())

    def boundary(self, offset: int) -> OrderKey | None:
        """The ``(time, id)`` of the row at ``offset`` in the date range; ``None``: the range is shorter."""
        sql, params = self.boundary_sql(offset)
        row = self._conn.execute(sql, params).fetchone()
        return None if row is None else (row[0], row[1])

    def approximate_rows(self) -> int:
        """The table's row count, roughly (its largest rowid: free to read)."""
        row = self._conn.execute(f"SELECT max(rowid) FROM {self.names.table}").fetchone()
        return int(row[0] or 0)

    def trigram_candidates(self, cap: int | None) -> Candidates | None:
        """The rows that may match, or ``None`` when there are ``cap`` or more (``None``: no cap).

        A phrase of 3+ characters is matched on the trigram index; a 1-2 character query takes the
        index terms that start with it and the rows that end with it (``persistence.search.short_queries``).
        Reading stops at the cap, and ids come from indexes alone, so the probe stays cheap for a
        common query.
        """
        query, names = self.spec.query, self.names
        if len(query) in SHORT_QUERY_CHARACTERS:
            rowids = self._conn.execute(*vocabulary_sql(names.trigram_table, query, cap)).fetchall()
            tails = self._conn.execute(*tail_sql(names.table, names.id_column, query, cap)).fetchall()
        else:
            index = names.trigram_table
            sql = f"SELECT rowid FROM {index} WHERE {index} MATCH :phrase"
            params: dict[str, Any] = {"phrase": trigram_match(query)}
            if cap is not None:
                sql += " LIMIT :cap"
                params["cap"] = cap
            rowids, tails = self._conn.execute(sql, params).fetchall(), []
        candidates = Candidates(tuple(row[0] for row in rowids), tuple(row[0] for row in tails))
        return None if cap is not None and len(candidates) >= cap else candidates

    def candidate_rows(self, candidates: Candidates | None) -> list[HitRow]:
        """Matches among probed candidates (see :meth:`trigram_candidates`)."""
        if candidates is not None and not candidates:
            return []
        short = len(self.spec.query) in SHORT_QUERY_CHARACTERS
        return self._rows(self.trigram_sql(candidates if short or json_each_supported() else None))
