"""What every writer of one SQLite file shares: the write engine, :meth:`SqliteWriter.atomic` (the
only way into a transaction) and lone-statement reads that never take the write lock.

Two writers build on it, one per file: :class:`persistence.writers.store.Store` for a memory database and
:class:`persistence.writers.queue_store.QueueStore` for the job queue's own ``<prefix>.queue.sqlite``.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, Self

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from persistence.database.connection import Synchronous, open_write_engine
from protocol.errors import InvalidPayloadError, OmrayError, StorageError, StoreFileReplacedError

logger = logging.getLogger("omray.store")

_FAILURE_REASON = re.compile(r"^[a-z0-9_.:-]{1,64}\Z")


class NotFoundError(OmrayError):
    """The row a write needs (a generation, an unfinished job) does not exist."""


FileIdentity = tuple[int, int]
"""``(st_dev, st_ino)`` of a file: which file a path names."""


def file_identity(path: str) -> FileIdentity | None:
    """Which file ``path`` names now (``None``: nothing there, or it cannot be looked at)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def check_failure_reason(reason: str | None) -> None:
    """A failure reason is a short lowercase category code (never free text), or ``None``."""
    if reason is not None and not _FAILURE_REASON.match(reason):
        raise InvalidPayloadError("failure_reason must be a short lowercase category code")


class SqliteWriter:
    """The single write engine of one file. One per file per process; safe to call from several
    threads (each thread gets its own connection); one transaction per outermost :meth:`atomic`
    (``BEGIN IMMEDIATE``; savepoints when nested)."""

    watches_file: ClassVar[bool] = False
    """True: each transaction first checks that the path still names the file the engine opened
    (one ``stat``), opens the file now there when not (creating it when missing), and fails with
    :class:`StoreFileReplacedError` when the file changed while the transaction ran."""

    def __init__(self, db_path: str | os.PathLike[str], *, synchronous: Synchronous = "FULL") -> None:
        self._db_path = os.fspath(db_path)
        self._synchronous: Synchronous = synchronous
        self._engine = open_write_engine(self._db_path, synchronous=synchronous)
        self._opened = file_identity(self._db_path)
        # Reopening waits for every use of the old engine to end and holds new ones back: see
        # ensure_file for why no old connection may outlive the switch.
        self._gate = threading.Condition()
        self._in_use = 0
        self._reopening = False
        self._local = threading.local()
        self.reopened = 0
        """Times the file was found removed or replaced and opened again (created when missing)."""

    @property
    def db_path(self) -> str:
        """Path of the database file."""
        return self._db_path

    def close(self) -> None:
        """Release the engine (connections are per transaction, so nothing stays open)."""
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # --- transactions ---------------------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """One transaction (outermost) or savepoint (nested); rolls back when the block raises."""
        current: Connection | None = getattr(self._local, "conn", None)
        if current is not None:
            with current.begin_nested():
                yield
            return
        if self.watches_file:
            self.ensure_file()
        opened = self._opened
        try:
            with self._engine_in_use() as (engine, opened), engine.connect() as conn:
                self._local.conn = conn
                try:
                    with conn.begin():
                        yield
                        self._before_commit(conn)
                finally:
                    self._local.conn = None
        except SQLAlchemyError as exc:
            if self._file_changed(opened):  # e.g. a new connection to a path that is gone
                raise self._replaced() from exc
            raise StorageError(f"write to {self._db_path!r} failed ({type(exc).__name__})") from exc
        if self._file_changed(opened):
            # Committed to a file no longer at the path (removed or replaced meanwhile): nobody will
            # read it, so the write did not happen; the caller's next attempt opens the new file.
            raise self._replaced()

    def _file_changed(self, opened: FileIdentity | None) -> bool:
        return self.watches_file and file_identity(self._db_path) != opened

    def _replaced(self) -> StoreFileReplacedError:
        return StoreFileReplacedError(
            f"memory database {self._db_path!r} was removed or replaced during a write"
        )

    def ensure_file(self) -> bool:
        """Make sure the engine writes to the file the path names now; True when it had to reopen.

        A database removed under the runtime (``rm -r .hatfield``) is created again, empty and
        migrated; one replaced (a backup moved into place) is opened. Either way later writes land
        where readers look, instead of in an unlinked file until the runtime restarts.
        """
        if self._opened is not None and file_identity(self._db_path) == self._opened:
            return False
        with self._gate:
            while self._reopening:
                self._gate.wait()
            now = file_identity(self._db_path)
            if now is not None and now == self._opened:
                return False  # another thread reopened it meanwhile
            self._reopening = True
            while self._in_use:
                self._gate.wait()
        try:
            # Every old connection is closed before the new file is opened: closing the last
            # connection of the old file deletes the ``-wal`` *by path*, which must not be the new
            # file's (hence also the wait above for transactions still running on the old engine).
            self._engine.dispose()
            self._engine = open_write_engine(self._db_path, synchronous=self._synchronous)
            self._opened = file_identity(self._db_path)
            self.reopened += 1
        finally:
            with self._gate:
                self._reopening = False
                self._gate.notify_all()
        logger.warning(
            "memory database created again" if now is None else "memory database replaced; reopened",
            extra={"db_path": self._db_path, "reopened": self.reopened},
        )
        return True

    @contextmanager
    def _engine_in_use(self) -> Iterator[tuple[Engine, FileIdentity | None]]:
        """The engine and the file it opened, kept from being switched while the block runs."""
        with self._gate:
            while self._reopening:
                self._gate.wait()
            self._in_use += 1
            engine, opened = self._engine, self._opened
        try:
            yield engine, opened
        finally:
            with self._gate:
                self._in_use -= 1
                self._gate.notify_all()

    def _before_commit(self, conn: Connection) -> None:
        """What a writer adds to every transaction, last (nothing here)."""

    def checkpoint_wal(self, attempts: int = 3) -> bool:
        """Copy the WAL into the database file and truncate it to nothing (``PRAGMA
        wal_checkpoint(TRUNCATE)``), so pages a transaction just rewrote (a forget) leave no older
        copy in ``-wal``. A reader in another process can hold part of the log: tried ``attempts``
        times, 50 ms apart; False if still busy (the next checkpoint, automatic or not, goes on)."""
        for attempt in range(attempts):
            try:
                with self._engine_in_use() as (engine, _opened), engine.connect() as conn:
                    raw = conn.connection.driver_connection
                    assert isinstance(raw, sqlite3.Connection)
                    busy = raw.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except (SQLAlchemyError, sqlite3.Error) as exc:
                raise StorageError(f"checkpoint of {self._db_path!r} failed ({type(exc).__name__})") from exc
            if busy == 0:
                return True
            if attempt + 1 < attempts:
                time.sleep(0.05)
        return False

    def _conn(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:  # pragma: no cover - every caller enters atomic() first
            raise RuntimeError("no transaction is open")
        return conn

    def _read_statement(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """Rows of ONE read statement run outside any write transaction.

        SQLite runs a lone statement on a connection in autocommit mode as a read of one WAL
        snapshot, so it never takes the write lock: a status poll never stalls the writer's commits
        (every ``atomic()`` transaction begins ``IMMEDIATE``, which does).
        """
        current: Connection | None = getattr(self._local, "conn", None)
        try:
            if current is not None:  # inside atomic() on this thread: read in its transaction
                return list(current.exec_driver_sql(sql, params).fetchall())
            with self._engine_in_use() as (engine, _opened), engine.connect() as conn:
                raw = conn.connection.driver_connection
                assert isinstance(raw, sqlite3.Connection)
                return raw.execute(sql, params).fetchall()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StorageError(f"read of {self._db_path!r} failed ({type(exc).__name__})") from exc
