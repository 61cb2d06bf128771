"""``client.activity`` / ``client.activities``: fresh rows only, with the §11.2 status text."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from cluster.client import OmrayClient
from cluster.naming import RuntimeNames
from persistence.writers.store import Store
from tests.unit.cluster.commands.watch.conftest import NOW, activity


@pytest.mark.parametrize(
    ("age_s", "shown"), [(0, True), (299, True), (300, True), (301, False), (3600, False)]
)
def test_300_second_rule(client: OmrayClient, store: Store, age_s: int, shown: bool) -> None:
    store.upsert_activity(activity("s-1", age_s=age_s))
    row = client.activity("s-1", now=NOW)
    assert (row is not None) is shown
    if row is not None:
        assert row["age_s"] == age_s
        assert row["status_text"] == "Observational memory: observer running on ~1,234-token chunk"


def test_row_fields_and_stage_texts(client: OmrayClient, store: Store) -> None:
    store.upsert_activity(activity("s-r", stage="reflector", tokens=2500, job_id="job-r"))
    store.upsert_activity(activity("s-d", stage="dropper", tokens=30_000, target=40_000))
    reflector = client.activity("s-r", now=NOW)
    assert reflector == {
        "session_id": "s-r",
        "job_id": "job-r",
        "stage": "reflector",
        "current_tokens": 2500,
        "target_tokens": None,
        "updated_at": NOW.isoformat(),
        "age_s": 0,
        "status_text": "Observational memory: reflector running (~2,500 tokens)",
    }
    dropper = client.activity("s-d", now=NOW)
    assert dropper is not None
    assert dropper["status_text"].startswith("Observational memory: dropper running — ")
    assert "(75%)" in dropper["status_text"]


def test_unknown_session_and_missing_database_are_none(
    tmp_path: Path, client: OmrayClient, store: Store
) -> None:
    assert client.activity("nobody", now=NOW) is None
    missing = OmrayClient(
        RuntimeNames(prefix="unit"),
        settings={"storage": {"database": str(tmp_path / "none.sqlite")}},
        cwd=tmp_path,
    )
    assert missing.activity("s-1", now=NOW) is None
    assert missing.activities(now=NOW) == []
    assert not (tmp_path / "none.sqlite").exists()  # reading never creates the file


def test_activities_lists_fresh_rows_by_session(client: OmrayClient, store: Store) -> None:
    store.upsert_activity(activity("s-b", age_s=10))
    store.upsert_activity(activity("s-a", age_s=300))
    store.upsert_activity(activity("s-stale", age_s=301))
    assert [row["session_id"] for row in client.activities(now=NOW)] == ["s-a", "s-b"]
    later = NOW + timedelta(seconds=1)
    assert [row["session_id"] for row in client.activities(now=later)] == ["s-b"]


def test_a_cleared_row_is_gone(client: OmrayClient, store: Store) -> None:
    store.upsert_activity(activity("s-1", job_id="job-1"))
    assert client.activity("s-1", now=NOW) is not None
    assert store.clear_activity("s-1", "job-1")
    assert client.activity("s-1", now=NOW) is None


def _insert_raw(db_path: Path, session_id: str, stage: str, updated_at: str) -> None:
    # A row a foreign writer could leave behind; the Store itself only writes ISO times.
    with sqlite3.connect(db_path) as conn:
        conn.execute(
            "INSERT INTO om_current_activity"
            " (run_id, job_id, stage, current_tokens, target_tokens, updated_at)"
            " VALUES (?, 'job-x', ?, 5, NULL, ?)",
            (session_id, stage, updated_at),
        )


def test_an_unparseable_time_is_hidden(client: OmrayClient, store: Store, db_path: Path) -> None:
    store.upsert_activity(activity("s-good"))
    _insert_raw(db_path, "s-bad-time", "observer", "not a time")
    assert client.activity("s-bad-time", now=NOW) is None
    assert [row["session_id"] for row in client.activities(now=NOW)] == ["s-good"]
