"""Opening the store on damaged paths (issue 16: D9) and reading a damaged store (D8)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from persistence.database import migrations
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.errors import StorageError


def _valid_database(path: Path) -> bytes:
    Store(path).close()
    return path.read_bytes()


def test_a_garbage_file_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "om.sqlite"
    path.write_bytes(b"this is not a database\n" * 100)
    with pytest.raises(StorageError, match="not a database") as raised:
        Store(path)
    assert str(path) in str(raised.value)


def test_a_truncated_database_is_a_storage_error(tmp_path: Path) -> None:
    source = tmp_path / "whole" / "om.sqlite"
    data = _valid_database(source)
    path = tmp_path / "om.sqlite"
    path.write_bytes(data[:100])  # the header survives, the pages do not
    with pytest.raises(StorageError) as raised:
        Store(path)
    assert str(path) in str(raised.value)
    assert "sqlalchemy" not in type(raised.value).__module__


def test_a_directory_in_place_of_the_file_is_a_storage_error(tmp_path: Path) -> None:
    path = tmp_path / "om.sqlite"
    path.mkdir()
    with pytest.raises(StorageError, match="not a regular file"):
        Store(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes whatever the directory mode")
def test_an_unwritable_directory_is_a_storage_error(tmp_path: Path) -> None:
    directory = tmp_path / "ro"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        with pytest.raises(StorageError):
            Store(directory / "om.sqlite")
    finally:
        directory.chmod(0o700)


def test_an_existing_database_in_an_unwritable_place_is_a_storage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root cannot be refused by file modes, so refuse the connection the way SQLite does.
    path = tmp_path / "om.sqlite"
    _valid_database(path)

    def readonly_connect(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    monkeypatch.setattr(sqlite3, "connect", readonly_connect)
    with pytest.raises(StorageError, match="unable to open database file"):
        Store(path)


def test_reader_on_a_directory_is_a_storage_error_not_empty(tmp_path: Path) -> None:
    path = tmp_path / "om.sqlite"
    path.mkdir()
    with pytest.raises(StorageError, match="not a regular file"):
        MemoryReader(path).memory_counts("s1")


def test_reader_on_a_dropped_table_is_a_storage_error(store: Store) -> None:
    conn = sqlite3.connect(store.db_path)
    conn.execute("DROP TABLE om_coverage")
    conn.commit()
    conn.close()
    reader = MemoryReader(store.db_path)
    with pytest.raises(StorageError, match="om_coverage"):
        reader.contiguous_covered_end("s1", "1", "1")
    with pytest.raises(StorageError, match="om_coverage"):
        reader.memory_counts("s1")  # any read: the store as a whole is damaged


def test_reader_on_a_missing_file_is_still_empty(tmp_path: Path) -> None:
    reader = MemoryReader(tmp_path / "never" / "om.sqlite")
    assert reader.memory_counts("s1").recorded_observations == 0
    assert not (tmp_path / "never").exists()


def test_tables_expected_follow_the_applied_migrations(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = (
        migrations.Migration("a", "create", ("CREATE TABLE IF NOT EXISTS t1 (x)",)),
        migrations.Migration("b", "swap", ("DROP TABLE IF EXISTS t1", "CREATE TABLE IF NOT EXISTS t2 (x)")),
    )
    monkeypatch.setattr(migrations, "all_migrations", lambda: plan)
    assert migrations.tables_created_by(["a"]) == {"t1"}
    assert migrations.tables_created_by(["a", "b"]) == {"t2"}  # a later drop is not damage
    assert migrations.tables_created_by([]) == set()
