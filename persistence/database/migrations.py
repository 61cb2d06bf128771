"""Schema migrations, recorded in ``om_schema_version`` exactly like the PHP extension (reference §4.2).

Plan applied on every write open:

1. ``om_schema_version`` is created if missing.
2. PHP versions. A fresh database gets the final PHP schema in one baseline transaction that
   records all five PHP versions. A database written by the PHP extension with 001..003 applied
   gets 004 and 005 created if they are missing. A database with only 001 or 002 applied needs
   the legacy data conversions of 003 (integer relevance, coverage parts, request fingerprints);
   omray does not implement them and raises :class:`MigrationError` instead: open such a file
   once with the PHP extension first.
3. omray's own migrations (``omray_*``), each additive.

Each unapplied step runs in its own ``BEGIN IMMEDIATE`` transaction and re-reads the applied
versions inside it, so concurrent openers serialize and the second one finds nothing to do.
Running the plan twice is a no-op.

Checksums are ``sha256`` of the step's statements joined by ``"\\n"``. omray compiles its DDL
from ``persistence.database.schema``, so the checksums recorded for PHP versions differ from the PHP
tool's; checksums are recorded for the record and never verified.

Length: over 600 lines because released steps are append-only history, kept here in order; their SQL
never changes (``tests/unit/persistence/test_migration_history.py``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, select, text

from persistence.database import schema
from persistence.database.omray_tables import (
    FIRST_ORDER_INDEXES,
    OBSERVATION_ORDER_INDEX,
    OBSERVATION_TRIGRAM_TABLE,
    OMRAY_001_STATEMENTS,
    OMRAY_007_STATEMENTS,
    REFLECTION_ORDER_INDEX,
    REFLECTION_TRIGRAM_TABLE,
    TRANSCRIPT_TRIGRAM_TABLE,
    ddl,
    observation_line_ddl_v1,
    projection_cache_ddl_v1,
    row_count_ddl,
    source_order_ddl,
    table_indexes,
    tail_index_ddl,
    transcript_ddl,
    trigram_ddl,
    trigram_supported,
)
from protocol.canonical import sha256_hex
from protocol.errors import MigrationError


@dataclass(frozen=True)
class Migration:
    """One recorded schema step: its version row and the DDL that creates it."""

    version: str
    description: str
    statements: tuple[str, ...]
    applies_when: Callable[[], bool] | None = None
    """Optional runtime check; when False the step is skipped and not recorded (retried on a later open)."""

    @property
    def checksum(self) -> str:
        """``sha256`` of the statements joined by a newline."""
        return sha256_hex("\n".join(self.statements))


_SCHEMA_VERSION_DDL = ddl([schema.om_schema_version])[0]

PHP_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "20260722_001_domain",
        "OM domain tables: observation, coverage, reflection, compaction request/result",
        ddl(
            [
                schema.om_observation,
                schema.om_coverage,
                schema.om_reflection,
                schema.om_compaction_request,
                schema.om_compaction_result,
            ]
        ),
    ),
    Migration(
        "20260725_002_reflection_multi_and_indexes",
        "Allow multiple reflections per request; add coverage/observation/request indexes",
        ddl(
            indexes=table_indexes(
                schema.om_observation, schema.om_coverage, schema.om_reflection, schema.om_compaction_request
            )
        ),
    ),
    Migration(
        "20260726_003_active_generation_and_relevance_text",
        "Relevance TEXT + timestamp; chunk/part coverage; request_fingerprint; active generation tables",
        ddl(
            [
                schema.om_memory_generation,
                schema.om_generation_reflection,
                schema.om_generation_retained_observation,
                schema.om_active_generation,
            ],
            table_indexes(schema.om_memory_generation),
        ),
    ),
    Migration(
        "20260729_004_current_activity",
        "Ephemeral om_current_activity for live TUI status notices",
        ddl([schema.om_current_activity]),
    ),
    Migration(
        "20260922_005_semantic_health",
        "Durable health and restart state for derived semantic storage",
        ddl([schema.om_semantic_state]),
    ),
)
"""The PHP extension's five versions, in order, with omray's DDL for each."""

_PHP_REQUIRED_BEFORE_ADDITIVE = tuple(m.version for m in PHP_MIGRATIONS[:3])
_PHP_ADDITIVE = PHP_MIGRATIONS[3:]

OMRAY_MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        "omray_001_job_queue",
        "omray durable job queue FIFO and runtime events",
        # Frozen text: later steps alter omray_job, so this must stay the version-1 shape.
        OMRAY_001_STATEMENTS,
    ),
    Migration(
        "omray_002_exact_search_trigram",
        "FTS5 trigram indexes over observation and reflection content for exact memory_search",
        (
            *trigram_ddl(OBSERVATION_TRIGRAM_TABLE, schema.om_observation.name, "observation_id"),
            *trigram_ddl(REFLECTION_TRIGRAM_TABLE, schema.om_reflection.name, "reflection_id"),
        ),
        applies_when=trigram_supported,
    ),
    Migration(
        "omray_003_exact_search_order_indexes",
        "Indexes in exact memory_search result order (newest first, then id) for early-stopping walks",
        (
            # Plain additive indexes on the PHP tables: the PHP extension neither needs nor minds them.
            f"CREATE INDEX IF NOT EXISTS {FIRST_ORDER_INDEXES[0]} ON {schema.om_observation.name} "
            "(timestamp DESC, observation_id ASC)",
            f"CREATE INDEX IF NOT EXISTS {FIRST_ORDER_INDEXES[1]} ON {schema.om_reflection.name} "
            "(created_at DESC, reflection_id ASC)",
        ),
    ),
    Migration(
        "omray_004_job_identity_per_database",
        "Queue job identity per database: a db_path column and a unique (db_path, job_id) while unfinished",
        (
            "ALTER TABLE omray_job ADD COLUMN db_path TEXT NOT NULL DEFAULT ''",
            "UPDATE omray_job SET db_path = coalesce(json_extract(payload_json, '$.db_path'), '')",
            "DROP INDEX IF EXISTS idx_omray_job_unfinished_job_id",
            "CREATE UNIQUE INDEX IF NOT EXISTS idx_omray_job_unfinished_key ON omray_job (db_path, job_id) "
            "WHERE state IN ('pending', 'running')",
        ),
    ),
    Migration(
        "omray_005_observe_start",
        "Where each observe job started planning, so a retried job replays the same plan",
        ddl([schema.omray_observe_start]),
    ),
    Migration(
        "omray_006_read_path",
        "Projection lines rendered at insert time, and content-tail indexes for 1-2 character exact search",
        (*observation_line_ddl_v1(), *tail_index_ddl()),
    ),
    Migration(
        "omray_007_token_usage",
        "Token usage of every model tool loop per session, stage and model, for the cost report",
        OMRAY_007_STATEMENTS,
    ),
    Migration(
        "omray_008_projection_cache",
        "Each session's projection text rendered at write time, versioned by triggers on what it shows",
        projection_cache_ddl_v1(),
    ),
    Migration(
        "omray_009_covering_walk_indexes",
        "Result-order indexes that also hold what exact search reads, so its ordered walks never "
        "visit the table",
        (
            # A walk through a keys-only index looks every row up in the table (about 0.5 us a
            # row, most of the walk); these carry the searched and returned columns as well. They
            # keep the result order of the first pair, which they replace (same number of index
            # writes per row).
            f"CREATE INDEX IF NOT EXISTS {OBSERVATION_ORDER_INDEX} ON {schema.om_observation.name} "
            "(timestamp DESC, observation_id ASC, run_id, relevance, content)",
            f"CREATE INDEX IF NOT EXISTS {REFLECTION_ORDER_INDEX} ON {schema.om_reflection.name} "
            "(created_at DESC, reflection_id ASC, run_id, content)",
            *(f"DROP INDEX IF EXISTS {name}" for name in FIRST_ORDER_INDEXES),
        ),
    ),
    Migration(
        "omray_010_transcript",
        "The searchable text of every covered event, and which observations cite each event",
        transcript_ddl(),
    ),
    Migration(
        "omray_011_transcript_trigram",
        "FTS5 trigram index over the transcript for exact memory_search",
        trigram_ddl(TRANSCRIPT_TRIGRAM_TABLE, schema.omray_transcript.name, "event_id"),
        applies_when=trigram_supported,
    ),
    Migration(
        "omray_012_projection_source_order",
        "The projection's lines and pieces keyed by source order (first source seq, then recorded "
        "order) instead of (minute, id)",
        source_order_ddl(),
    ),
    Migration(
        "omray_013_runtime_events_database",
        "Runtime events per database: a db_path column (from the failed job's row for older events) "
        "and an index by database, session and sequence",
        (
            "ALTER TABLE omray_runtime_event ADD COLUMN db_path TEXT NOT NULL DEFAULT ''",
            # An older event names its job: the database is that failed job's. Unknown stays ''
            # (listed for no database).
            "UPDATE omray_runtime_event SET db_path = coalesce((SELECT j.db_path FROM omray_job j "
            "WHERE j.job_id = json_extract(omray_runtime_event.payload_json, '$.job_id') "
            "AND j.run_id = omray_runtime_event.run_id AND j.state = 'failed' "
            "ORDER BY j.job_seq DESC LIMIT 1), '')",
            "CREATE INDEX IF NOT EXISTS idx_omray_runtime_event_db_run_seq "
            "ON omray_runtime_event (db_path, run_id, event_seq)",
        ),
    ),
    Migration(
        "omray_014_forget",
        "What was forgotten (ids only), so a forgotten memory, event or session is never written again",
        ddl([schema.omray_forgotten, schema.omray_forget_request], table_indexes(schema.omray_forgotten)),
    ),
    Migration(
        "omray_015_job_redrive",
        "A failed job can be re-driven once its cause is gone: the job it was queued again as, and how "
        "many times its work was re-driven",
        (
            "ALTER TABLE omray_job ADD COLUMN redriven_to INTEGER",
            "ALTER TABLE omray_job ADD COLUMN redrives INTEGER NOT NULL DEFAULT 0",
        ),
    ),
    Migration(
        "omray_016_forget_handler",
        "Forget jobs have a handler id of their own: rows queued under the reflect handler id move to it",
        (
            "UPDATE omray_job SET handler_id = 'observational_memory.forget' "
            "WHERE handler_id = 'observational_memory.reflect_generation' "
            "AND json_extract(payload_json, '$.kind') = 'forget'",
        ),
    ),
    Migration(
        "omray_017_budget",
        "Daily budgets: the US dollars a provider reported per token usage row, usage by time, and the "
        "runs of a queued job that found the budget used up (held, not counted as attempts)",
        (
            "ALTER TABLE omray_token_usage ADD COLUMN cost_usd FLOAT",
            "CREATE INDEX IF NOT EXISTS idx_omray_token_usage_recorded ON omray_token_usage (recorded_at)",
            "ALTER TABLE omray_job ADD COLUMN held_attempts INTEGER NOT NULL DEFAULT 0",
        ),
    ),
    Migration(
        "omray_018_database_placement",
        "The node each memory database lives on, recorded by the queue when the database is first used",
        ddl([schema.omray_database_placement]),
    ),
    Migration(
        "omray_019_row_counts",
        "Row counts of the memory tables kept by triggers, so a search does not count every row",
        row_count_ddl(),
    ),
)
"""omray's own additive migrations, in order."""


def _utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _applied_versions(conn: Connection) -> set[str]:
    return set(conn.execute(select(schema.om_schema_version.c.version)).scalars())


def _table_exists(conn: Connection, name: str) -> bool:
    found = conn.execute(
        text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name"), {"name": name}
    ).first()
    return found is not None


def _apply(conn: Connection, migration: Migration, applied_at: str) -> None:
    for statement in migration.statements:
        conn.exec_driver_sql(statement)
    conn.execute(
        schema.om_schema_version.insert().values(
            version=migration.version,
            description=migration.description,
            checksum=migration.checksum,
            applied_at=applied_at,
        )
    )


def _php_step(conn: Connection) -> None:
    """Baseline a fresh database, or check that a PHP database is new enough."""
    applied = _applied_versions(conn)
    php_applied = [m.version for m in PHP_MIGRATIONS if m.version in applied]
    if not php_applied:
        if _table_exists(conn, schema.om_observation.name):
            raise MigrationError(
                f"table {schema.om_observation.name!r} exists but no schema version is recorded; "
                "refusing to guess its shape"
            )
        applied_at = _utc_now()
        for migration in PHP_MIGRATIONS:
            _apply(conn, migration, applied_at)
        return
    missing = [v for v in _PHP_REQUIRED_BEFORE_ADDITIVE if v not in applied]
    if missing:
        raise MigrationError(
            f"schema version {php_applied[-1]!r} needs the legacy data conversion of {missing[0]!r}, "
            "which omray does not support; open the database once with the PHP extension first"
        )


def _additive_step(conn: Connection, migration: Migration) -> None:
    if migration.applies_when is not None and not migration.applies_when():
        return
    if migration.version not in _applied_versions(conn):
        _apply(conn, migration, _utc_now())


def migrate(engine: Engine) -> None:
    """Bring the database to the current schema (idempotent, safe for concurrent openers).

    ``engine`` must begin transactions with ``BEGIN IMMEDIATE`` (see ``persistence.database.connection``).
    """
    with engine.connect() as conn:
        with conn.begin():
            conn.exec_driver_sql(_SCHEMA_VERSION_DDL)
        with conn.begin():
            _php_step(conn)
        for migration in (*_PHP_ADDITIVE, *OMRAY_MIGRATIONS):
            with conn.begin():
                _additive_step(conn, migration)


def all_migrations() -> tuple[Migration, ...]:
    """Every migration omray knows, PHP versions first."""
    return (*PHP_MIGRATIONS, *OMRAY_MIGRATIONS)


_CREATE_TABLE = re.compile(r"^CREATE (?:VIRTUAL )?TABLE IF NOT EXISTS (\w+)", re.IGNORECASE)
_DROP_TABLE = re.compile(r"^DROP TABLE (?:IF EXISTS )?(\w+)", re.IGNORECASE)


def _apply_table_changes(tables: set[str], migration: Migration) -> None:
    """Apply one migration's ``CREATE TABLE`` / ``DROP TABLE`` statements to ``tables``, in order."""
    for statement in migration.statements:
        if created := _CREATE_TABLE.match(statement):
            tables.add(created.group(1))
        elif dropped := _DROP_TABLE.match(statement):
            tables.discard(dropped.group(1))


def tables_created_by(versions: Iterable[str]) -> frozenset[str]:
    """The tables that must exist once the given versions are applied (created, not dropped later)."""
    applied = set(versions)
    tables: set[str] = set()
    for migration in all_migrations():
        if migration.version in applied:
            _apply_table_changes(tables, migration)
    return frozenset(tables)


@functools.lru_cache(maxsize=1)
def known_tables() -> frozenset[str]:
    """Every table the full migration plan leaves, plus ``om_schema_version``."""
    return tables_created_by(m.version for m in all_migrations()) | {schema.om_schema_version.name}
