"""A temporary database with its writer per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from persistence.store import Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "om.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    opened = Store(db_path)
    yield opened
    opened.close()
