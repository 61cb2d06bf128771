"""The files and the lock of one database's derived hybrid-search index, shared by its build and
query sides (reference §14.4): ``<database>.semantic/`` (directory 0700, files 0600) and its
``index.lock``, the per-project ``flock`` lock (shared by searches, exclusive for writes; each side
waits briefly for the other, then answers ``index_busy``), the durable state row and progress.

A file where the directory belongs, or a directory where the lock file belongs, is derived damage
and is replaced.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from persistence.files.node_disk import check_on_this_node
from persistence.semantic.files import (
    DIRECTORY_MODE,
    FILE_MODE,
    KEYWORD_DIR,
    LOCK_FILE,
    MANIFEST_FILE,
    VECTOR_FILE,
    DerivedIndexError,
)
from persistence.semantic.keyword import PREPARED_SUFFIX, KeywordStore
from persistence.semantic.manifest import Manifest
from persistence.semantic.sources import SemanticSourceReader, SemanticState, SemanticStateWriter
from persistence.semantic.vectors import VectorStore
from protocol.semantic import (
    INDEX_BUILDING_MESSAGE,
    INDEX_BUSY_MESSAGE,
    ChunkingRules,
    SemanticSearchError,
)
from protocol.settings import SemanticSettings

logger = logging.getLogger("omray.semantic")
"""The semantic index's logger (its build and query sides log here too): counts, codes, reasons only."""

LOCK_WAIT_S: Final[float] = 5.0
"""How long a search waits for a write (or a write for searches) before ``index_busy``."""
LOCK_POLL_S: Final[float] = 0.005
"""How often a waiting side tries the lock again."""


@dataclass(frozen=True, slots=True)
class IndexProgress:
    """Progress in memory units (reference §14.4), not a readiness signal."""

    indexed_count: int
    """Current memories fully indexed (0 unless the state is clean with a matching signature)."""
    source_count: int
    """Current memories."""

    def as_dict(self) -> dict[str, int]:
        """``{"indexed_count", "source_count"}``."""
        return {"indexed_count": self.indexed_count, "source_count": self.source_count}


class DerivedIndex:
    """The derived index's directory, lock, state row and stores: what building and searching share.

    Not used alone: :class:`persistence.semantic.index.SemanticIndex` adds the build side
    (:class:`persistence.semantic.build.IndexBuilder`) and the query side
    (:class:`persistence.semantic.candidates.CandidateReader`) to it.
    """

    def __init__(
        self,
        db_path: str | os.PathLike[str],
        settings: SemanticSettings,
        state_writer: SemanticStateWriter,
        *,
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> None:
        self._lock_wait_s = lock_wait_s
        self._db_path = os.fspath(db_path)
        self._directory = Path(f"{os.path.abspath(self._db_path)}.semantic")
        self._settings = settings
        self._signature = settings.signature()
        self._rules = ChunkingRules.from_settings(settings.embedding_api)
        self._writer = state_writer
        self._reader = SemanticSourceReader(self._db_path)
        self._vectors = VectorStore(self._directory)
        self._keyword = KeywordStore(self._directory)

    @property
    def directory(self) -> Path:
        """``<database>.semantic``."""
        return self._directory

    @property
    def settings(self) -> SemanticSettings:
        """The settings the index is built with (its signature, chunking rules and batch size)."""
        return self._settings

    @property
    def rules(self) -> ChunkingRules:
        """How memory text is cut into chunks (from the settings)."""
        return self._rules

    def has_database(self) -> bool:
        """Whether the memory database exists (before its first write there is nothing to index)."""
        return os.path.exists(self._db_path)

    # --- lock and files --------------------------------------------------------------------------

    def _ensure_directory(self) -> None:
        """Create ``<db>.semantic`` (0700); a non-directory in its place is derived damage: replaced."""
        directory = self._directory
        check_on_this_node(directory)
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            logger.warning("om.semantic.directory_repaired", extra={"reason": "not_a_directory"})
            directory.unlink()
        if not directory.is_dir():
            directory.mkdir(mode=DIRECTORY_MODE, parents=False, exist_ok=True)
        os.chmod(directory, DIRECTORY_MODE)
        lock = directory / LOCK_FILE
        if lock.is_symlink() or (lock.exists() and not lock.is_file()):
            logger.warning("om.semantic.lock_repaired", extra={"reason": "not_a_file"})
            if lock.is_dir() and not lock.is_symlink():
                shutil.rmtree(lock)
            else:
                lock.unlink()

    @contextmanager
    def _locked(self, shared: bool = False) -> Iterator[None]:
        """The per-project lock: shared for searches (readers never refuse each other), exclusive for
        writes. Both wait up to ``lock_wait_s`` for the other kind, then raise ``index_busy``."""
        self._ensure_directory()
        fd = os.open(self._directory / LOCK_FILE, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
            deadline = time.monotonic() + self._lock_wait_s
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise SemanticSearchError("index_busy", INDEX_BUSY_MESSAGE) from None
                    time.sleep(LOCK_POLL_S)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _path(self, name: str) -> Path:
        return self._directory / name

    def _remove_derived(self) -> None:
        for name in (
            MANIFEST_FILE,
            f"{MANIFEST_FILE}-journal",
            f"{MANIFEST_FILE}.sha256",
            VECTOR_FILE,
            f"{VECTOR_FILE}.tmp",
        ):
            self._path(name).unlink(missing_ok=True)
        for name in (KEYWORD_DIR, f"{KEYWORD_DIR}.tmp"):
            shutil.rmtree(self._path(name), ignore_errors=True)
        for prepared in self._directory.glob(f"{KEYWORD_DIR}{PREPARED_SUFFIX}*"):
            shutil.rmtree(prepared, ignore_errors=True)  # left by a removal that crashed
        self._vectors.forget()
        self._keyword.forget()

    def _save_state(self, source_hash: str, dimensions: int, dirty: bool, complete: bool) -> None:
        self._writer.save_semantic_state(
            signature=self._signature,
            source_hash=source_hash,
            dimensions=dimensions,
            dirty=dirty,
            complete=complete,
        )

    def _mark_dirty(self, state: SemanticState) -> None:
        self._save_state(state.source_hash, state.dimensions, dirty=True, complete=False)

    # --- progress --------------------------------------------------------------------------------

    def progress(self) -> IndexProgress:
        """Indexed and source memory counts (indexed is 0 unless the state is clean and current)."""
        state, fingerprint = self._reader.snapshot()
        indexed = 0
        if state is not None and not state.dirty and state.signature == self._signature:
            try:
                with closing(Manifest.open(self._path(MANIFEST_FILE), verify=False)) as manifest:
                    indexed = manifest.memory_count()
            except (DerivedIndexError, sqlite3.Error):
                indexed = 0
        return IndexProgress(min(indexed, fingerprint.total), fingerprint.total)

    def _building(self) -> SemanticSearchError:
        return SemanticSearchError("index_building", INDEX_BUILDING_MESSAGE, self.progress().as_dict())
