"""Read-only queries of ``memory_search`` (exact mode) and ``recall`` (reference §13.3, §13.6).

Exact search runs over every session in the database, on both tables, with the escaped
``LIKE ... ESCAPE '\\'`` of the reference, the per-table date bounds, newest first and
``LIMIT limit + 1`` (so the caller can tell ``truncated``). It has two strategies with identical
answers:

* ``scan``: the plain escaped ``LIKE`` over the table (what the original does).
* ``auto`` (the fast path): when the trigram indexes exist (migration ``omray_002``), this SQLite
  has the trigram tokenizer, and the literal query is at least 3 characters with no NUL, a
  quoted-phrase ``MATCH`` on the FTS5 trigram index picks candidate rows and the very same
  ``LIKE`` decides. A phrase with too many candidates (a common substring) takes the scan, which
  is cheaper then. The tokenizer folds case (Unicode, a superset of the ASCII folding ``LIKE``
  does), so every ``LIKE`` match is a candidate and ``LIKE`` alone removes the extra ones. Shorter
  queries cannot use a trigram index and take the scan.

:class:`SearchReader` extends :class:`persistence.queries.MemoryReader`: same guarantees (read
only, one snapshot per call, a missing file or missing tables give the empty answer).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Literal

from sqlalchemy import Connection, Row, TextClause, text

from persistence import schema
from persistence.migrations import OBSERVATION_TRIGRAM_TABLE, REFLECTION_TRIGRAM_TABLE, trigram_supported
from persistence.queries import (
    ActiveCandidateSet,
    MemoryReader,
    _empty_candidate_set,
    observation_from_row,
    select_active_candidate_set,
)
from protocol.records import ActiveReflection, ObservationRecord, ReflectionRecord

SearchStrategy = Literal["auto", "trigram", "scan"]
"""``auto``: trigram pre-filter when it applies and is selective, else scan; ``trigram``: pre-filter
whenever it applies (3+ characters, index present); ``scan``: always the plain ``LIKE`` scan."""

UsedStrategy = Literal["trigram", "scan"]
"""What a search actually did."""

TRIGRAM_MIN_CHARACTERS: Final[int] = 3
"""Shortest literal query a trigram index can pre-filter."""

SELECTIVE_FRACTION: Final[int] = 16
"""The trigram pre-filter is used only when fewer than 1/16 of a table's rows are candidates."""

MIN_CANDIDATE_CAP: Final[int] = 64
"""Small tables still use the pre-filter for up to this many candidates."""

RECALL_LOOKUP_LIMIT: Final[int] = 3
"""Rows fetched per id/prefix lookup: two are enough to tell "ambiguous"."""

FULL_ID_LENGTH: Final[int] = 64
"""Length of a full memory id; shorter ids are prefixes."""

_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")

_OBSERVATION_TABLES: Final = ("om_observation",)
_REFLECTION_TABLES: Final = ("om_reflection",)
_ACTIVE_MEMORY_TABLES: Final = (
    "om_observation",
    "om_reflection",
    "om_active_generation",
    "om_memory_generation",
    "om_generation_reflection",
    "om_generation_retained_observation",
)


@dataclass(frozen=True, slots=True)
class ExactSearchSpec:
    """One exact search, already validated and normalized (see ``actors.search_core.SearchRequest``)."""

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


@dataclass(frozen=True, slots=True)
class ExactSearchRows:
    """Rows of both tables for one exact search, each ordered newest first, then by id."""

    observations: tuple[ObservationRecord, ...]
    """Matching observations (at most ``fetch_limit``)."""
    reflections: tuple[ReflectionRecord, ...]
    """Matching reflections (at most ``fetch_limit``)."""
    strategy: UsedStrategy
    """``trigram`` when the index pre-filtered the candidates, else ``scan``."""


@dataclass(frozen=True, slots=True)
class ActiveMemory:
    """A session's active reflections and active observation pool, read in one snapshot."""

    reflections: tuple[ActiveReflection, ...]
    """Reflections of the active generation, by position."""
    candidates: ActiveCandidateSet
    """The active observation pool (reference §8)."""


def trigram_phrase(query: str) -> str:
    """The FTS5 quoted-phrase query for a literal string (inner ``"`` doubled)."""
    return '"' + query.replace('"', '""') + '"'


def uses_trigram(query: str) -> bool:
    """Whether a literal query is long enough (and clean enough) for the trigram pre-filter.

    SQLite's ``LIKE`` stops reading its pattern at a NUL character, so such queries keep the scan
    to keep exactly its semantics.
    """
    return len(query) >= TRIGRAM_MIN_CHARACTERS and "\0" not in query


def _date_filters(column: str, after: str | None, before: str | None, params: dict[str, Any]) -> str:
    clauses = ""
    if after is not None:
        clauses += f" AND {column} >= :after"
        params["after"] = after
    if before is not None:
        clauses += f" AND {column} <= :before"
        params["before"] = before
    return clauses


def _search_statement(
    table: str,
    id_column: str,
    time_column: str,
    index_table: str | None,
    after: str | None,
    before: str | None,
) -> tuple[TextClause, dict[str, Any]]:
    params: dict[str, Any] = {}
    prefilter = ""
    if index_table is not None:
        prefilter = (
            f"{id_column} IN (SELECT {id_column} FROM {index_table} WHERE {index_table} MATCH :phrase) AND "
        )
    sql = (
        f"SELECT * FROM {table} WHERE {prefilter}content LIKE :pattern ESCAPE '\\'"
        f"{_date_filters(time_column, after, before, params)}"
        f" ORDER BY {time_column} DESC, {id_column} ASC LIMIT :fetch_limit"
    )
    return text(sql), params


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


def _index_is_selective(conn: Connection, table: str, index_table: str, phrase: str) -> bool:
    """Whether the phrase's candidates are few enough for the pre-filter to beat a scan.

    A common substring makes nearly every row a candidate, and fetching each candidate by id costs
    more than scanning; counting stops at the cap, so this check stays cheap either way.
    """
    approximate_rows = conn.execute(text(f"SELECT max(rowid) FROM {table}")).scalar() or 0
    cap = max(MIN_CANDIDATE_CAP, int(approximate_rows) // SELECTIVE_FRACTION)
    candidates = conn.execute(
        text(
            f"SELECT count(*) FROM (SELECT 1 FROM {index_table} WHERE {index_table} MATCH :phrase LIMIT :cap)"
        ),
        {"phrase": phrase, "cap": cap},
    ).scalar_one()
    return int(candidates) < cap


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


class SearchReader(MemoryReader):
    """:class:`MemoryReader` plus the exact-search, recall and projection-snapshot queries.

    Guarantees: read only; one snapshot per call; ``auto`` and ``scan`` searches return the same
    rows; a missing database or missing tables give empty answers.
    """

    def trigram_index_present(self) -> bool:
        """Whether both trigram index tables exist and this SQLite can query them."""

        def query(conn: Connection) -> bool:
            return {OBSERVATION_TRIGRAM_TABLE, REFLECTION_TRIGRAM_TABLE} <= _existing_tables(conn)

        return trigram_supported() and self._run(query, False, ())

    def exact_search(self, spec: ExactSearchSpec, strategy: SearchStrategy = "auto") -> ExactSearchRows:
        """Matching rows of both tables for one exact search, in one snapshot."""

        def query(conn: Connection) -> ExactSearchRows:
            tables = _existing_tables(conn)
            indexable = (
                strategy != "scan"
                and uses_trigram(spec.query)
                and trigram_supported()
                and {OBSERVATION_TRIGRAM_TABLE, REFLECTION_TRIGRAM_TABLE} <= tables
            )
            used: set[UsedStrategy] = set()
            observations: tuple[ObservationRecord, ...] = ()
            if schema.om_observation.name in tables:
                rows, how = self._search_table(
                    conn,
                    spec,
                    strategy,
                    indexable,
                    (schema.om_observation.name, "observation_id", "timestamp", OBSERVATION_TRIGRAM_TABLE),
                    (spec.observation_after, spec.observation_before),
                )
                observations = tuple(observation_from_row(row) for row in rows)
                used.add(how)
            reflections: tuple[ReflectionRecord, ...] = ()
            if schema.om_reflection.name in tables:
                rows, how = self._search_table(
                    conn,
                    spec,
                    strategy,
                    indexable,
                    (schema.om_reflection.name, "reflection_id", "created_at", REFLECTION_TRIGRAM_TABLE),
                    (spec.reflection_after, spec.reflection_before),
                )
                reflections = tuple(reflection_from_row(row) for row in rows)
                used.add(how)
            return ExactSearchRows(
                observations=observations,
                reflections=reflections,
                strategy="trigram" if "trigram" in used else "scan",
            )

        return self._run(query, ExactSearchRows(observations=(), reflections=(), strategy="scan"), ())

    def _search_table(
        self,
        conn: Connection,
        spec: ExactSearchSpec,
        strategy: SearchStrategy,
        indexable: bool,
        names: tuple[str, str, str, str],
        bounds: tuple[str | None, str | None],
    ) -> tuple[list[Row[Any]], UsedStrategy]:
        table, id_column, time_column, index_table = names
        phrase = trigram_phrase(spec.query)
        use_index = indexable and (
            strategy == "trigram" or _index_is_selective(conn, table, index_table, phrase)
        )
        statement, params = _search_statement(
            table, id_column, time_column, index_table if use_index else None, bounds[0], bounds[1]
        )
        rows = list(conn.execute(statement, self._search_params(spec, params, use_index)))
        return rows, "trigram" if use_index else "scan"

    @staticmethod
    def _search_params(spec: ExactSearchSpec, params: dict[str, Any], use_index: bool) -> dict[str, Any]:
        bound = {**params, "pattern": spec.like_pattern, "fetch_limit": spec.fetch_limit}
        if use_index:
            bound["phrase"] = trigram_phrase(spec.query)
        return bound

    def active_memory(self, run_id: str) -> ActiveMemory:
        """Active reflections and the active observation pool of a session, in one snapshot."""

        def query(conn: Connection) -> ActiveMemory:
            return ActiveMemory(
                reflections=select_active_reflections(conn, run_id),
                candidates=select_active_candidate_set(conn, run_id),
            )

        empty = ActiveMemory(reflections=(), candidates=_empty_candidate_set(run_id))
        return self._run(query, empty, _ACTIVE_MEMORY_TABLES)

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
