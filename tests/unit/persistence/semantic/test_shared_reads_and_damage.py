"""Issue 16 D5 (concurrent searches share the index) and D13 (a damaged index directory or lock repairs)."""

from __future__ import annotations

import fcntl
import os
import shutil
import threading
from pathlib import Path

import pytest

from actors.indexer.sync import synchronize
from actors.read.retrieval import retrieve
from persistence.semantic import SemanticIndex
from protocol.semantic import SemanticSearchError
from tests.unit.persistence.semantic.conftest import (
    HashEmbedder,
    Memories,
    RecordingWriter,
    semantic_settings,
    sync_all,
)


def _hold_lock(index: SemanticIndex, mode: int) -> int:
    fd = os.open(index.directory / "index.lock", os.O_RDWR)
    fcntl.flock(fd, mode | fcntl.LOCK_NB)
    return fd


def test_a_search_is_not_refused_while_another_reader_holds_the_lock(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    memories.observation("parse the invoice dates")
    sync_all(index, embedder)
    fd = _hold_lock(index, fcntl.LOCK_SH)  # another process in the middle of its own search
    try:
        retrieval = retrieve(index, "invoice dates", embedder)
    finally:
        os.close(fd)
    assert [memory.content for memory in retrieval.results] == ["parse the invoice dates"]


def test_concurrent_searches_from_many_threads_all_answer(
    db_path: Path, writer: RecordingWriter, memories: Memories, embedder: HashEmbedder
) -> None:
    for number in range(20):
        memories.observation(f"memory number {number} about topic{number}")
    sync_all(SemanticIndex(db_path, semantic_settings(), writer), embedder)
    errors: list[str] = []
    answers: list[int] = []

    def searches() -> None:
        index = SemanticIndex(db_path, semantic_settings(), writer)  # one instance per thread
        for number in range(20):
            try:
                answers.append(len(retrieve(index, f"topic{number}", embedder, limit=5).results))
            except SemanticSearchError as exc:
                errors.append(exc.code)

    threads = [threading.Thread(target=searches) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(answers) == 80 and all(count > 0 for count in answers)


def test_a_write_still_excludes_searches_after_a_brief_wait(
    db_path: Path, writer: RecordingWriter, memories: Memories, embedder: HashEmbedder
) -> None:
    index = SemanticIndex(db_path, semantic_settings(), writer, lock_wait_s=0.05)
    memories.observation("m")
    sync_all(index, embedder)
    fd = _hold_lock(index, fcntl.LOCK_EX)
    try:
        with pytest.raises(SemanticSearchError) as caught:
            retrieve(index, "m", embedder)
        assert caught.value.code == "index_busy"
    finally:
        os.close(fd)


def test_a_reader_does_not_block_indexing_for_long(
    db_path: Path, writer: RecordingWriter, memories: Memories, embedder: HashEmbedder
) -> None:
    index = SemanticIndex(db_path, semantic_settings(), writer, lock_wait_s=5.0)
    memories.observation("first")
    sync_all(index, embedder)
    memories.observation("second")
    fd = _hold_lock(index, fcntl.LOCK_SH)
    release = threading.Timer(0.1, os.close, args=(fd,))
    release.start()
    try:
        assert sync_all(index, embedder) >= 1  # waited for the reader instead of failing
    finally:
        release.join()
    assert {memory.content for memory in retrieve(index, "second", embedder).results} >= {"second"}


def test_semantic_path_that_is_a_regular_file_is_repaired(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    memories.observation("tariff tables")
    sync_all(index, embedder)
    shutil.rmtree(index.directory)
    index.directory.write_text("not a directory")
    result = synchronize(index, embedder)
    assert result.rebuilt
    sync_all(index, embedder)
    assert index.directory.is_dir()
    assert [memory.content for memory in retrieve(index, "tariff", embedder).results] == ["tariff tables"]


def test_lock_path_that_is_a_directory_is_repaired(
    index: SemanticIndex, memories: Memories, embedder: HashEmbedder
) -> None:
    memories.observation("tariff tables")
    sync_all(index, embedder)
    lock = index.directory / "index.lock"
    lock.unlink()
    (lock / "nested").mkdir(parents=True)
    memories.observation("customs forms")
    sync_all(index, embedder)
    assert lock.is_file()
    assert [memory.content for memory in retrieve(index, "customs", embedder).results][:1] == [
        "customs forms"
    ]
