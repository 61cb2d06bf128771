"""Opening the memory database (reference §4.1).

* :func:`open_write_engine` is for the one writer of a file (its StoreActor): it creates the data
  directory (0700) and the file (0600), sets the PRAGMAs on every connect, verifies WAL and runs
  the migrations. Every transaction it begins is ``BEGIN IMMEDIATE``, so writers serialize on
  the SQLite lock up front instead of failing when a read upgrades to a write.
* :func:`open_read_engine` is for readers in any process: a read-only (``mode=ro``) connection
  that never migrates and never writes, and reads concurrently with the writer thanks to WAL.
  Each transaction is a plain deferred ``BEGIN``, so one call sees one consistent snapshot.

The read engine uses a ``NullPool``: every ``connect()`` opens a fresh SQLite connection. The write
engine keeps its connections in a small pool (one thread at a time per connection, never shared
across processes): closing the last connection of a WAL file checkpoints and deletes the WAL, which
cost a checkpoint per transaction. Engines stay inside ``persistence``;
callers outside only use ``Store`` and ``MemoryReader``. ``hide_parameters`` keeps bound values
(memory text, queries) out of error messages.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool, QueuePool

from persistence.database.migrations import migrate
from persistence.files.node_disk import check_on_this_node
from persistence.files.private_dirs import make_private_dirs
from protocol.errors import StorageError

BUSY_TIMEOUT_MS = 5000
"""``PRAGMA busy_timeout`` on every connection."""

FILE_MODE = 0o600
"""Mode of the database file and its ``-wal``/``-shm`` companions."""


class DatabaseMissingError(StorageError):
    """The memory database file does not exist (readers treat this as "no memory yet")."""


def _ensure_directory(directory: Path) -> None:
    try:
        make_private_dirs(directory)
    except OSError as exc:
        raise StorageError(f"Unable to create OM data directory: {str(directory)!r}") from exc
    if not directory.is_dir():
        raise StorageError(f"Unable to create OM data directory: {str(directory)!r}")


def _restrict_file_modes(db_path: Path) -> None:
    for path in (db_path, Path(f"{db_path}-wal"), Path(f"{db_path}-shm")):
        try:
            mode = stat.S_IMODE(path.stat().st_mode)
        except FileNotFoundError:
            continue
        if mode != FILE_MODE:
            os.chmod(path, FILE_MODE)


def _create_file(db_path: Path) -> None:
    try:
        fd = os.open(db_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
    except FileExistsError:
        return
    except OSError as exc:
        raise StorageError(f"Unable to create OM database file: {str(db_path)!r}") from exc
    os.close(fd)


def _configure_write_connection(
    dbapi_connection: sqlite3.Connection, db_path: Path, synchronous: Synchronous = "FULL"
) -> None:
    # The driver must not open transactions on its own: the "begin" hook does (BEGIN IMMEDIATE),
    # which also makes savepoints and transactional DDL behave.
    dbapi_connection.isolation_level = None
    dbapi_connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    dbapi_connection.execute("PRAGMA foreign_keys = ON")
    dbapi_connection.execute(f"PRAGMA synchronous = {synchronous}")
    mode = _switch_to_wal(dbapi_connection)
    if mode != "wal":
        raise StorageError(f'Failed to set OM SQLite journal_mode to WAL (got "{mode}").')
    _restrict_file_modes(db_path)


def _switch_to_wal(dbapi_connection: sqlite3.Connection) -> str:
    # Switching a fresh file to WAL needs an exclusive lock, and SQLite does not always call the
    # busy handler for it: several processes opening a new database at once can get "database is
    # locked" straight away. Retry for up to the busy timeout before giving up.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            row = dbapi_connection.execute("PRAGMA journal_mode=WAL").fetchone()
            return str(row[0]).lower() if row else ""
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)


Synchronous = Literal["FULL", "NORMAL"]
"""``PRAGMA synchronous`` of a writer: ``FULL`` (the default) syncs the WAL on every commit, so a
commit survives a power loss; ``NORMAL`` survives any process or actor crash (the WAL is in the
OS page cache) and may lose the last commits only on a power loss or OS crash, never corrupting
the file. omray uses ``NORMAL`` for its own job queue only (see ``docs/operations.md``)."""


def _open_failure(path: Path, exc: BaseException) -> StorageError:
    """A clear error for a file that cannot be opened for writing; SQLite's own text says why."""
    original = getattr(exc, "orig", None) or exc
    if isinstance(original, sqlite3.Error | OSError):
        reason = str(original) or type(original).__name__
    else:
        reason = type(original).__name__
    return StorageError(f"cannot open memory database {str(path)!r} for writing: {reason}")


def open_write_engine(db_path: str | os.PathLike[str], *, synchronous: Synchronous = "FULL") -> Engine:
    """Engine of the single writer of ``db_path``: creates dir/file as needed and migrates.

    Every failure is a :class:`StorageError` naming the file and why (a directory in its place,
    a file that is not SQLite, no permission), never a raw driver error.
    """
    path = Path(db_path).absolute()
    check_on_this_node(path)
    _ensure_directory(path.parent)
    _create_file(path)
    if not path.is_file():
        raise StorageError(f"cannot open memory database {str(path)!r} for writing: it is not a regular file")
    try:
        _restrict_file_modes(path)
    except OSError as exc:
        raise _open_failure(path, exc) from exc

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)

    # Connections are kept between transactions: closing the last connection of a WAL database
    # checkpoints and deletes the WAL, which made every transaction cost a checkpoint.
    engine = create_engine(
        "sqlite://",
        creator=connect,
        poolclass=QueuePool,
        pool_size=1,
        max_overflow=8,
        pool_reset_on_return="rollback",
        hide_parameters=True,
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        _configure_write_connection(dbapi_connection, path, synchronous)

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    try:
        migrate(engine)
    except StorageError:
        engine.dispose()
        raise
    except (SQLAlchemyError, sqlite3.Error, OSError) as exc:
        engine.dispose()
        raise _open_failure(path, exc) from exc
    return engine


def _check_readable_file(path: Path) -> None:
    """Missing -> :class:`DatabaseMissingError` ("no memory yet"); present but not a file -> damage."""
    if path.is_file():
        return
    if not path.exists():
        raise DatabaseMissingError(f"memory database {str(path)!r} does not exist")
    raise StorageError(f"memory database {str(path)!r} is not a regular file")


def open_read_engine(db_path: str | os.PathLike[str]) -> Engine:
    """Read-only engine on ``db_path``.

    Raises :class:`DatabaseMissingError` if nothing is at that path (never created: no memory yet)
    and :class:`StorageError` if something that is not a file is (a damaged store).
    """
    path = Path(db_path).absolute()
    check_on_this_node(path)
    _check_readable_file(path)
    uri = f"{path.as_uri()}?mode=ro"

    def connect() -> sqlite3.Connection:
        try:
            return sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_MS / 1000, check_same_thread=False)
        except sqlite3.OperationalError as exc:
            _check_readable_file(path)
            raise StorageError(
                f"memory database {str(path)!r} cannot be opened ({type(exc).__name__})"
            ) from exc

    engine = create_engine("sqlite://", creator=connect, poolclass=NullPool, hide_parameters=True)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        dbapi_connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        dbapi_connection.execute("PRAGMA query_only = ON")

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine
