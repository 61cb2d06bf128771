"""Read-only queries of ``memory_search`` (exact mode) and ``recall`` (reference §13.3, §13.6).

Exact search runs over every session in the database, on both tables, with the escaped
``LIKE ... ESCAPE '\\'`` of the reference, the per-table date bounds, newest first and
``LIMIT limit + 1`` (so the caller can tell ``truncated``). Every plan below returns exactly what
the plain scan returns; only the work differs:

* ``scan``: the plain escaped ``LIKE`` over the whole table, then a sort of every match (what the
  original does; pinned with ``NOT INDEXED`` so the order indexes cannot turn it into a walk).
* ``trigram``: a quoted-phrase ``MATCH`` on the FTS5 trigram index (migration ``omray_002``) picks
  candidate rows by id and the very same ``LIKE`` decides. The tokenizer folds case (Unicode, a
  superset of the ASCII folding ``LIKE`` does), so every ``LIKE`` match is a candidate and ``LIKE``
  alone removes the extra ones. A 1-2 character query takes instead the index terms that start
  with it and the rows that end with it (``persistence.search_candidates``, migration
  ``omray_006``). Only for literal queries with no NUL. Costs about one id lookup per candidate:
  the plan for rare substrings, short ones too.
* ``ordered``: walks the index in result order (time descending, id ascending; since migration
  ``omray_009`` it also holds every column a search reads, so the walk never visits the table),
  inside the date range, and stops at the ``fetch_limit``-th match. Costs one index entry per row
  visited (about 0.2 us): the plan for common substrings, short queries that match often, and
  narrow dates.

* ``session``: for a search scoped to some sessions (``scope``), reads only their rows through the
  table's ``run_id`` index, then sorts the matches. Every plan applies the same ``run_id IN (...)``.

``auto`` picks per table with cheap probes (a scoped search takes ``session`` right after a rare
trigram phrase): the trigram candidate count, capped (rare phrase:
``trigram``), after a first walk of the newest few hundred rows in the date range, which answers a
common query by itself (unless the search is scoped) and skips the probe when, at the density it
found, the budget walk or its extension will finish; then an ordered walk bounded to a row budget
(it goes on from the first one), whose answer is final when it found enough matches or covered
the whole date range (one that found some goes on, bounded again, when at the density found it
would finish within two more budgets); then, for what is left (matches
that are few and far from the newest rows), an unbounded walk when the date range is narrow, the
trigram plan when its candidates are few enough, else the scan. Every bounded probe caps the
work it can waste.

:class:`SearchReader` extends :class:`persistence.queries.MemoryReader`: same guarantees (read
only, one snapshot per call, a missing file or missing tables give the empty answer).

Length: about 1,000 lines, on purpose (issue 29's transcript search added its plans here). The plans
(scan, trigram, ordered walk, session) and the probes that choose between them share their SQL
builders and scope filter, and the differential property test checks them as one unit against the
scan.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Literal

from sqlalchemy import Connection, Row, text

from persistence import schema
from persistence.migrations import (
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
from persistence.projection_queries import (
    ACTIVE_MEMORY_TABLES,
    Assemble,
    ProjectionLines,
    ProjectionRows,
    select_projection,
    select_projection_lines,
    select_projection_text,
)
from persistence.projection_sql import FIRST_SOURCE_SEQ_SQL
from persistence.queries import (
    ActiveCandidateSet,
    MemoryReader,
    _empty_candidate_set,
    observation_from_row,
    select_active_candidate_set,
    select_covering_ids,
)
from persistence.read_connection import SnapshotReader
from persistence.search_candidates import (
    SHORT_QUERY_CHARACTERS,
    Candidates,
    tail_sql,
    vocabulary_ddl,
    vocabulary_sql,
)
from protocol.errors import SettingsError
from protocol.records import ActiveReflection, ObservationRecord, ReflectionRecord, Relevance

SearchStrategy = Literal["auto", "trigram", "ordered", "session", "scan"]
"""``auto``: per table, the plan the selectivity probes pick (see the module docstring);
``trigram``: the trigram pre-filter whenever it applies (3+ characters, index present), else scan;
``ordered``: the result-order walk to the end of the date range (index present), else scan;
``session``: for a search scoped to sessions, their rows by the session index, else scan;
``scan``: always the plain ``LIKE`` scan."""

UsedStrategy = Literal["trigram", "ordered", "session", "scan"]
"""What a search actually did on one table."""

RECALL_LOOKUP_LIMIT: Final[int] = 3
"""Rows fetched per id/prefix lookup: two are enough to tell "ambiguous"."""

FULL_ID_LENGTH: Final[int] = 64
"""Length of a full memory id; shorter ids are prefixes."""

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}\Z")

_OBSERVATION_TABLES: Final = ("om_observation",)
_REFLECTION_TABLES: Final = ("om_reflection",)


@dataclass(frozen=True, slots=True)
class PlanTuning:
    """Cost figures behind ``auto``'s plan choice (measured at 5k-50k observations; see the bench).

    They only move work around: any values give the same answers, which the tests use to drive
    every branch on tiny corpora.
    """

    candidate_cost: int = 32
    """A trigram candidate (looked up by id in the table, then sorted) costs about this many rows of an
    ordered walk through the covering index (7 us against 0.2 us at 50,000 rows)."""
    min_candidate_cap: int = 64
    """Below this many trigram candidates the pre-filter is always taken (small tables)."""
    walk_budget_min: int = 1024
    """The bounded ordered walk may visit at least this many rows..."""
    walk_budget_fraction: int = 16
    """...or 1/this of the table, whichever is more: its worst-case waste before another plan."""
    first_window: int = 512
    """Rows the first, short walk may visit before any probe (a common query ends there)..."""
    first_window_fraction: int = 256
    """...or 1/this of the table, whichever is more."""
    probe_skip_matches: int = 3
    """The trigram probe is skipped when the first walk found at least this many matches..."""
    probe_skip_budgets: int = 3
    """...and, at the density it found, this many walk budgets will finish the search."""
    walk_extension: int = 2
    """A bounded walk that found some matches but not enough goes on for up to this many more budgets
    when, at the density it found, that is enough to finish."""
    narrow_range_fraction: int = 2
    """A date range holding fewer than 1/this of the table's rows is walked whole instead of scanned."""
    selective_fraction: int = 16
    """After the walk, the trigram pre-filter still beats the scan below 1/this of the rows as candidates."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 1:
                raise SettingsError(f"plan tuning {field.name!r} must be >= 1")


DEFAULT_TUNING: Final = PlanTuning()
"""The tuning :meth:`SearchReader.exact_search` uses unless told otherwise."""


@dataclass(frozen=True, slots=True)
class ExactSearchSpec:
    """One exact search, already validated and normalized (see ``actors.read.search.SearchRequest``)."""

    query: str
    """The trimmed literal query (used for the trigram phrase)."""
    like_pattern: str
    """``'%' + escape(query) + '%'`` with ``\\`` as escape character."""
    fetch_limit: int
    """Rows fetched per table: the result limit plus one."""
    observation_after: str | None = None
    """Inclusive lower bound on ``om_observation.timestamp``."""
    observation_before: str | None = None
    """Inclusive upper bound on ``om_observation.timestamp``."""
    reflection_after: str | None = None
    """Inclusive lower bound on ``om_reflection.created_at``."""
    reflection_before: str | None = None
    """Inclusive upper bound on ``om_reflection.created_at``."""
    sessions: tuple[str, ...] | None = None
    """Only rows of these sessions (``run_id``); ``None`` searches every session."""


@dataclass(frozen=True, slots=True)
class ObservationHit:
    """The columns of an ``om_observation`` row that a search answer shows."""

    observation_id: str
    """Observation id."""
    run_id: str
    """Session."""
    timestamp: str
    """``YYYY-MM-DD HH:MM``."""
    relevance: Relevance
    """Observer's rating (the table's CHECK constraint keeps it one of the four)."""
    content: str
    """Text."""


@dataclass(frozen=True, slots=True)
class ReflectionHit:
    """The columns of an ``om_reflection`` row that a search answer shows."""

    reflection_id: str
    """Reflection id."""
    run_id: str
    """Session."""
    created_at: str
    """ISO-8601 creation time."""
    content: str
    """Text."""


_SOURCE_POSITIONS_SQL: Final = (
    "SELECT observation_id, "
    + FIRST_SOURCE_SEQ_SQL.format(row="om_observation.")
    + ", rowid FROM om_observation WHERE observation_id IN ({marks})"
)


def newest_source_first(
    conn: sqlite3.Connection, hits: tuple[ObservationHit, ...]
) -> tuple[ObservationHit, ...]:
    """``hits`` (newest first) with the hits of one minute in source order, the latest first.

    The plans pick the page in ``(minute DESC, id)`` order; within one minute the Observer's
    timestamps say nothing about order, so the page's hits are put in the order of the events
    they cite (per session: first source seq, then recorded order), descending like the rest of
    the answer. One indexed lookup of at most ``fetch_limit`` ids, only when a minute repeats.
    """
    if len({hit.timestamp for hit in hits}) == len(hits):
        return hits
    ids = [hit.observation_id for hit in hits]
    sql = _SOURCE_POSITIONS_SQL.format(marks=", ".join("?" * len(ids)))
    position = {row[0]: (int(row[1]), int(row[2])) for row in conn.execute(sql, ids)}
    ordered = sorted(
        hits,
        key=lambda hit: (hit.run_id, *(-value for value in position.get(hit.observation_id, (0, 0)))),
    )
    ordered.sort(key=lambda hit: hit.timestamp, reverse=True)
    return tuple(ordered)


@dataclass(frozen=True, slots=True)
class TranscriptHit:
    """The columns of an ``omray_transcript`` row that a search answer shows."""

    event_id: str
    """Event id (``protocol.identities.transcript_event_id``)."""
    run_id: str
    """Session."""
    timestamp: str
    """``YYYY-MM-DD HH:MM``."""
    seq: int
    """The event's seq."""
    content: str
    """Its text."""


_OBSERVATION_HIT_COLUMNS: Final = "observation_id, run_id, timestamp, relevance, content"
_REFLECTION_HIT_COLUMNS: Final = "reflection_id, run_id, created_at, content"
_TRANSCRIPT_HIT_COLUMNS: Final = "event_id, run_id, timestamp, seq, content"


@dataclass(frozen=True, slots=True)
class ExactSearchRows:
    """Rows of both tables for one exact search, each newest first: observations of one minute in
    source order, the latest first (:func:`newest_source_first`); reflections of one time by id."""

    observations: tuple[ObservationHit, ...]
    """Matching observations (at most ``fetch_limit``)."""
    reflections: tuple[ReflectionHit, ...]
    """Matching reflections (at most ``fetch_limit``)."""
    observation_strategy: UsedStrategy
    """The plan that produced ``observations``."""
    reflection_strategy: UsedStrategy
    """The plan that produced ``reflections``."""
    transcript: tuple[TranscriptHit, ...] = ()
    """Matching transcript events (at most ``fetch_limit``)."""

    @property
    def strategy(self) -> UsedStrategy:
        """The first of ``trigram``, ``ordered``, ``session`` a table used, else ``scan``."""
        used = {self.observation_strategy, self.reflection_strategy}
        if "trigram" in used:
            return "trigram"
        if "ordered" in used:
            return "ordered"
        return "session" if "session" in used else "scan"


@dataclass(frozen=True, slots=True)
class ActiveMemory:
    """A session's active reflections and active observation pool, read in one snapshot."""

    reflections: tuple[ActiveReflection, ...]
    """Reflections of the active generation, by position."""
    candidates: ActiveCandidateSet
    """The active observation pool (reference §8)."""


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
    _OBSERVATION_HIT_COLUMNS,
)
"""Exact-search names of ``om_observation``."""

REFLECTION_SEARCH: Final = SearchTable(
    schema.om_reflection.name,
    "reflection_id",
    "created_at",
    REFLECTION_TRIGRAM_TABLE,
    REFLECTION_ORDER_INDEX,
    "idx_om_reflection_run",
    _REFLECTION_HIT_COLUMNS,
)
"""Exact-search names of ``om_reflection``."""

TRANSCRIPT_SEARCH: Final = SearchTable(
    schema.omray_transcript.name,
    "event_id",
    "timestamp",
    TRANSCRIPT_TRIGRAM_TABLE,
    TRANSCRIPT_ORDER_INDEX,
    TRANSCRIPT_SESSION_INDEX,
    _TRANSCRIPT_HIT_COLUMNS,
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
    ``json_each`` (``persistence.search_candidates``).
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


_OrderKey = tuple[Any, Any]
_HitRow = Any
"""A row of hit columns (``sqlite3`` tuple) in :attr:`SearchTable.hit_columns` order."""
"""``(time, id)`` of one row in result order."""


class TableSearch:
    """The exact-search statements of one table, bound to one connection (one snapshot) and one search.

    Each ``*_rows`` method returns the first ``fetch_limit`` matches in result order, except
    :meth:`ordered_rows` with a ``stop`` key, which only looks at the rows before ``stop``.
    """

    def __init__(
        self,
        conn: sqlite3.Connection,
        names: SearchTable,
        spec: ExactSearchSpec,
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

    def ordered_sql(
        self, stop: _OrderKey | None, start: _OrderKey | None = None
    ) -> tuple[str, dict[str, Any]]:
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

    def _rows(self, statement: tuple[str, dict[str, Any]]) -> list[_HitRow]:
        return self._conn.execute(statement[0], statement[1]).fetchall()

    def scan_rows(self) -> list[_HitRow]:
        """Matches by the plain scan."""
        return self._rows(self.scan_sql())

    def trigram_rows(self) -> list[_HitRow]:
        """Matches by the trigram pre-filter (a 1-2 character query: by all its candidates)."""
        if len(self.spec.query) in SHORT_QUERY_CHARACTERS:
            return self.candidate_rows(self.trigram_candidates(None))
        return self._rows(self.trigram_sql())

    def ordered_rows(
        self, stop: _OrderKey | None = None, start: _OrderKey | None = None, limit: int | None = None
    ) -> list[_HitRow]:
        """Matches by the ordered walk (only among the rows from ``start`` and before ``stop`` when
        given), at most ``limit`` (default: ``fetch_limit``)."""
        sql, params = self.ordered_sql(stop, start)
        if limit is not None:
            params["fetch_limit"] = min(limit, self.spec.fetch_limit)
        return self._rows((sql, params))

    def session_rows(self) -> list[_HitRow]:
        """Matches among the scoped sessions' rows."""
        return self._rows(self.session_sql())

    def boundary(self, offset: int) -> _OrderKey | None:
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
        index terms that start with it and the rows that end with it (``persistence.search_candidates``).
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

    def candidate_rows(self, candidates: Candidates | None) -> list[_HitRow]:
        """Matches among probed candidates (see :meth:`trigram_candidates`)."""
        if candidates is not None and not candidates:
            return []
        short = len(self.spec.query) in SHORT_QUERY_CHARACTERS
        return self._rows(self.trigram_sql(candidates if short or json_each_supported() else None))


def choose_and_fetch(
    search: TableSearch, trigram_ok: bool, ordered_ok: bool, tuning: PlanTuning, session_ok: bool = False
) -> tuple[list[_HitRow], UsedStrategy]:
    """``auto``: the cheapest plan by bounded probes, and its rows (see the module docstring)."""
    fetch_limit = search.spec.fetch_limit
    rows_estimate = search.approximate_rows()
    budget = max(tuning.walk_budget_min, rows_estimate // tuning.walk_budget_fraction)
    rows: list[_HitRow] = []
    walked: _OrderKey | None = None  # the walk so far covers the rows before this one
    window = 0
    first_window = ordered_ok and not session_ok
    if first_window:
        # A short walk first: a common query finds its first matches among the newest rows, for
        # less than any probe costs; its rows are kept for the longer walk below.
        window = min(budget, max(tuning.first_window, rows_estimate // tuning.first_window_fraction))
        walked = search.boundary(window)
        rows = search.ordered_rows(walked)
        if walked is None or len(rows) >= fetch_limit:
            return rows, "ordered"
    # At the density the first walk found (enough matches to go by), the budget walk or its
    # extension would finish: walking on is the plan, and the probe would be wasted.
    dense = (
        first_window
        and len(rows) >= tuning.probe_skip_matches
        and (fetch_limit - len(rows)) * window <= len(rows) * budget * tuning.probe_skip_budgets
    )
    rare_cap = 0
    if trigram_ok and not dense:
        # Uniform matches: a walk visits ~fetch_limit * rows / m rows, the pre-filter costs m lookups;
        # equal at m = sqrt(fetch_limit * rows / candidate_cost).
        rare_cap = max(
            tuning.min_candidate_cap, math.isqrt(fetch_limit * rows_estimate // tuning.candidate_cost)
        )
        candidates = search.trigram_candidates(rare_cap)
        if candidates is not None:
            return search.candidate_rows(candidates), "trigram"
    if session_ok:
        return search.session_rows(), "session"  # a session's rows are few next to the table's
    if ordered_ok:
        stop = search.boundary(budget)
        if first_window:
            rows += search.ordered_rows(stop, start=walked, limit=fetch_limit - len(rows))
        else:
            rows = search.ordered_rows(stop)
        if stop is None or len(rows) >= fetch_limit:
            return rows, "ordered"  # the whole range was walked, or its first matches were found
        if rows and fetch_limit - len(rows) <= len(rows) * tuning.walk_extension:
            # At the density found so far the walk ends within ``walk_extension`` more budgets: go
            # on from where it stopped rather than throw its rows away (bounded again).
            extended = search.boundary(budget * (1 + tuning.walk_extension))
            rows += search.ordered_rows(extended, start=stop, limit=fetch_limit - len(rows))
            if extended is None or len(rows) >= fetch_limit:
                return rows, "ordered"
        if search.dated and search.boundary(rows_estimate // tuning.narrow_range_fraction) is None:
            return search.ordered_rows(), "ordered"
    if trigram_ok:
        common_cap = max(tuning.min_candidate_cap, rows_estimate // tuning.selective_fraction)
        candidates = search.trigram_candidates(common_cap) if common_cap > rare_cap else None
        if candidates is not None:
            return search.candidate_rows(candidates), "trigram"
    return search.scan_rows(), "scan"


def search_table(
    search: TableSearch, strategy: SearchStrategy, names: Collection[str], tuning: PlanTuning
) -> tuple[list[_HitRow], UsedStrategy]:
    """One table's rows by ``strategy``; a plan whose index is missing (or cannot apply) becomes the scan.

    ``names`` are the database's table and index names.
    """
    trigram_ok = strategy in ("auto", "trigram") and can_prefilter(search.spec.query, search.names, names)
    ordered_ok = strategy in ("auto", "ordered") and search.names.order_index in names
    session_ok = strategy in ("auto", "session") and search.scoped and search.names.session_index in names
    if strategy == "auto":
        return choose_and_fetch(search, trigram_ok, ordered_ok, tuning, session_ok)
    if trigram_ok:
        return search.trigram_rows(), "trigram"
    if ordered_ok:
        return search.ordered_rows(), "ordered"
    if session_ok:
        return search.session_rows(), "session"
    return search.scan_rows(), "scan"


def _decode_support_ids(raw: str) -> tuple[str, ...]:
    try:
        decoded = json.loads(raw)
    except ValueError:
        return ()
    if not isinstance(decoded, list):
        return ()
    # Only real ids can be recalled or shown; anything else in a legacy row is dropped.
    return tuple(item for item in decoded if isinstance(item, str) and _SHA256_HEX.match(item))


def reflection_from_row(row: Row[Any]) -> ReflectionRecord:
    """An ``om_reflection`` row as a record (support ids decoded; non-id entries dropped)."""
    data = row._asdict()
    data["supporting_observation_ids"] = _decode_support_ids(data.pop("supporting_observation_ids_json"))
    return ReflectionRecord(**data)


def select_active_reflections(conn: Connection, run_id: str) -> tuple[ActiveReflection, ...]:
    """Reflections linked to the session's active generation, by position then id."""
    ref, link, active = schema.om_reflection, schema.om_generation_reflection, schema.om_active_generation
    rows = conn.execute(
        text(
            f"SELECT r.reflection_id, r.content, r.supporting_observation_ids_json, r.token_count, "
            f"r.created_at, l.position FROM {ref.name} r "
            f"JOIN {link.name} l ON l.reflection_id = r.reflection_id "
            f"JOIN {active.name} a ON a.generation_id = l.generation_id "
            "WHERE a.run_id = :run_id ORDER BY l.position ASC, r.reflection_id ASC"
        ),
        {"run_id": run_id},
    )
    reflections: list[ActiveReflection] = []
    for row in rows:
        try:
            support = json.loads(row.supporting_observation_ids_json)
        except ValueError:
            support = []
        reflections.append(
            ActiveReflection(
                reflection_id=row.reflection_id,
                content=row.content,
                supporting_observation_ids=tuple(str(item) for item in support)
                if isinstance(support, list)
                else (),
                token_count=row.token_count,
                position=row.position,
                created_at=row.created_at,
            )
        )
    return tuple(reflections)


def _existing_tables(conn: Connection) -> set[str]:
    return set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars())


def _prefix_lookup(
    conn: Connection, table: str, id_column: str, run_id: str, memory_id: str
) -> list[Row[Any]]:
    if len(memory_id) == FULL_ID_LENGTH:
        sql = f"SELECT * FROM {table} WHERE run_id = :run_id AND {id_column} = :memory_id"
        params = {"run_id": run_id, "memory_id": memory_id}
    else:
        escaped = memory_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        sql = (
            f"SELECT * FROM {table} WHERE run_id = :run_id AND {id_column} LIKE :prefix ESCAPE '\\' "
            f"ORDER BY {id_column} ASC LIMIT {RECALL_LOOKUP_LIMIT}"
        )
        params = {"run_id": run_id, "prefix": escaped + "%"}
    return list(conn.execute(text(sql), params))


def _create_vocabularies(conn: sqlite3.Connection) -> None:
    """The trigram indexes' vocabulary tables, on a new read connection (1-2 character searches)."""
    if trigram_supported():
        for names in (OBSERVATION_SEARCH, REFLECTION_SEARCH, TRANSCRIPT_SEARCH):
            conn.execute(vocabulary_ddl(names.trigram_table))


class SearchReader(MemoryReader):
    """:class:`MemoryReader` plus the exact-search, recall and projection-snapshot queries.

    Guarantees: read only; one snapshot per call; ``auto`` and ``scan`` searches return the same
    rows; a missing database or missing tables give empty answers.
    """

    def __init__(self, db_path: str | os.PathLike[str]) -> None:
        super().__init__(db_path)
        self._snapshots = SnapshotReader(db_path, _create_vocabularies)
        # Projection gets a connection of its own: compaction in a fresh process then skips
        # creating the vocabulary tables that only 1-2 character searches read.
        self._projection_snapshots = SnapshotReader(db_path)

    def close(self) -> None:
        """Close this thread's reused read connections (the next call reopens them)."""
        self._snapshots.close()
        self._projection_snapshots.close()

    def trigram_index_present(self) -> bool:
        """Whether both trigram index tables exist and this SQLite can query them."""
        wanted = (OBSERVATION_TRIGRAM_TABLE, REFLECTION_TRIGRAM_TABLE)
        return trigram_supported() and self._snapshots.run(lambda conn, names: True, False, wanted)

    def order_index_present(self) -> bool:
        """Whether both result-order indexes exist (migration ``omray_003``)."""
        wanted = (OBSERVATION_ORDER_INDEX, REFLECTION_ORDER_INDEX)
        return self._snapshots.run(lambda conn, names: True, False, wanted)

    def exact_search(
        self, spec: ExactSearchSpec, strategy: SearchStrategy = "auto", tuning: PlanTuning = DEFAULT_TUNING
    ) -> ExactSearchRows:
        """Matching rows of both tables for one exact search, in one snapshot.

        Every ``strategy`` and every ``tuning`` give the same rows; they only choose the work. Runs
        on the reused per-thread connection, with plain ``sqlite3`` statements and slim hit rows:
        on an indexed plan, opening a connection and decoding full records cost more than the search.
        """

        def query(conn: sqlite3.Connection, names: frozenset[str]) -> ExactSearchRows:
            observations: tuple[ObservationHit, ...] = ()
            observation_strategy: UsedStrategy = "scan"
            if OBSERVATION_SEARCH.table in names:
                bounds = (spec.observation_after, spec.observation_before)
                rows, observation_strategy = search_table(
                    TableSearch(conn, OBSERVATION_SEARCH, spec, bounds), strategy, names, tuning
                )
                observations = newest_source_first(conn, tuple(ObservationHit(*row) for row in rows))
            reflections: tuple[ReflectionHit, ...] = ()
            reflection_strategy: UsedStrategy = "scan"
            if REFLECTION_SEARCH.table in names:
                bounds = (spec.reflection_after, spec.reflection_before)
                rows, reflection_strategy = search_table(
                    TableSearch(conn, REFLECTION_SEARCH, spec, bounds), strategy, names, tuning
                )
                reflections = tuple(ReflectionHit(*row) for row in rows)
            transcript: tuple[TranscriptHit, ...] = ()
            if TRANSCRIPT_SEARCH.table in names:
                bounds = (spec.observation_after, spec.observation_before)
                rows, _ = search_table(
                    TableSearch(conn, TRANSCRIPT_SEARCH, spec, bounds), strategy, names, tuning
                )
                transcript = tuple(TranscriptHit(*row) for row in rows)
            return ExactSearchRows(
                observations=observations,
                reflections=reflections,
                observation_strategy=observation_strategy,
                reflection_strategy=reflection_strategy,
                transcript=transcript,
            )

        empty = ExactSearchRows(
            observations=(), reflections=(), observation_strategy="scan", reflection_strategy="scan"
        )
        return self._snapshots.run(query, empty)

    def covering_observations(
        self, events: Collection[tuple[str, int]]
    ) -> dict[tuple[str, int], ObservationHit]:
        """For transcript hits ``(session, seq)``, the observation covering each event
        (:func:`persistence.queries.select_covering_ids`); events no observation covers are left out."""

        def query(conn: Connection) -> dict[tuple[str, int], ObservationHit]:
            chosen = select_covering_ids(conn, events)
            ids = sorted(set(chosen.values()))
            hits: dict[str, ObservationHit] = {}
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                marks = ", ".join("?" for _ in batch)
                sql = (
                    f"SELECT {_OBSERVATION_HIT_COLUMNS} FROM om_observation WHERE observation_id IN ({marks})"
                )
                for row in conn.exec_driver_sql(sql, tuple(batch)):
                    hits[str(row[0])] = ObservationHit(*row)
            return {event: hits[memory_id] for event, memory_id in chosen.items() if memory_id in hits}

        if not events:
            return {}
        return self._run(query, {}, ("om_observation", "omray_observation_ref"))

    def projection(self, run_id: str) -> ProjectionRows:
        """The session's active reflections and observations as the projection shows them, in one snapshot.

        The same selection as :meth:`active_memory` (reference §8: the active generation's reflections;
        its retained observations plus those past its watermark, or every observation before the first
        generation), read on the reused connection in projection order, without full records.
        """
        return self._projection_snapshots.run(
            lambda conn, names: select_projection(conn, run_id),
            ProjectionRows(reflections=(), observations=()),
            ACTIVE_MEMORY_TABLES,
        )

    def projection_lines(self, run_id: str) -> ProjectionLines:
        """:meth:`projection` as rendered entry lines (:class:`ProjectionLines`): compaction's path.

        Memoized per connection until any commit to the database (see
        :meth:`SnapshotReader.run`): a repeated compaction of an unchanged session reads nothing.
        """
        return self._projection_snapshots.run(
            lambda conn, names: select_projection_lines(conn, run_id, names),
            ProjectionLines(reflection_lines=(), observation_text=""),
            ACTIVE_MEMORY_TABLES,
            memo_key=("projection_lines", run_id),
        )

    def projection_text(self, run_id: str, assemble: Assemble) -> str:
        """The session's projection as one text built by ``assemble`` (``select_projection_text``).

        Memoized like :meth:`projection_lines`; ``assemble`` must always be the same function.
        """
        return self._projection_snapshots.run(
            lambda conn, names: select_projection_text(conn, run_id, names, assemble),
            assemble((), ()),
            ACTIVE_MEMORY_TABLES,
            memo_key=("projection_text", run_id),
        )

    def active_memory(self, run_id: str) -> ActiveMemory:
        """Active reflections and the active observation pool of a session, in one snapshot."""

        def query(conn: Connection) -> ActiveMemory:
            return ActiveMemory(
                reflections=select_active_reflections(conn, run_id),
                candidates=select_active_candidate_set(conn, run_id),
            )

        empty = ActiveMemory(reflections=(), candidates=_empty_candidate_set(run_id))
        return self._run(query, empty, ACTIVE_MEMORY_TABLES)

    def find_observations(self, run_id: str, memory_id: str) -> list[ObservationRecord]:
        """Observations of ``run_id`` with this full id, or up to 3 whose id starts with this prefix."""

        def query(conn: Connection) -> list[ObservationRecord]:
            rows = _prefix_lookup(conn, schema.om_observation.name, "observation_id", run_id, memory_id)
            return [observation_from_row(row) for row in rows]

        return self._run(query, [], _OBSERVATION_TABLES)

    def find_reflections(self, run_id: str, memory_id: str) -> list[ReflectionRecord]:
        """Reflections of ``run_id`` with this full id, or up to 3 whose id starts with this prefix."""

        def query(conn: Connection) -> list[ReflectionRecord]:
            rows = _prefix_lookup(conn, schema.om_reflection.name, "reflection_id", run_id, memory_id)
            return [reflection_from_row(row) for row in rows]

        return self._run(query, [], _REFLECTION_TABLES)

    def find_events(self, run_id: str, event_id: str) -> list[tuple[str, int]]:
        """``(event id, seq)`` of transcript events of ``run_id`` with this full id, or up to 3 whose id
        starts with this prefix."""

        def query(conn: Connection) -> list[tuple[str, int]]:
            rows = _prefix_lookup(conn, schema.omray_transcript.name, "event_id", run_id, event_id)
            return [(str(row.event_id), int(row.seq)) for row in rows]

        return self._run(query, [], (schema.omray_transcript.name,))

    def covering_ids(self, run_id: str, seq_start: int, seq_end: int) -> list[str]:
        """The observations covering the events ``seq_start..seq_end`` of ``run_id``, in seq order."""

        def query(conn: Connection) -> list[str]:
            found = select_covering_ids(conn, [(run_id, seq) for seq in range(seq_start, seq_end + 1)])
            return list(dict.fromkeys(found[key] for key in sorted(found)))

        return self._run(query, [], ("om_observation", "omray_observation_ref"))

    def existing_observation_ids(self, run_id: str, observation_ids: Collection[str]) -> set[str]:
        """The subset of ``observation_ids`` that exist in session ``run_id``."""
        return {row.observation_id for row in self.observations_by_ids(list(observation_ids), run_id)}

    def observation_ids_in_session(self, run_id: str) -> set[str]:
        """Every observation id of a session, dropped or not."""

        def query(conn: Connection) -> set[str]:
            rows = conn.execute(
                text("SELECT observation_id FROM om_observation WHERE run_id = :run_id"), {"run_id": run_id}
            )
            return set(rows.scalars())

        return self._run(query, set(), _OBSERVATION_TABLES)
