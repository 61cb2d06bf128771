"""The index's source fingerprint reads row counts kept by triggers (migration ``omray_019_row_counts``)
instead of counting every row on each search: the kept counts must equal ``count(*)`` after any mix
of inserts and deletes, and a table whose triggers are gone is counted the slow way."""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from persistence.database.omray_tables import COUNTED_TABLES, ROW_COUNT_TABLE, row_count_trigger
from persistence.semantic import SemanticSourceReader
from persistence.writers.store import Store
from tests.unit.persistence.semantic.conftest import Memories


def _true_counts(db_path: Path) -> tuple[int, int, int]:
    with sqlite3.connect(db_path) as conn:
        counts = [conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] for table in COUNTED_TABLES]
    return counts[0], counts[1], counts[2]


def _kept_counts(db_path: Path) -> tuple[int, int, int]:
    with sqlite3.connect(db_path) as conn:
        kept = dict(conn.execute(f"SELECT table_name, row_count FROM {ROW_COUNT_TABLE}").fetchall())
    return kept[COUNTED_TABLES[0]], kept[COUNTED_TABLES[1]], kept[COUNTED_TABLES[2]]


def _fingerprint_counts(db_path: Path) -> tuple[int, int, int]:
    fingerprint = SemanticSourceReader(db_path).fingerprint()
    return fingerprint.observations.count, fingerprint.reflections.count, fingerprint.events.count


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["add", "forget"]), st.sampled_from(["observation", "reflection", "event"])
        ),
        max_size=20,
    )
)
def test_kept_counts_equal_the_rows_after_any_inserts_and_deletes(steps: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        db_path = Path(directory) / "om.sqlite"
        Store(db_path).close()
        memories = Memories(db_path)
        for number, (action, kind) in enumerate(steps):
            table = {
                "observation": "om_observation",
                "reflection": "om_reflection",
                "event": "omray_transcript",
            }
            if action == "forget":
                memories.execute(
                    f"DELETE FROM {table[kind]} WHERE rowid = (SELECT min(rowid) FROM {table[kind]})"
                )
            elif kind == "observation":
                memories.observation(f"note number {number}")
            elif kind == "reflection":
                memories.reflection(f"reflection number {number}")
            else:
                memories.execute(
                    "INSERT INTO omray_transcript (event_id, run_id, seq, event_type, timestamp, content,"
                    " content_hash, created_at)"
                    " VALUES (?, 's1', ?, 'agent_command_applied', '2026-09-11 10:00', ?, 'h', 'now')",
                    (f"e{number}", number + 1, f"User: message {number}"),
                )
            assert _kept_counts(db_path) == _fingerprint_counts(db_path) == _true_counts(db_path)


def test_a_table_without_its_triggers_is_counted_row_by_row(tmp_path: Path) -> None:
    db_path = tmp_path / "om.sqlite"
    Store(db_path).close()
    memories = Memories(db_path)
    memories.observation("first")
    memories.execute(f"DROP TRIGGER {row_count_trigger('om_observation', 'ai')}")
    memories.observation("second")  # not counted by the kept row any more
    with sqlite3.connect(db_path) as conn:
        kept = conn.execute(
            f"SELECT row_count FROM {ROW_COUNT_TABLE} WHERE table_name = 'om_observation'"
        ).fetchone()[0]
    assert kept == 1
    assert _fingerprint_counts(db_path)[0] == 2  # the fingerprint does not trust it
