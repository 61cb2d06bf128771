"""Read-only queries of exact ``memory_search``, ``recall`` and the projection (reference §13.3, §13.6).

:meth:`SearchReader.exact_search` runs one exact search over the observation, reflection and
transcript tables in one snapshot: per table, the plan ``persistence.search.plans`` picks, with the
statements of ``persistence.search.sql``; the page's observations of one minute are then put in
source order (:func:`newest_source_first`). The recall lookups (a full id or a unique prefix) and
the projection snapshots live here too.

:class:`SearchReader` extends :class:`persistence.reads.memory_reader.MemoryReader`: same guarantees (read
only, one snapshot per call, a missing file or missing tables give the empty answer).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final

from sqlalchemy import Connection, Row, text

from persistence.database import schema
from persistence.database.omray_tables import (
    OBSERVATION_ORDER_INDEX,
    OBSERVATION_TRIGRAM_TABLE,
    REFLECTION_ORDER_INDEX,
    REFLECTION_TRIGRAM_TABLE,
    trigram_supported,
)
from persistence.database.read_connection import SnapshotReader
from persistence.database.sql_values import in_batches, json_list
from persistence.reads.memory_reader import (
    ActiveCandidateSet,
    MemoryReader,
    _empty_candidate_set,
    observation_from_row,
    select_active_candidate_set,
    select_active_reflections,
    select_covering_ids,
)
from persistence.reads.projection import (
    ACTIVE_MEMORY_TABLES,
    Assemble,
    ProjectionLines,
    ProjectionRows,
    select_projection,
    select_projection_lines,
    select_projection_text,
)
from persistence.reads.projection_sql import FIRST_SOURCE_SEQ_SQL
from persistence.search.plans import DEFAULT_TUNING, PlanTuning, SearchStrategy, UsedStrategy, search_table
from persistence.search.request import SearchRequest, escape_like
from persistence.search.short_queries import vocabulary_ddl
from persistence.search.sql import (
    OBSERVATION_HIT_COLUMNS,
    OBSERVATION_SEARCH,
    REFLECTION_SEARCH,
    TRANSCRIPT_SEARCH,
    SearchTable,
    TableSearch,
)
from protocol.ids import FULL_ID, FULL_ID_LENGTH
from protocol.records import ActiveReflection, ObservationRecord, ReflectionRecord, Relevance

RECALL_LOOKUP_LIMIT: Final[int] = 3
"""Rows fetched per id/prefix lookup: two are enough to tell "ambiguous"."""


_OBSERVATION_TABLES: Final = ("om_observation",)
_REFLECTION_TABLES: Final = ("om_reflection",)


@dataclass(frozen=True, slots=True)
class ObservationHit:
    """The columns of an ``om_observation`` row that a search answer shows."""

    observation_id: str
    """Observation id."""
    session_id: str
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
    session_id: str
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
        key=lambda hit: (hit.session_id, *(-value for value in position.get(hit.observation_id, (0, 0)))),
    )
    ordered.sort(key=lambda hit: hit.timestamp, reverse=True)
    return tuple(ordered)


@dataclass(frozen=True, slots=True)
class TranscriptHit:
    """The columns of an ``omray_transcript`` row that a search answer shows."""

    event_id: str
    """Event id (``protocol.identities.transcript_event_id``)."""
    session_id: str
    """Session."""
    timestamp: str
    """``YYYY-MM-DD HH:MM``."""
    seq: int
    """The event's seq."""
    content: str
    """Its text."""


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


def _decode_support_ids(raw: str) -> tuple[str, ...]:
    # Only real ids can be recalled or shown; anything else in a legacy row is dropped.
    return tuple(item for item in json_list(raw) if isinstance(item, str) and FULL_ID.match(item))


def reflection_from_row(row: Row[Any]) -> ReflectionRecord:
    """An ``om_reflection`` row as a record (support ids decoded; non-id entries dropped)."""
    data = row._asdict()
    data["supporting_observation_ids"] = _decode_support_ids(data.pop("supporting_observation_ids_json"))
    return ReflectionRecord(**data)


def _prefix_lookup(
    conn: Connection, table: str, id_column: str, session_id: str, memory_id: str
) -> list[Row[Any]]:
    if len(memory_id) == FULL_ID_LENGTH:
        sql = f"SELECT * FROM {table} WHERE run_id = :run_id AND {id_column} = :memory_id"
        params = {"run_id": session_id, "memory_id": memory_id}
    else:
        escaped = escape_like(memory_id)
        sql = (
            f"SELECT * FROM {table} WHERE run_id = :run_id AND {id_column} LIKE :prefix ESCAPE '\\' "
            f"ORDER BY {id_column} ASC LIMIT {RECALL_LOOKUP_LIMIT}"
        )
        params = {"run_id": session_id, "prefix": escaped + "%"}
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
        self, request: SearchRequest, strategy: SearchStrategy = "auto", tuning: PlanTuning = DEFAULT_TUNING
    ) -> ExactSearchRows:
        """Matching rows of both tables for one exact search, in one snapshot.

        Every ``strategy`` and every ``tuning`` give the same rows; they only choose the work. Runs
        on the reused per-thread connection, with plain ``sqlite3`` statements and slim hit rows:
        on an indexed plan, opening a connection and decoding full records cost more than the search.
        """

        def query(conn: sqlite3.Connection, names: frozenset[str]) -> ExactSearchRows:
            def rows_of(table: SearchTable, kind: str) -> tuple[list[Any], UsedStrategy]:
                if table.table not in names:
                    return [], "scan"
                search = TableSearch(conn, table, request, request.bounds.for_kind(kind))
                return search_table(search, strategy, names, tuning)

            rows, observation_strategy = rows_of(OBSERVATION_SEARCH, "observation")
            observations = newest_source_first(conn, tuple(ObservationHit(*row) for row in rows))
            rows, reflection_strategy = rows_of(REFLECTION_SEARCH, "reflection")
            reflections = tuple(ReflectionHit(*row) for row in rows)
            rows, _ = rows_of(TRANSCRIPT_SEARCH, "event")
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
        (:func:`persistence.reads.memory_reader.select_covering_ids`); events no observation covers
        are left out."""

        def query(conn: Connection) -> dict[tuple[str, int], ObservationHit]:
            chosen = select_covering_ids(conn, events)
            ids = sorted(set(chosen.values()))
            hits: dict[str, ObservationHit] = {}
            for batch, marks in in_batches(ids):
                sql = (
                    f"SELECT {OBSERVATION_HIT_COLUMNS} FROM om_observation WHERE observation_id IN ({marks})"
                )
                for row in conn.exec_driver_sql(sql, tuple(batch)):
                    hits[str(row[0])] = ObservationHit(*row)
            return {event: hits[memory_id] for event, memory_id in chosen.items() if memory_id in hits}

        if not events:
            return {}
        return self._run(query, {}, ("om_observation", "omray_observation_ref"))

    def projection(self, session_id: str) -> ProjectionRows:
        """The session's active reflections and observations as the projection shows them, in one snapshot.

        The same selection as :meth:`active_memory` (reference §8: the active generation's reflections;
        its retained observations plus those past its watermark, or every observation before the first
        generation), read on the reused connection in projection order, without full records.
        """
        return self._projection_snapshots.run(
            lambda conn, names: select_projection(conn, session_id),
            ProjectionRows(reflections=(), observations=()),
            ACTIVE_MEMORY_TABLES,
        )

    def projection_lines(self, session_id: str) -> ProjectionLines:
        """:meth:`projection` as rendered entry lines (:class:`ProjectionLines`): compaction's path.

        Memoized per connection until any commit to the database (see
        :meth:`SnapshotReader.run`): a repeated compaction of an unchanged session reads nothing.
        """
        return self._projection_snapshots.run(
            lambda conn, names: select_projection_lines(conn, session_id, names),
            ProjectionLines(reflection_lines=(), observation_text=""),
            ACTIVE_MEMORY_TABLES,
            memo_key=("projection_lines", session_id),
        )

    def projection_text(self, session_id: str, assemble: Assemble) -> str:
        """The session's projection as one text built by ``assemble`` (``select_projection_text``).

        Memoized like :meth:`projection_lines`; ``assemble`` must always be the same function.
        """
        return self._projection_snapshots.run(
            lambda conn, names: select_projection_text(conn, session_id, names, assemble),
            assemble((), ()),
            ACTIVE_MEMORY_TABLES,
            memo_key=("projection_text", session_id),
        )

    def active_memory(self, session_id: str) -> ActiveMemory:
        """Active reflections and the active observation pool of a session, in one snapshot."""

        def query(conn: Connection) -> ActiveMemory:
            return ActiveMemory(
                reflections=select_active_reflections(conn, session_id, lenient=True),
                candidates=select_active_candidate_set(conn, session_id),
            )

        empty = ActiveMemory(reflections=(), candidates=_empty_candidate_set(session_id))
        return self._run(query, empty, ACTIVE_MEMORY_TABLES)

    def find_observations(self, session_id: str, memory_id: str) -> list[ObservationRecord]:
        """Observations of ``session_id`` with this full id, or up to 3 whose id starts with this prefix."""

        def query(conn: Connection) -> list[ObservationRecord]:
            rows = _prefix_lookup(conn, schema.om_observation.name, "observation_id", session_id, memory_id)
            return [observation_from_row(row) for row in rows]

        return self._run(query, [], _OBSERVATION_TABLES)

    def find_reflections(self, session_id: str, memory_id: str) -> list[ReflectionRecord]:
        """Reflections of ``session_id`` with this full id, or up to 3 whose id starts with this prefix."""

        def query(conn: Connection) -> list[ReflectionRecord]:
            rows = _prefix_lookup(conn, schema.om_reflection.name, "reflection_id", session_id, memory_id)
            return [reflection_from_row(row) for row in rows]

        return self._run(query, [], _REFLECTION_TABLES)

    def find_events(self, session_id: str, event_id: str) -> list[tuple[str, int]]:
        """``(event id, seq)`` of transcript events of ``session_id`` with this full id, or up to 3 whose id
        starts with this prefix."""

        def query(conn: Connection) -> list[tuple[str, int]]:
            rows = _prefix_lookup(conn, schema.omray_transcript.name, "event_id", session_id, event_id)
            return [(str(row.event_id), int(row.seq)) for row in rows]

        return self._run(query, [], (schema.omray_transcript.name,))

    def covering_ids(self, session_id: str, seq_start: int, seq_end: int) -> list[str]:
        """The observations covering the events ``seq_start..seq_end`` of ``session_id``, in seq order."""

        def query(conn: Connection) -> list[str]:
            found = select_covering_ids(conn, [(session_id, seq) for seq in range(seq_start, seq_end + 1)])
            return list(dict.fromkeys(found[key] for key in sorted(found)))

        return self._run(query, [], ("om_observation", "omray_observation_ref"))

    def existing_observation_ids(self, session_id: str, observation_ids: Collection[str]) -> set[str]:
        """The subset of ``observation_ids`` that exist in session ``session_id``."""
        return {row.observation_id for row in self.observations_by_ids(list(observation_ids), session_id)}

    def observation_ids_in_session(self, session_id: str) -> set[str]:
        """Every observation id of a session, dropped or not."""

        def query(conn: Connection) -> set[str]:
            rows = conn.execute(
                text("SELECT observation_id FROM om_observation WHERE run_id = :run_id"),
                {"run_id": session_id},
            )
            return set(rows.scalars())

        return self._run(query, set(), _OBSERVATION_TABLES)
