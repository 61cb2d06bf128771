"""Stateful property test of indexing from anywhere: the index is planned and committed on the
database's node (:class:`actors.store.reader.DataReader`) and embedded by workers elsewhere.

Memories keep arriving; several indexer workers, each in its own "process" (its own reader, every
value crossing by pickle as between Ray actors), plan a batch, embed it and send it back at any
later moment, or die and never send it. Checked: the index never holds a chunk twice or a chunk of
a memory that does not exist, and once one worker drains it, the index holds exactly what a single
uninterrupted synchronization of the same rows builds.
"""

from __future__ import annotations

import pickle
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from actors.indexer.actor import synchronize_through
from actors.indexer.sync import synchronize
from actors.store.reader import DataReader
from persistence.semantic import SemanticIndex, SyncResult
from persistence.writers.store import Store
from testkit.memory_snapshot import memory_snapshot
from tests.unit.persistence.semantic.conftest import (
    HashEmbedder,
    Memories,
    RecordingWriter,
    semantic_settings,
)

SETTINGS = semantic_settings(batch_size=2)
WORDS = ("billing", "dates", "parser", "tests", "deploy", "cache", "queue", "index")


class Remote:
    """A reader in another process: arguments and answers cross by pickle."""

    def __init__(self, reader: DataReader) -> None:
        self._reader = reader

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._reader, name)

        def call(*args: Any) -> Any:
            answer = method(*pickle.loads(pickle.dumps(args)))
            return pickle.loads(pickle.dumps(answer))

        return call


def _chunk_ids(db: Path) -> list[str]:
    manifest = Path(f"{db}.semantic") / "manifest.sqlite"
    if not manifest.is_file():
        return []
    with sqlite3.connect(f"{manifest.as_uri()}?mode=ro", uri=True) as conn:
        return [row[0] for row in conn.execute("SELECT chunk_id FROM chunk")]


class RemoteIndexModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.directory = Path(tempfile.mkdtemp(prefix="omray-remote-index-"))
        self.db = self.directory / "node-a" / "om.sqlite"
        self.db.parent.mkdir()
        self.store = Store(self.db)
        self.memories = Memories(self.db)
        self.embedder = HashEmbedder()
        self.plans: list[tuple[Remote, Any, list[list[float]]]] = []  # embedded, not sent back yet

    def teardown(self) -> None:
        try:
            self._drain_and_compare()
        finally:
            self.store.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    def _worker(self) -> Remote:
        return Remote(DataReader(self.db, RecordingWriter(self.store)))

    @rule(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=6), reflection=st.booleans())
    def a_memory_is_committed(self, words: list[str], reflection: bool) -> None:
        text = " ".join(words)
        (self.memories.reflection if reflection else self.memories.observation)(text)

    @rule()
    def a_worker_plans_and_embeds(self) -> None:
        worker = self._worker()
        plan = worker.index_plan(SETTINGS, 1)
        if isinstance(plan, SyncResult):
            return
        vectors = self.embedder.embed([chunk.vector_text for chunk in plan.chunks if chunk.embedded])
        self.plans.append((worker, plan, vectors))

    @precondition(lambda self: bool(self.plans))
    @rule(index=st.integers(0, 10), dies=st.booleans())
    def a_worker_sends_its_batch_back_or_dies(self, index: int, dies: bool) -> None:
        worker, plan, vectors = self.plans.pop(index % len(self.plans))
        if not dies:
            worker.index_commit(SETTINGS, plan, vectors)

    @invariant()
    def no_chunk_twice_and_none_without_its_memory(self) -> None:
        ids = _chunk_ids(self.db)
        assert len(ids) == len(set(ids))

    def _drain_and_compare(self) -> None:
        for _ in range(200):
            if synchronize_through(self._worker(), SETTINGS, self.embedder).complete:
                break
        reference_db = self.directory / "reference" / "om.sqlite"
        reference_db.parent.mkdir()
        with sqlite3.connect(self.db) as source, sqlite3.connect(reference_db) as target:
            source.backup(target)  # the canonical rows (WAL included), not the derived index
        with Store(reference_db) as reference_store:
            index = SemanticIndex(reference_db, SETTINGS, RecordingWriter(reference_store))
            while not synchronize(index, HashEmbedder(), batches=1).complete:
                pass
        ours, theirs = memory_snapshot(self.db), memory_snapshot(reference_db)
        for section in ("index_memories", "index_chunks", "index_state"):
            assert ours.sections[section] == theirs.sections[section], section


TestRemoteIndex = RemoteIndexModel.TestCase
TestRemoteIndex.settings = settings(
    max_examples=15, stateful_step_count=20, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
