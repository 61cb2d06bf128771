"""What every writer of one SQLite file shares: the write engine, :meth:`SqliteWriter.atomic` (the
only way into a transaction) and lone-statement reads that never take the write lock.

Two writers build on it, one per file: :class:`persistence.store.Store` for a memory database and
:class:`persistence.queue_store.QueueStore` for the job queue's own ``<prefix>.queue.sqlite``.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Self

from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from persistence.connection import Synchronous, open_write_engine
from protocol.errors import InvalidPayloadError, OmrayError, StorageError

_FAILURE_REASON = re.compile(r"^[a-z0-9_.:-]{1,64}\Z")


class NotFoundError(OmrayError):
    """The row a write needs (a generation, an unfinished job) does not exist."""


def check_failure_reason(reason: str | None) -> None:
    """A failure reason is a short lowercase category code (never free text), or ``None``."""
    if reason is not None and not _FAILURE_REASON.match(reason):
        raise InvalidPayloadError("failure_reason must be a short lowercase category code")


class SqliteWriter:
    """The single write engine of one file. One per file per process; safe to call from several
    threads (each thread gets its own connection); one transaction per outermost :meth:`atomic`
    (``BEGIN IMMEDIATE``; savepoints when nested)."""

    def __init__(self, db_path: str | os.PathLike[str], *, synchronous: Synchronous = "FULL") -> None:
        self._db_path = os.fspath(db_path)
        self._engine = open_write_engine(self._db_path, synchronous=synchronous)
        self._local = threading.local()

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
        try:
            with self._engine.connect() as conn:
                self._local.conn = conn
                try:
                    with conn.begin():
                        yield
                        self._before_commit(conn)
                finally:
                    self._local.conn = None
        except SQLAlchemyError as exc:
            raise StorageError(f"write to {self._db_path!r} failed ({type(exc).__name__})") from exc

    def _before_commit(self, conn: Connection) -> None:
        """What a writer adds to every transaction, last (nothing here)."""

    def checkpoint_wal(self, attempts: int = 3) -> bool:
        """Copy the WAL into the database file and truncate it to nothing (``PRAGMA
        wal_checkpoint(TRUNCATE)``), so pages a transaction just rewrote (a forget) leave no older
        copy in ``-wal``. A reader in another process can hold part of the log: tried ``attempts``
        times, 50 ms apart; False if still busy (the next checkpoint, automatic or not, goes on)."""
        for attempt in range(attempts):
            try:
                with self._engine.connect() as conn:
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
            with self._engine.connect() as conn:
                raw = conn.connection.driver_connection
                assert isinstance(raw, sqlite3.Connection)
                return raw.execute(sql, params).fetchall()
        except (SQLAlchemyError, sqlite3.Error) as exc:
            raise StorageError(f"read of {self._db_path!r} failed ({type(exc).__name__})") from exc
