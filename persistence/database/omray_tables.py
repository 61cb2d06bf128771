"""omray's own tables, triggers and indexes in SQL: the names the readers use (trigram tables, order
and tail indexes, the row-count table) and the statements :mod:`persistence.database.migrations`
records as its steps (``OMRAY_MIGRATIONS``), plus :func:`ddl`, SQLAlchemy's ``CREATE`` statements
of schema tables and indexes.

A released step's statements never change (``tests/unit/persistence/test_migration_history.py``):
the ``_v1`` builders and the ``OMRAY_00N_STATEMENTS`` texts are that history, frozen.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from sqlalchemy import Index, Table
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from persistence.database import schema
from persistence.reads.projection_sql import (
    OBSERVATION_LINE_SQL,
    OBSERVATION_LINE_TABLE,
    ORDER_KEY_SQL,
    PROJECTION_BUILT_TABLE,
    PROJECTION_CACHE_TABLE,
    PROJECTION_DIRTY_TABLE,
    SESSION_VERSION_TABLE,
)


def ddl(tables: Sequence[Table] = (), indexes: Sequence[Index] = ()) -> tuple[str, ...]:
    dialect = sqlite.dialect()
    statements = [
        str(CreateTable(table, if_not_exists=True).compile(dialect=dialect)).strip() for table in tables
    ]
    statements += [
        str(CreateIndex(index, if_not_exists=True).compile(dialect=dialect)).strip() for index in indexes
    ]
    return tuple(statements)


def table_indexes(*tables: Table) -> list[Index]:
    return [index for table in tables for index in sorted(table.indexes, key=lambda i: str(i.name))]


OBSERVATION_TRIGRAM_TABLE = "omray_observation_trigram"
"""FTS5 trigram index over ``om_observation.content`` (exact-search pre-filter)."""

REFLECTION_TRIGRAM_TABLE = "omray_reflection_trigram"
"""FTS5 trigram index over ``om_reflection.content`` (exact-search pre-filter)."""

TRIGRAM_TOKENIZER = "trigram case_sensitive 0"
"""Case-insensitive trigram tokenizer: it folds at least what ``LIKE`` folds (ASCII), so a phrase
match is a superset of the ``LIKE`` matches, which the query then re-checks with the same ``LIKE``."""


@functools.lru_cache(maxsize=1)
def trigram_supported() -> bool:
    """Whether this process's SQLite has FTS5 with the ``trigram`` tokenizer (SQLite >= 3.34)."""
    try:
        probe = sqlite3.connect(":memory:")
    except sqlite3.Error:  # pragma: no cover - an in-memory database always opens
        return False
    try:
        probe.execute(f"CREATE VIRTUAL TABLE probe USING fts5(x, tokenize = '{TRIGRAM_TOKENIZER}')")
    except sqlite3.Error:
        return False
    finally:
        probe.close()
    return True


def trigram_ddl(table: str, source: str, id_column: str) -> tuple[str, ...]:
    # A self-contained FTS5 table keyed by the memory id, not an external-content table keyed by
    # rowid: om_* tables have TEXT primary keys, and their implicit rowids are not guaranteed to
    # survive VACUUM or a dump/restore, which would silently desync an index keyed by rowid.
    # Deletes and updates (which omray never does) cost a scan of the index table; inserts are cheap.
    insert = f"INSERT INTO {table}({id_column}, content) VALUES (new.{id_column}, new.content);"
    delete = f"DELETE FROM {table} WHERE {id_column} = old.{id_column};"
    return (
        f"CREATE VIRTUAL TABLE IF NOT EXISTS {table} USING fts5("
        f"{id_column} UNINDEXED, content, tokenize = '{TRIGRAM_TOKENIZER}')",
        f"CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON {source} BEGIN {insert} END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON {source} BEGIN {delete} END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_au AFTER UPDATE OF {id_column}, content ON {source} "
        f"BEGIN {delete} {insert} END",
        f"DELETE FROM {table}",
        f"INSERT INTO {table}({id_column}, content) SELECT {id_column}, content FROM {source}",
    )


_V1_LINE_TABLE: Final = "omray_observation_line"
_V1_CACHE_TABLE: Final = "omray_projection_cache"
_V1_BUILT_TABLE: Final = "omray_projection_built"
_V1_DIRTY_TABLE: Final = "omray_projection_dirty"
"""The derived tables of omray_006 and omray_008 (lines and pieces in minute order), dropped by
omray_012, which builds them again under new names: a reader of one version never takes the other
version's tables for its own."""


def observation_line_ddl_v1() -> tuple[str, ...]:
    # The first shape (migration omray_006), kept as released: replaced by omray_012.
    # Compaction renders a session's whole active pool at once; reading lines rendered at insert
    # time, stored in projection order and clustered by session, costs a fraction of rendering
    # each row on every call. Triggers keep it exact whoever writes om_observation (the PHP
    # extension too); the table is derived data, rebuilt from om_observation here.
    table, source = _V1_LINE_TABLE, schema.om_observation.name
    columns = "run_id, timestamp, observation_id, source_end_seq, line"
    insert = (
        f"INSERT INTO {table} ({columns}) VALUES (new.run_id, new.timestamp, new.observation_id, "
        f"new.source_end_seq, {OBSERVATION_LINE_SQL.format(row='new.')});"
    )
    delete = (
        f"DELETE FROM {table} WHERE run_id = old.run_id AND timestamp = old.timestamp "
        "AND observation_id = old.observation_id;"
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (run_id TEXT NOT NULL, timestamp TEXT NOT NULL, "
        "observation_id TEXT NOT NULL, source_end_seq INTEGER NOT NULL, line TEXT NOT NULL, "
        "PRIMARY KEY (run_id, timestamp, observation_id)) WITHOUT ROWID",
        f"CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON {source} BEGIN {insert} END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON {source} BEGIN {delete} END",
        f"CREATE TRIGGER IF NOT EXISTS {table}_au AFTER UPDATE ON {source} BEGIN {delete} {insert} END",
        f"DELETE FROM {table}",
        f"INSERT INTO {table} ({columns}) SELECT run_id, timestamp, observation_id, source_end_seq, "
        f"{OBSERVATION_LINE_SQL.format(row='')} FROM {source}",
    )


def _version_bump(
    dirty_table: str, from_column: str, session: str, key: str = "''", observation_id: str = "''"
) -> str:
    """Trigger body of the projection pieces (omray_008, and omray_012 with its new names): version
    the session and mark it dirty from the first line touched (``key``, ``observation_id``)."""
    # No conflict clauses: inside a trigger the outer statement's (an UPSERT's) would apply.
    earlier = f"({key} < {from_column} OR ({key} = {from_column} AND {observation_id} < from_id))"
    return (
        f"INSERT INTO {SESSION_VERSION_TABLE} (run_id, version) SELECT {session}, 0 WHERE {session} IS NOT"
        f" NULL AND NOT EXISTS (SELECT 1 FROM {SESSION_VERSION_TABLE} WHERE run_id = {session}); "
        f"UPDATE {SESSION_VERSION_TABLE} SET version = version + 1 WHERE run_id = {session}; "
        f"INSERT INTO {dirty_table} (run_id, {from_column}, from_id) SELECT {session}, {key},"
        f" {observation_id} WHERE {session} IS NOT NULL"
        f" AND NOT EXISTS (SELECT 1 FROM {dirty_table} WHERE run_id = {session}); "
        f"UPDATE {dirty_table} SET {from_column} = CASE WHEN {earlier} THEN {key} ELSE {from_column}"
        f" END, from_id = CASE WHEN {earlier} THEN {observation_id} ELSE from_id END"
        f" WHERE run_id = {session};"
    )


def _generation_bump_triggers(bump: Callable[..., str]) -> tuple[tuple[str, str, str], ...]:
    """(table, event, body) of the piece triggers on the generation tables: a change of the active
    generation, or of its retained set, versions the whole session (dirty from the start)."""
    active = schema.om_active_generation.name
    generation = schema.om_memory_generation.name
    retained = schema.om_generation_retained_observation.name

    def of_generation(generation_id: str) -> str:
        return f"(SELECT run_id FROM {generation} WHERE generation_id = {generation_id})"

    return (
        (active, "INSERT", bump("new.run_id")),
        (active, "DELETE", bump("old.run_id")),
        (active, "UPDATE", bump("old.run_id") + " " + bump("new.run_id")),
        (generation, "UPDATE", bump("old.run_id") + " " + bump("new.run_id")),
        (retained, "INSERT", bump(of_generation("new.generation_id"))),
        (retained, "DELETE", bump(of_generation("old.generation_id"))),
    )


def projection_cache_ddl_v1() -> tuple[str, ...]:
    # The first shape (migration omray_008), kept as released: replaced by omray_012.
    # Compaction reads a session's whole active pool; rendered at write time in pieces of
    # consecutive lines, a cold process reads a few values instead of every line. Triggers version
    # every change to what the pool shows, whoever writes (the PHP extension too), and mark the
    # session dirty from the first line it touched (a change of the active generation: from the
    # start); omray's Store renders again, in the same transaction, only the pieces from there on,
    # so an observation that arrives in time order rewrites the last piece alone. A reader uses the
    # pieces only when they show the session's current version, and reads the lines otherwise.
    observation = schema.om_observation.name
    bump = functools.partial(_version_bump, _V1_DIRTY_TABLE, "from_time")
    new_line = bump("new.run_id", "new.timestamp", "new.observation_id")
    old_line = bump("old.run_id", "old.timestamp", "old.observation_id")
    triggers = (
        (observation, "INSERT", new_line),
        (observation, "DELETE", old_line),
        (observation, "UPDATE", old_line + " " + new_line),
        *_generation_bump_triggers(bump),
    )
    return (
        f"CREATE TABLE IF NOT EXISTS {SESSION_VERSION_TABLE} (run_id TEXT NOT NULL PRIMARY KEY, "
        "version INTEGER NOT NULL) WITHOUT ROWID",
        f"CREATE TABLE IF NOT EXISTS {_V1_DIRTY_TABLE} (run_id TEXT NOT NULL PRIMARY KEY,"
        " from_time TEXT NOT NULL, from_id TEXT NOT NULL) WITHOUT ROWID",
        f"CREATE TABLE IF NOT EXISTS {_V1_BUILT_TABLE} (run_id TEXT NOT NULL PRIMARY KEY, "
        "version INTEGER NOT NULL) WITHOUT ROWID",
        f"CREATE TABLE IF NOT EXISTS {_V1_CACHE_TABLE} (run_id TEXT NOT NULL, piece INTEGER NOT NULL,"
        " first_time TEXT NOT NULL, first_id TEXT NOT NULL, last_time TEXT NOT NULL, last_id TEXT NOT NULL,"
        " lines TEXT NOT NULL, PRIMARY KEY (run_id, piece))",
        *(
            f"CREATE TRIGGER IF NOT EXISTS {_V1_CACHE_TABLE}_{table}_{event.lower()} "
            f"AFTER {event} ON {table} BEGIN {body} END"
            for table, event, body in triggers
        ),
    )


def source_order_ddl() -> tuple[str, ...]:
    # omray_012: the projection in source order (persistence.reads.projection_sql). The lines and their
    # pieces are derived data, so they are dropped and built again under the new key and new names
    # (a reader that finds no such table renders from om_observation, in its own order); the session
    # versions stay (they only ever grow), and no session has pieces until its next change, when
    # the Store renders them from the start; readers use the lines meanwhile. The pieces' triggers
    # now sit on the lines, whose key is computed once per write.
    line_table, source = OBSERVATION_LINE_TABLE, schema.om_observation.name
    observation = schema.om_observation.name
    active = schema.om_active_generation.name
    generation = schema.om_memory_generation.name
    retained = schema.om_generation_retained_observation.name
    old_cache_triggers = (
        (observation, "insert"),
        (observation, "delete"),
        (observation, "update"),
        (active, "insert"),
        (active, "delete"),
        (active, "update"),
        (generation, "update"),
        (retained, "insert"),
        (retained, "delete"),
    )
    columns = "run_id, order_key, observation_id, source_end_seq, line"

    def values(row: str) -> str:
        return (
            f"{row}run_id, {ORDER_KEY_SQL.format(row=row)}, {row}observation_id, {row}source_end_seq, "
            f"{OBSERVATION_LINE_SQL.format(row=row)}"
        )

    insert = f"INSERT INTO {line_table} ({columns}) VALUES ({values('new.')});"
    old_key = ORDER_KEY_SQL.format(row="old.")
    delete = (
        f"DELETE FROM {line_table} WHERE run_id = old.run_id AND order_key = {old_key}"
        " AND observation_id = old.observation_id;"
    )

    bump = functools.partial(_version_bump, PROJECTION_DIRTY_TABLE, "from_key")
    cache_triggers = (
        (line_table, "INSERT", bump("new.run_id", "new.order_key", "new.observation_id")),
        (line_table, "DELETE", bump("old.run_id", "old.order_key", "old.observation_id")),
        *_generation_bump_triggers(bump),
    )
    return (
        *(f"DROP TRIGGER IF EXISTS {_V1_LINE_TABLE}_{event}" for event in ("ai", "ad", "au")),
        *(f"DROP TRIGGER IF EXISTS {_V1_CACHE_TABLE}_{t}_{e}" for t, e in old_cache_triggers),
        f"DROP TABLE IF EXISTS {_V1_LINE_TABLE}",
        f"DROP TABLE IF EXISTS {_V1_CACHE_TABLE}",
        f"DROP TABLE IF EXISTS {_V1_BUILT_TABLE}",
        f"DROP TABLE IF EXISTS {_V1_DIRTY_TABLE}",
        f"CREATE TABLE IF NOT EXISTS {line_table} (run_id TEXT NOT NULL, order_key TEXT NOT NULL, "
        "observation_id TEXT NOT NULL, source_end_seq INTEGER NOT NULL, line TEXT NOT NULL, "
        "PRIMARY KEY (run_id, order_key, observation_id)) WITHOUT ROWID",
        f"CREATE TABLE IF NOT EXISTS {PROJECTION_DIRTY_TABLE} (run_id TEXT NOT NULL PRIMARY KEY,"
        " from_key TEXT NOT NULL, from_id TEXT NOT NULL) WITHOUT ROWID",
        f"CREATE TABLE IF NOT EXISTS {PROJECTION_BUILT_TABLE} (run_id TEXT NOT NULL PRIMARY KEY, "
        "version INTEGER NOT NULL) WITHOUT ROWID",
        f"CREATE TABLE IF NOT EXISTS {PROJECTION_CACHE_TABLE} (run_id TEXT NOT NULL, piece INTEGER NOT NULL,"
        " first_key TEXT NOT NULL, first_id TEXT NOT NULL, last_key TEXT NOT NULL, last_id TEXT NOT NULL,"
        " lines TEXT NOT NULL, PRIMARY KEY (run_id, piece))",
        # Filled before the pieces' triggers exist: a session gets its pieces again at its next
        # change (never rendered: from the start), not all at once in the next transaction.
        f"DELETE FROM {line_table}",
        f"INSERT INTO {line_table} ({columns}) SELECT {values(source + '.')} FROM {source}",
        f"CREATE TRIGGER IF NOT EXISTS {line_table}_ai AFTER INSERT ON {source} BEGIN {insert} END",
        f"CREATE TRIGGER IF NOT EXISTS {line_table}_ad AFTER DELETE ON {source} BEGIN {delete} END",
        f"CREATE TRIGGER IF NOT EXISTS {line_table}_au AFTER UPDATE ON {source} BEGIN {delete} {insert} END",
        *(
            f"CREATE TRIGGER IF NOT EXISTS {PROJECTION_CACHE_TABLE}_{table}_{event.lower()} "
            f"AFTER {event} ON {table} BEGIN {body} END"
            for table, event, body in cache_triggers
        ),
    )


TAIL_INDEXES: Final = {
    schema.om_observation.name: ("idx_omray_observation_tail1", "idx_omray_observation_tail2"),
    schema.om_reflection.name: ("idx_omray_reflection_tail1", "idx_omray_reflection_tail2"),
}
"""Per memory table, its indexes on ``substr(content, -1)`` and ``substr(content, -2)``: with the
trigram index they find every row holding a 1-2 character query (``persistence.search.reader``)."""


TRANSCRIPT_TAIL_INDEXES: Final = {
    schema.omray_transcript.name: ("idx_omray_transcript_tail1", "idx_omray_transcript_tail2"),
}
"""The same for the transcript (created with it, by ``omray_010``)."""

ALL_TAIL_INDEXES: Final = {**TAIL_INDEXES, **TRANSCRIPT_TAIL_INDEXES}
"""Every searched table's tail indexes."""


def tail_index_ddl(tables: Mapping[str, tuple[str, str]] = TAIL_INDEXES) -> tuple[str, ...]:
    return tuple(
        f"CREATE INDEX IF NOT EXISTS {name} ON {table} (substr(content, -{length}))"
        for table, names in tables.items()
        for length, name in enumerate(names, start=1)
    )


OBSERVATION_ORDER_INDEX = "idx_omray_observation_walk"
"""``om_observation(timestamp DESC, observation_id ASC, run_id, relevance, content)``: exact search's
result order, covering every column a search reads (migration ``omray_009``)."""

TRANSCRIPT_ORDER_INDEX = "idx_omray_transcript_walk"
"""``omray_transcript(timestamp DESC, event_id ASC, run_id, seq)``: exact search's result order."""

TRANSCRIPT_SESSION_INDEX = "idx_omray_transcript_run"
"""``omray_transcript(run_id, timestamp)``: a search scoped to some sessions reads only their rows."""

REFLECTION_ORDER_INDEX = "idx_omray_reflection_walk"
"""``om_reflection(created_at DESC, reflection_id ASC, run_id, content)``: the same for reflections."""

FIRST_ORDER_INDEXES: Final = ("idx_omray_observation_time_id", "idx_omray_reflection_time_id")
"""The result-order indexes of ``omray_003`` (keys only), replaced by ``omray_009``."""


OMRAY_001_STATEMENTS: tuple[str, ...] = (
    "CREATE TABLE IF NOT EXISTS omray_job (\n\tjob_seq INTEGER NOT NULL PRIMARY KEY AUTOINCREMENT, "
    "\n\tjob_id TEXT NOT NULL, \n\thandler_id TEXT NOT NULL, \n\tcorrelation_id TEXT, \n\trun_id TEXT "
    "NOT NULL, \n\tpayload_json TEXT NOT NULL, \n\tstate TEXT NOT NULL, \n\tattempts INTEGER DEFAULT 0 "
    "NOT NULL, \n\tnot_before TEXT, \n\taccepted_at TEXT NOT NULL, \n\tstarted_at TEXT, \n\tfinished_at "
    "TEXT, \n\tfailure_reason TEXT, \n\tCHECK (state IN ('pending', 'running', 'succeeded', 'failed')), "
    "\n\tCHECK (attempts >= 0)\n)",
    "CREATE TABLE IF NOT EXISTS omray_runtime_event (\n\tevent_seq INTEGER NOT NULL PRIMARY KEY "
    "AUTOINCREMENT, \n\trun_id TEXT NOT NULL, \n\tevent_type TEXT NOT NULL, \n\tpayload_json TEXT NOT "
    "NULL, \n\tcreated_at TEXT NOT NULL\n)",
    "CREATE INDEX IF NOT EXISTS idx_omray_job_state_seq ON omray_job (state, job_seq)",
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_omray_job_unfinished_job_id ON omray_job (job_id) "
    "WHERE state IN ('pending', 'running')",
    "CREATE INDEX IF NOT EXISTS idx_omray_runtime_event_run_seq ON omray_runtime_event (run_id, event_seq)",
)
"""DDL of ``omray_001_job_queue`` exactly as first released (the table's version-1 shape)."""


TRANSCRIPT_TRIGRAM_TABLE = "omray_transcript_trigram"
"""FTS5 trigram index over ``omray_transcript.content`` (exact search of the transcript)."""


def _ref_select(row: str, table: str = "") -> str:
    """The refs of an observation row (``{row}`` a prefix such as ``new.``) that cite a seq of its own
    session, as ``(run_id, seq, observation_id)`` rows; malformed refs are left out, never an error."""
    refs = f"{row}source_refs_json"
    array = f"CASE WHEN json_valid({refs}) THEN CASE WHEN json_type({refs}) = 'array' THEN {refs} END END"
    field = "CASE WHEN type = 'object' THEN {} END"
    session_id = field.format("coalesce(json_extract(value, '$.run_id'), json_extract(value, '$.runId'))")
    seq_type = field.format("json_type(value, '$.seq')")
    seq = field.format("json_extract(value, '$.seq')")
    return (
        f"SELECT DISTINCT {row}run_id, CAST(json_extract(value, '$.seq') AS INTEGER), {row}observation_id"
        f" FROM {table + ', ' if table else ''}json_each(coalesce({array}, '[]'))"
        f" WHERE ({session_id}) = {row}run_id"
        f" AND ({seq_type}) = 'integer' AND ({seq}) >= 1"
    )


def transcript_ddl() -> tuple[str, ...]:
    # The refs of every observation, one row per cited event of its own session, kept by triggers
    # whoever writes om_observation (the PHP extension too): a transcript hit finds the observation
    # citing its event through an index instead of parsing every candidate's JSON.
    refs, source = schema.omray_observation_ref.name, schema.om_observation.name
    insert = f"INSERT OR IGNORE INTO {refs} (run_id, seq, observation_id) {_ref_select('new.')};"
    delete = f"DELETE FROM {refs} WHERE run_id = old.run_id AND observation_id = old.observation_id;"
    return (
        *ddl([schema.omray_transcript, schema.omray_transcript_through, schema.omray_observation_ref]),
        f"CREATE INDEX IF NOT EXISTS {TRANSCRIPT_ORDER_INDEX} ON {schema.omray_transcript.name}"
        " (timestamp DESC, event_id ASC, run_id, seq)",
        f"CREATE INDEX IF NOT EXISTS {TRANSCRIPT_SESSION_INDEX} ON {schema.omray_transcript.name}"
        " (run_id, timestamp)",
        *tail_index_ddl(TRANSCRIPT_TAIL_INDEXES),
        f"CREATE TRIGGER IF NOT EXISTS {refs}_ai AFTER INSERT ON {source} BEGIN {insert} END",
        f"CREATE TRIGGER IF NOT EXISTS {refs}_ad AFTER DELETE ON {source} BEGIN {delete} END",
        f"CREATE TRIGGER IF NOT EXISTS {refs}_au AFTER UPDATE OF run_id, observation_id, source_refs_json"
        f" ON {source} BEGIN {delete} {insert} END",
        f"DELETE FROM {refs}",
        f"INSERT OR IGNORE INTO {refs} (run_id, seq, observation_id) {_ref_select(source + '.', source)}",
    )


ROW_COUNT_TABLE: Final[str] = "omray_row_count"
"""Rows of each memory table, kept by triggers: what the index's source fingerprint reads instead of
counting 100,000 rows on every search (``persistence.semantic.sources``)."""
COUNTED_TABLES: Final[tuple[str, ...]] = (
    schema.om_observation.name,
    schema.om_reflection.name,
    schema.omray_transcript.name,
)
"""The memory tables :data:`ROW_COUNT_TABLE` counts."""


def row_count_trigger(table: str, event: str) -> str:
    """Name of the trigger that keeps ``table``'s row in :data:`ROW_COUNT_TABLE` on ``event``
    (``"ai"``: insert, ``"ad"``: delete)."""
    return f"{ROW_COUNT_TABLE}_{table}_{event}"


def row_count_ddl() -> tuple[str, ...]:
    statements = [
        f"CREATE TABLE IF NOT EXISTS {ROW_COUNT_TABLE} "
        "(table_name TEXT PRIMARY KEY NOT NULL, row_count INTEGER NOT NULL)"
    ]
    for table in COUNTED_TABLES:
        statements += [
            f"INSERT OR REPLACE INTO {ROW_COUNT_TABLE} (table_name, row_count) "
            f"SELECT '{table}', count(*) FROM {table}",
            f"CREATE TRIGGER IF NOT EXISTS {row_count_trigger(table, 'ai')} AFTER INSERT ON {table} BEGIN "
            f"UPDATE {ROW_COUNT_TABLE} SET row_count = row_count + 1 WHERE table_name = '{table}'; END",
            f"CREATE TRIGGER IF NOT EXISTS {row_count_trigger(table, 'ad')} AFTER DELETE ON {table} BEGIN "
            f"UPDATE {ROW_COUNT_TABLE} SET row_count = row_count - 1 WHERE table_name = '{table}'; END",
        ]
    return tuple(statements)


OMRAY_007_STATEMENTS: Final[tuple[str, ...]] = (
    "CREATE TABLE IF NOT EXISTS omray_token_usage (\n\tusage_id TEXT NOT NULL, \n\trun_id TEXT NOT NULL, "
    "\n\tjob_kind TEXT NOT NULL, \n\tmodel TEXT NOT NULL, \n\trequests INTEGER NOT NULL, \n\tprompt_tokens "
    "INTEGER NOT NULL, \n\tcached_prompt_tokens INTEGER NOT NULL, \n\tcompletion_tokens INTEGER NOT NULL, "
    "\n\trecorded_at TEXT NOT NULL, \n\tPRIMARY KEY (usage_id), \n\tCHECK (job_kind IN ('observe', "
    "'reflect', 'drop')), \n\tCHECK (requests >= 0 AND prompt_tokens >= 0 AND completion_tokens >= 0), "
    "\n\tCHECK (cached_prompt_tokens >= 0 AND cached_prompt_tokens <= prompt_tokens)\n)",
    "CREATE INDEX IF NOT EXISTS idx_omray_token_usage_run ON omray_token_usage (run_id, job_kind, model)",
)
"""``omray_007_token_usage`` as released (frozen text: ``omray_017_budget`` adds a column and an index)."""
