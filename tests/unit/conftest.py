"""Fixtures shared by the unit tests: a temporary memory database per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the test's database lives (created by the ``store`` fixture)."""
    return tmp_path / "data" / "om.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """The test database's writer, closed after the test."""
    opened = Store(db_path)
    yield opened
    opened.close()


@pytest.fixture
def reader(db_path: Path) -> MemoryReader:
    """A read-only view of the test database."""
    return MemoryReader(db_path)
