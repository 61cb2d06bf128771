"""Names of omray's Ray actors and where the runtime keeps its own files."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

NAMESPACE = "omray"
"""Ray namespace of every omray actor."""


def omray_home() -> Path:
    """``$OMRAY_HOME`` or ``~/.omray``: the queue database and runtime state live here."""
    return Path(os.environ.get("OMRAY_HOME") or Path.home() / ".omray")


def db_key(db_path: str | Path) -> str:
    """Short, stable hash of a database's absolute path (names its StoreActor)."""
    return hashlib.sha256(str(Path(db_path).resolve()).encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class RuntimeNames:
    """Actor names of one runtime; tests use their own prefix so they never meet each other."""

    prefix: str = "omray"
    """Name prefix; the production runtime uses ``omray``."""
    namespace: str = NAMESPACE
    """Ray namespace."""

    @property
    def queue(self) -> str:
        """The QueueActor."""
        return f"{self.prefix}.queue"

    @property
    def observer(self) -> str:
        """The first ObserverActor of the pool (``<prefix>.observer.0``)."""
        return self.worker("observer", 0)

    @property
    def reflector(self) -> str:
        """The first ReflectorActor of the pool."""
        return self.worker("reflector", 0)

    @property
    def indexer(self) -> str:
        """The first IndexerActor of the pool."""
        return self.worker("indexer", 0)

    def worker(self, role: str, index: int) -> str:
        """Member ``index`` of a worker pool: ``<prefix>.<role>.<index>``."""
        return f"{self.prefix}.{role}.{index}"

    def store(self, db_path: str | Path) -> str:
        """The StoreActor of one SQLite file."""
        return f"{self.prefix}.store.{db_key(db_path)}"

    def reader(self, db_path: str | Path) -> str:
        """The ReaderActor of one memory database (beside its StoreActor, on its node)."""
        return f"{self.prefix}.reader.{db_key(db_path)}"
