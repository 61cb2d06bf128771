"""The reused per-thread read connection (search, projection) and the slim projection query."""

from __future__ import annotations

import os
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.read.projector import assemble_active_memory, render_active_memory
from actors.read.service import project
from persistence.database.read_connection import MEMO_ENTRIES, SnapshotReader
from persistence.reads.projection import ProjectionLines, select_projection_lines
from persistence.reads.projection_sql import OBSERVATION_LINE_TABLE
from persistence.search.reader import SearchReader
from persistence.writers.store import Store
from protocol.errors import StorageError
from tests.unit.actors.read.factories import hex_id, observation, reflection
from tests.unit.actors.read.helpers import commit, promote


def _count(conn: sqlite3.Connection, names: frozenset[str]) -> int:
    return int(conn.execute("SELECT count(*) FROM om_observation").fetchone()[0])


def test_connection_is_reused_within_a_thread_and_not_across_threads(store: Store, db_path: Path) -> None:
    commit(store, [observation("a1", session_id="s1")])
    reader = SnapshotReader(db_path)
    seen: list[sqlite3.Connection] = []

    def grab(conn: sqlite3.Connection, names: frozenset[str]) -> int:
        seen.append(conn)
        return 1

    reader.run(grab, 0)
    reader.run(grab, 0)
    assert seen[0] is seen[1]
    thread = threading.Thread(target=lambda: reader.run(grab, 0))
    thread.start()
    thread.join()
    assert len(seen) == 3 and seen[2] is not seen[0]
    assert seen[0].execute("PRAGMA query_only").fetchone() == (1,)


def test_new_rows_and_new_tables_are_seen_by_a_reused_connection(store: Store, db_path: Path) -> None:
    reader = SnapshotReader(db_path)
    commit(store, [observation("a1", session_id="s1")])
    assert reader.run(_count, -1, ("om_observation",)) == 1
    commit(store, [observation("a2", session_id="s1")])
    assert reader.run(_count, -1, ("om_observation",)) == 2
    assert reader.run(_count, -1, ("no_such_table",)) == -1
    with sqlite3.connect(db_path) as writer:
        writer.execute("CREATE TABLE no_such_table (x)")
    assert reader.run(_count, -1, ("no_such_table",)) == 2  # the schema change is noticed


def test_missing_deleted_and_replaced_files(tmp_path: Path) -> None:
    db_path = tmp_path / "om.sqlite"
    reader = SnapshotReader(db_path)
    assert reader.run(_count, -1) == -1 and not db_path.exists()
    with Store(db_path) as store:
        commit(store, [observation("a1", session_id="s1")])
    assert reader.run(_count, -1) == 1
    copy = tmp_path / "copy.sqlite"
    shutil.copy(db_path, copy)
    with Store(copy) as store:
        commit(store, [observation("a2", session_id="s2")])
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    assert reader.run(_count, -1) == -1  # deleted: never read through the stale handle
    os.replace(copy, db_path)
    assert reader.run(_count, -1) == 2  # replaced: reopened


def test_errors_are_storage_errors_and_the_connection_is_dropped(store: Store, db_path: Path) -> None:
    reader = SnapshotReader(db_path)

    def broken(conn: sqlite3.Connection, names: frozenset[str]) -> int:
        conn.execute("SELECT no_such_column FROM om_observation")
        return 0

    with pytest.raises(StorageError, match="OperationalError") as caught:
        reader.run(broken, 0)
    assert "no_such_column" not in str(caught.value)
    assert reader.run(_count, -1) == 0  # a fresh connection works


def test_reads_never_write(store: Store, db_path: Path) -> None:
    reader = SnapshotReader(db_path)

    def write(conn: sqlite3.Connection, names: frozenset[str]) -> int:
        conn.execute("DELETE FROM om_observation")
        return 0

    commit(store, [observation("a1", session_id="s1")])
    with pytest.raises(StorageError):
        reader.run(write, 0)
    assert reader.run(_count, -1) == 1


# ------------------------------------------------------------- projection: slim query == full records


STAMPS = ["2026-07-26 09:00", "2026-07-26 10:00", "2026-07-26 10:00", "2026-07-27 00:00"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    count=st.integers(0, 8),
    generation=st.sampled_from([None, "succeeded", "running"]),
    retained=st.sets(st.integers(0, 7)),
    watermark=st.integers(0, 8),
    reflections=st.integers(0, 3),
)
def test_projection_rows_render_like_the_full_active_memory(
    tmp_path_factory: pytest.TempPathFactory,
    count: int,
    generation: str | None,
    retained: set[int],
    watermark: int,
    reflections: int,
) -> None:
    db_path = tmp_path_factory.mktemp("projection") / "om.sqlite"
    with Store(db_path) as store:
        rows = [
            observation(
                f"a{i:02d}", f"note {i}", timestamp=STAMPS[i % 4], session_id="s1", refs=(("s1", i + 1),)
            )
            for i in range(count)
        ]
        for row in rows:
            commit(store, [row])
        commit(store, [observation("ff", "other session", session_id="s2")])
        if generation is not None:
            kept = [hex_id(f"a{i:02d}") for i in sorted(retained) if i < count]
            refs = [reflection(f"b{i}", f"fact {i}", session_id="s1") for i in range(reflections)]
            if generation == "succeeded":
                promote(store, "s1", refs, kept, watermark)
            else:
                store.claim_generation("e" * 64, "s1", "h" * 64, "local/test", "1", 1, watermark, "2026")
    reader = SearchReader(db_path)
    memory = reader.active_memory("s1")
    slim = reader.projection("s1")
    assert [row.observation_id for row in slim.observations] == [
        row.observation_id for row in memory.candidates.observations
    ]
    expected = render_active_memory(memory.reflections, memory.candidates.observations)
    assert render_active_memory(slim.reflections, slim.observations) == expected
    lines = reader.projection_lines("s1")
    assert _assembled(lines) == expected
    assert project(db_path, "s1") == expected
    reader.close()
    # A database without the stored lines (not migrated to omray_006 yet) renders them per row.
    with sqlite3.connect(db_path) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")} - {OBSERVATION_LINE_TABLE}
        assert _assembled(select_projection_lines(conn, "s1", names)) == expected


def _assembled(lines: ProjectionLines) -> str:
    return assemble_active_memory(
        lines.reflection_lines, (lines.observation_text,) if lines.observation_text else ()
    )


def test_memoized_projection_is_reused_until_a_commit_then_read_again(store: Store, db_path: Path) -> None:
    commit(store, [observation("a1", "first", session_id="s1")])
    reader = SearchReader(db_path)
    first = reader.projection_lines("s1")
    assert reader.projection_lines("s1") is first  # nothing committed: the kept answer
    commit(store, [observation("a2", "second", session_id="s2")])  # any commit, even another session's
    again = reader.projection_lines("s1")
    assert again is not first and again == first
    commit(store, [observation("a3", "third", session_id="s1", timestamp="2026-07-28 00:00")])
    assert reader.projection_lines("s1").observation_text.endswith("third")
    reader.close()


def test_memo_keeps_a_bounded_number_of_answers(store: Store, db_path: Path) -> None:
    commit(store, [observation("a1", session_id="s1")])
    reader = SnapshotReader(db_path)
    calls: list[int] = []

    def counted(key: int) -> int:
        return reader.run(lambda conn, names: calls.append(key) or key, -1, memo_key=("count", key))

    for key in range(MEMO_ENTRIES + 1):
        counted(key)
    counted(MEMO_ENTRIES)  # the newest is kept
    counted(0)  # the oldest was dropped
    assert calls == [*range(MEMO_ENTRIES + 1), 0]
