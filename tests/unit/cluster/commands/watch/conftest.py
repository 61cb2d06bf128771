"""A temporary memory database and a client reading it (no Ray: the client is never connected)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cluster.client import OmrayClient
from cluster.naming import RuntimeNames
from protocol.records import ActivityRecord

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
"""The fixed "now" of these tests."""


def activity(
    session_id: str,
    *,
    age_s: int = 0,
    stage: str = "observer",
    tokens: int = 1234,
    target: int | None = None,
    job_id: str = "job-1",
) -> ActivityRecord:
    """An activity row written ``age_s`` seconds before :data:`NOW`."""
    return ActivityRecord.model_validate(
        {
            "run_id": session_id,
            "job_id": job_id,
            "stage": stage,
            "current_tokens": tokens,
            "target_tokens": target,
            "updated_at": (NOW - timedelta(seconds=age_s)).isoformat(),
        }
    )


@pytest.fixture
def client(tmp_path: Path, db_path: Path) -> OmrayClient:
    return OmrayClient(
        RuntimeNames(prefix="unit"), settings={"storage": {"database": str(db_path)}}, cwd=tmp_path
    )
