"""Opening the database (reference §4.1) and migrations (§4.2), including PHP-written files."""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from pathlib import Path

import pytest

from persistence.database.connection import (
    DatabaseMissingError,
    _configure_write_connection,
    open_read_engine,
    open_write_engine,
)
from persistence.database.migrations import OMRAY_MIGRATIONS, PHP_MIGRATIONS
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.errors import MigrationError, StorageError
from tests.unit.persistence import php_fixture
from tests.unit.persistence.php_fixture import build_legacy_database, build_php_database, schema_objects


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_open_creates_private_directories_and_file(tmp_path: Path) -> None:
    db_path = tmp_path / "a" / "b" / "om.sqlite"
    old_umask = os.umask(0o022)
    try:
        Store(db_path).close()
    finally:
        os.umask(old_umask)
    assert _mode(tmp_path / "a") == 0o700
    assert _mode(tmp_path / "a" / "b") == 0o700
    assert _mode(db_path) == 0o600
    for suffix in ("-wal", "-shm"):
        companion = Path(f"{db_path}{suffix}")
        if companion.exists():
            assert _mode(companion) == 0o600


def test_existing_file_with_loose_mode_is_tightened(tmp_path: Path) -> None:
    db_path = tmp_path / "om.sqlite"
    sqlite3.connect(db_path).close()
    db_path.chmod(0o644)
    Store(db_path).close()
    assert _mode(db_path) == 0o600


def test_unwritable_parent_raises_storage_error_naming_the_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError, match="Unable to create OM data directory"):
        open_write_engine(blocker / "sub" / "om.sqlite")


def test_write_connection_uses_wal_and_pragmas(db_path: Path) -> None:
    Store(db_path).close()
    engine = open_write_engine(db_path)
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
            assert conn.exec_driver_sql("SELECT 'ABC' LIKE 'abc'").scalar() == 1
    finally:
        engine.dispose()


def test_journal_mode_other_than_wal_is_refused() -> None:
    memory = sqlite3.connect(":memory:")  # in-memory databases cannot use WAL
    with pytest.raises(StorageError, match=r'Failed to set OM SQLite journal_mode to WAL \(got "memory"\)\.'):
        _configure_write_connection(memory, Path("/nonexistent/om.sqlite"))


def test_read_engine_on_missing_file_raises_typed_error_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "om.sqlite"
    with pytest.raises(DatabaseMissingError):
        open_read_engine(missing)
    assert MemoryReader(missing).schema_versions() == []
    assert MemoryReader(missing).active_candidate_set("r").observations == ()
    assert not missing.parent.exists()


def test_read_engine_never_writes(db_path: Path) -> None:
    Store(db_path).close()
    engine = open_read_engine(db_path)
    try:
        with engine.connect() as conn, pytest.raises(Exception, match=r"readonly|read-only|query_only"):
            conn.exec_driver_sql("INSERT INTO om_semantic_state VALUES (1, 's', 'h', 0, 0, 0)")
    finally:
        engine.dispose()


def test_fresh_database_records_five_php_versions_and_omray_versions(
    store: Store, reader: MemoryReader
) -> None:
    rows = reader.schema_versions()
    expected = [(m.version, m.description) for m in (*PHP_MIGRATIONS, *OMRAY_MIGRATIONS)]
    assert sorted((r.version, r.description) for r in rows) == sorted(expected)
    assert [v for v, _ in php_fixture.PHP_VERSIONS] == [m.version for m in PHP_MIGRATIONS]
    assert [d for _, d in php_fixture.PHP_VERSIONS] == [m.description for m in PHP_MIGRATIONS]
    by_version = {r.version: r for r in rows}
    for migration in (*PHP_MIGRATIONS, *OMRAY_MIGRATIONS):
        assert by_version[migration.version].checksum == migration.checksum
        assert len(migration.checksum) == 64
        assert by_version[migration.version].applied_at.endswith("+00:00")


def _columns(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """``PRAGMA table_xinfo`` (order, name, type, NOT NULL, default, key position) of every ``om_*`` table.

    The NOT NULL of an ``INTEGER PRIMARY KEY`` (the rowid itself: a NULL inserted there is given the
    next rowid either way) is left out: omray's ``om_semantic_state.id`` declares it, the PHP DDL not.
    """
    conn = sqlite3.connect(path)
    try:
        names = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns: dict[str, list[tuple[object, ...]]] = {}
        for name in (n for n in names if n.startswith("om_")):
            rows = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
            keys = [row for row in rows if row[5]]
            rowid = keys[0][1] if len(keys) == 1 and keys[0][2] == "INTEGER" else None
            columns[name] = [(*row[:3], None if row[1] == rowid else row[3], *row[4:]) for row in rows]
        return columns
    finally:
        conn.close()


def test_fresh_database_has_the_php_extensions_columns(tmp_path: Path, db_path: Path) -> None:
    """The PHP-compatible tables of ``persistence.database.schema`` have the columns, in order, with
    the types, nullability, defaults and keys of the hand-written PHP DDL of the fixture."""
    Store(db_path).close()
    php_path = tmp_path / "php.sqlite"
    build_php_database(php_path, with_data=False)
    omray, php = _columns(db_path), _columns(php_path)
    assert sorted(omray) == sorted(php)
    for name in php:
        assert omray[name] == php[name], name


def test_migrations_are_idempotent(db_path: Path, reader: MemoryReader) -> None:
    Store(db_path).close()
    before_objects = schema_objects(db_path)
    before_versions = reader.schema_versions()
    Store(db_path).close()
    Store(db_path).close()
    assert schema_objects(db_path) == before_objects
    assert reader.schema_versions() == before_versions


def test_concurrent_openers_do_not_break(db_path: Path, reader: MemoryReader) -> None:
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_store() -> None:
        try:
            barrier.wait()
            Store(db_path).close()
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(reader.schema_versions()) == len(PHP_MIGRATIONS) + len(OMRAY_MIGRATIONS)


def test_php_database_is_read_then_migrated_by_adding_only_omray_tables(db_path: Path) -> None:
    db_path.parent.mkdir()
    build_php_database(db_path)
    reader = MemoryReader(db_path)
    active = reader.active_candidate_set(php_fixture.RUN)
    # Source order: the retained observation cites event 2, the later one event 5 (its minute is
    # earlier, which does not matter).
    assert [o.observation_id for o in active.observations] == [
        php_fixture.OBS_RETAINED,
        php_fixture.OBS_LATER,
    ]
    assert active.max_source_end_seq == 5
    before = schema_objects(db_path)
    Store(db_path).close()
    added = schema_objects(db_path) - before
    trigram = {
        (kind, f"omray_{memory}_trigram{suffix}")
        for memory in ("observation", "reflection", "transcript")
        for kind, suffix in [
            ("table", ""),
            *[("table", s) for s in ("_data", "_idx", "_content", "_docsize", "_config")],
            *[("trigger", s) for s in ("_ai", "_ad", "_au")],
        ]
    }
    omray_objects = {
        ("table", "omray_job"),
        ("table", "omray_runtime_event"),
        ("table", "omray_observe_start"),
        ("index", "sqlite_autoindex_omray_observe_start_1"),
        ("table", "omray_token_usage"),
        ("index", "sqlite_autoindex_omray_token_usage_1"),
        ("index", "idx_omray_token_usage_run"),
        ("index", "idx_omray_token_usage_recorded"),
        ("table", "sqlite_sequence"),
        ("index", "idx_omray_job_unfinished_key"),
        ("index", "idx_omray_job_state_seq"),
        ("index", "idx_omray_runtime_event_run_seq"),
        ("index", "idx_omray_runtime_event_db_run_seq"),
        ("index", "idx_omray_observation_walk"),
        ("index", "idx_omray_reflection_walk"),
        ("table", "omray_projection_line"),
        *[("trigger", f"omray_projection_line{suffix}") for suffix in ("_ai", "_ad", "_au")],
        *[
            ("index", f"idx_omray_{memory}_tail{n}")
            for memory in ("observation", "reflection")
            for n in (1, 2)
        ],
        ("table", "omray_session_version"),
        ("table", "omray_projection_piece_dirty"),
        ("table", "omray_projection_piece"),
        ("index", "sqlite_autoindex_omray_projection_piece_1"),
        ("table", "omray_projection_piece_built"),
        ("table", "omray_transcript"),
        ("index", "sqlite_autoindex_omray_transcript_1"),
        ("index", "sqlite_autoindex_omray_transcript_2"),
        ("index", "idx_omray_transcript_walk"),
        ("index", "idx_omray_transcript_run"),
        *[("index", f"idx_omray_transcript_tail{n}") for n in (1, 2)],
        ("table", "omray_transcript_through"),
        ("index", "sqlite_autoindex_omray_transcript_through_1"),
        ("table", "omray_observation_ref"),
        *[("trigger", f"omray_observation_ref{suffix}") for suffix in ("_ai", "_ad", "_au")],
        *[
            ("trigger", f"omray_projection_piece_{table}_{event}")
            for table, events in [
                ("omray_projection_line", ("insert", "delete")),
                ("om_active_generation", ("insert", "delete", "update")),
                ("om_memory_generation", ("update",)),
                ("om_generation_retained_observation", ("insert", "delete")),
            ]
            for event in events
        ],
        ("table", "omray_forgotten"),
        ("index", "sqlite_autoindex_omray_forgotten_1"),
        ("index", "idx_omray_forgotten_job"),
        ("index", "idx_omray_forgotten_run"),
        ("table", "omray_forget_request"),
        ("index", "sqlite_autoindex_omray_forget_request_1"),
        ("table", "omray_database_placement"),
        ("index", "sqlite_autoindex_omray_database_placement_1"),
        ("table", "omray_row_count"),
        ("index", "sqlite_autoindex_omray_row_count_1"),
        *[
            ("trigger", f"omray_row_count_{table}_{event}")
            for table in ("om_observation", "om_reflection", "omray_transcript")
            for event in ("ai", "ad")
        ],
    }
    assert added == omray_objects | trigram
    assert all(name.startswith(("omray_", "idx_omray_", "sqlite_")) for _, name in added)
    versions = {r.version: r for r in reader.schema_versions()}
    assert versions["20260722_001_domain"].checksum == "c" * 64  # PHP rows untouched
    omray_versions = {
        "omray_001_job_queue",
        "omray_002_exact_search_trigram",
        "omray_003_exact_search_order_indexes",
        "omray_004_job_identity_per_database",
        "omray_005_observe_start",
        "omray_006_read_path",
        "omray_007_token_usage",
        "omray_008_projection_cache",
        "omray_009_covering_walk_indexes",
        "omray_010_transcript",
        "omray_011_transcript_trigram",
        "omray_012_projection_source_order",
        "omray_013_runtime_events_database",
        "omray_014_forget",
        "omray_015_job_redrive",
        "omray_016_forget_handler",
        "omray_017_budget",
        "omray_018_database_placement",
        "omray_019_row_counts",
    }
    assert omray_versions <= set(versions) and len(versions) == 24


def test_php_database_reads_every_record_kind(db_path: Path) -> None:
    db_path.parent.mkdir()
    build_php_database(db_path)
    Store(db_path).close()
    reader = MemoryReader(db_path)
    run = php_fixture.RUN
    generation = reader.active_generation(run)
    assert generation is not None and generation.generation_id == php_fixture.GEN
    assert generation.status == "succeeded" and generation.required_end_seq == 3
    [reflection] = reader.active_reflections(run)
    assert reflection.reflection_id == php_fixture.REFLECTION
    assert reflection.supporting_observation_ids == (php_fixture.OBS_RETAINED,)
    counts = reader.memory_counts(run)
    assert (counts.recorded_observations, counts.recorded_reflections) == (3, 1)
    assert counts.visible_retained_observations == 1
    observations = reader.all_observations(run)
    assert len(observations) == 3
    legacy = next(o for o in observations if o.observation_id == php_fixture.OBS_DROPPED)
    assert [(r.run_id, r.seq) for r in legacy.source_refs] == [(run, 3)]  # legacy "runId" key
    assert reader.contiguous_covered_end(run, "rend-v1", "obs-v1") == 5
    assert reader.contiguous_covered_end(run, "rend-v2", "obs-v1") is None
    part = reader.stored_coverage_part("cov-1")
    assert part is not None and part.observation_count == 3


def test_php_database_at_003_gets_004_and_005(db_path: Path) -> None:
    db_path.parent.mkdir()
    build_php_database(db_path, versions=3, with_data=False)
    Store(db_path).close()
    objects = schema_objects(db_path)
    assert ("table", "om_current_activity") in objects
    assert ("table", "om_semantic_state") in objects
    versions = {r.version for r in MemoryReader(db_path).schema_versions()}
    assert {"20260729_004_current_activity", "20260922_005_semantic_health"} <= versions


@pytest.mark.parametrize(
    ("applied", "named"),
    [
        (("20260722_001_domain",), "'20260722_001_domain'"),
        (("20260722_001_domain", "20260725_002_reflection_multi_and_indexes"), "'20260725_002_"),
    ],
)
def test_pre_003_database_raises_migration_error(db_path: Path, applied: tuple[str, ...], named: str) -> None:
    db_path.parent.mkdir()
    build_legacy_database(db_path, applied)
    before = schema_objects(db_path)
    with pytest.raises(MigrationError, match=named):
        Store(db_path)
    assert schema_objects(db_path) == before


def test_unversioned_om_tables_are_refused(db_path: Path) -> None:
    db_path.parent.mkdir()
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE om_observation (observation_id TEXT PRIMARY KEY)")
    conn.commit()
    conn.close()
    with pytest.raises(MigrationError, match="'om_observation'"):
        Store(db_path)


def test_reader_answers_empty_for_an_empty_or_deleted_file(db_path: Path) -> None:
    db_path.parent.mkdir()
    db_path.touch()  # what a writer leaves for an instant before its first migration
    reader = MemoryReader(db_path)
    assert reader.memory_counts("r").recorded_observations == 0
    assert reader.activity("r") is None
    db_path.unlink()
    assert reader.all_observations("r") == []
    assert not db_path.exists()
