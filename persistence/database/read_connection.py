"""A reused read-only SQLite connection per thread, for the read side's hot paths (search, projection).

Opening a connection costs more than an indexed search: SQLite parses the whole schema (tables,
indexes, FTS5 shadow tables, triggers) on every new connection, and SQLAlchemy adds statement
compilation and result wrapping. :class:`SnapshotReader` keeps one plain ``sqlite3`` connection per
thread and per process, opened read-only (``mode=ro``, ``query_only``), with SQLite's prepared
statement cache, and runs each call in one deferred read transaction (one snapshot).

Guarantees, the same as :class:`persistence.reads.memory_reader.MemoryReader`: never creates, migrates or
writes the file; a missing file, or missing tables, give the caller's empty answer. The file's
identity (device, inode) is checked on every call, so a deleted or replaced database is reopened,
never read through a stale handle. A connection is never shared across threads or processes.

A call may be memoized (``memo_key``): its answer is kept with the connection and returned again
until ``PRAGMA data_version`` says another connection committed to the file (any commit, to any
table), so a memoized answer is always the one the query would give on the current snapshot.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any, Final, TypeVar, cast

from persistence.database.connection import BUSY_TIMEOUT_MS
from persistence.database.migrations import known_tables, tables_created_by
from persistence.files.node_disk import check_on_this_node
from protocol.errors import StorageError

T = TypeVar("T")

MMAP_BYTES: Final[int] = 2 * 1024 * 1024 * 1024
"""``PRAGMA mmap_size``: pages are read from the OS page cache without a copy (address space only).
Large enough for a 500,000-observation database (about 1.7 GB) to be mapped whole; SQLite caps it
at its compile-time maximum."""

STATEMENT_CACHE: Final[int] = 256
"""Prepared statements kept per connection."""

MEMO_ENTRIES: Final[int] = 8
"""Memoized answers kept per connection (the oldest goes first)."""

Query = Callable[[sqlite3.Connection, frozenset[str]], T]
"""A read run inside one snapshot: the connection and the database's table and index names."""


class _Cached:
    __slots__ = ("connection", "data_version", "identity", "memo", "names", "schema_version")

    def __init__(self, connection: sqlite3.Connection, identity: tuple[int, int, int]) -> None:
        self.connection = connection
        self.identity = identity
        self.schema_version = -1
        self.names: frozenset[str] = frozenset()
        self.data_version = -1
        self.memo: dict[Hashable, Any] = {}

    def memo_for(self, key: Hashable) -> tuple[bool, Any]:
        """``(True, answer)`` when ``key``'s answer is still that of this snapshot, else ``(False, None)``."""
        version = int(self.connection.execute("PRAGMA data_version").fetchone()[0])
        if version != self.data_version:
            self.memo.clear()  # another connection committed: every kept answer may be stale
            self.data_version = version
        if key in self.memo:
            return True, self.memo[key]
        return False, None

    def remember(self, key: Hashable, answer: Any) -> None:
        """Keep ``answer`` for ``key`` (dropping the oldest beyond :data:`MEMO_ENTRIES`)."""
        self.memo[key] = answer
        while len(self.memo) > MEMO_ENTRIES:
            del self.memo[next(iter(self.memo))]


class SnapshotReader:
    """Read-only snapshots of one database file through a reused per-thread connection."""

    def __init__(
        self, db_path: str | os.PathLike[str], setup: Callable[[sqlite3.Connection], None] | None = None
    ) -> None:
        """``setup`` runs on each new connection before it turns query-only (it may create ``temp``
        objects)."""
        self._path = Path(db_path).absolute()
        self._setup = setup
        self._local = threading.local()

    def _connect(self) -> sqlite3.Connection:
        check_on_this_node(self._path)
        connection = sqlite3.connect(
            f"{self._path.as_uri()}?mode=ro",
            uri=True,
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,
            check_same_thread=False,
            cached_statements=STATEMENT_CACHE,
        )
        connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if self._setup is not None:
            self._setup(connection)
        connection.execute("PRAGMA query_only = ON")
        connection.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
        return connection

    def _cached(self) -> _Cached | None:
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            self.close()
            return None
        if not S_ISREG(stat.st_mode):  # a directory (or worse) in the database's place is damage
            self.close()
            raise StorageError(f"memory database {str(self._path)!r} is not a regular file")
        identity = (stat.st_dev, stat.st_ino, os.getpid())
        cached: _Cached | None = getattr(self._local, "cached", None)
        if cached is not None and cached.identity == identity:
            return cached
        self.close()
        try:
            cached = _Cached(self._connect(), identity)
        except sqlite3.OperationalError:
            if not self._path.is_file():
                return None
            raise
        self._local.cached = cached
        return cached

    def close(self) -> None:
        """Close this thread's connection (the next call opens a new one)."""
        cached: _Cached | None = getattr(self._local, "cached", None)
        self._local.cached = None
        if cached is not None and cached.identity[2] == os.getpid():
            cached.connection.close()

    @staticmethod
    def _names(cached: _Cached) -> frozenset[str]:
        version = int(cached.connection.execute("PRAGMA schema_version").fetchone()[0])
        if version != cached.schema_version:
            rows = cached.connection.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')"
            ).fetchall()
            cached.names = frozenset(row[0] for row in rows)
            cached.schema_version = version
        return cached.names

    def run(
        self, query: Query[T], empty: T, tables: Sequence[str] = (), memo_key: Hashable | None = None
    ) -> T:
        """``query`` in one read snapshot; ``empty`` when the file or one of ``tables`` is missing.

        With ``memo_key`` the answer is memoized (see the module docstring): the key must name the
        query and its arguments.
        """
        try:
            cached = self._cached()
            if cached is None:
                return empty
            connection = cached.connection
            connection.execute("BEGIN")
            try:
                names = self._names(cached)  # reads the schema cookie: the snapshot starts here
                _check_not_damaged(connection, names, self._path)
                if not names.issuperset(tables):
                    return empty
                if memo_key is None:
                    return query(connection, names)
                found, answer = cached.memo_for(memo_key)
                if not found:
                    answer = query(connection, names)
                    cached.remember(memo_key, answer)
                return cast(T, answer)
            finally:
                connection.execute("COMMIT")
        except sqlite3.Error as exc:
            self.close()  # a broken connection is never reused
            raise StorageError(f"reading {str(self._path)!r} failed ({type(exc).__name__})") from exc


def _check_not_damaged(connection: sqlite3.Connection, names: frozenset[str], path: Path) -> None:
    """:class:`StorageError` when a table the recorded migrations created is gone (as ``MemoryReader``).

    "Not created yet" reads as empty memory; a dropped table must not. Costs a query only when some
    known table is absent.
    """
    known = known_tables()
    missing = known - names
    if not missing or not (names & known):
        return
    version_table = "om_schema_version"
    if version_table not in names:
        raise StorageError(f"{str(path)!r} is damaged: table {version_table!r} is missing")
    applied = [row[0] for row in connection.execute(f"SELECT version FROM {version_table}")]
    lost = sorted(tables_created_by(applied) - names)
    if lost:
        raise StorageError(f"{str(path)!r} is damaged: table {lost[0]!r} is missing")
