"""The projection text rendered at write time (migration ``omray_008``): used only while current."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.read.projector import render_active_memory
from actors.read.service import project
from persistence.reads import projection as projection_queries
from persistence.search.reader import SearchReader
from persistence.writers.store import Store
from protocol.errors import StorageError
from tests.unit.actors.read.factories import hex_id, observation, reflection
from tests.unit.actors.read.helpers import commit, promote

RUN = "s"
_VERSION_SQL = "SELECT version FROM omray_session_version WHERE run_id = ?"
_BUILT_SQL = "SELECT version FROM omray_projection_piece_built WHERE run_id = ?"
_PIECES_SQL = "SELECT lines FROM omray_projection_piece WHERE run_id = ? ORDER BY piece"


def _cache(db_path: Path) -> tuple[int | None, int | None, str | None]:
    """(session version, version the pieces show, the pieces' joined text) of ``RUN``."""
    conn = sqlite3.connect(db_path)
    try:
        version = conn.execute(_VERSION_SQL, (RUN,)).fetchone()
        built = conn.execute(_BUILT_SQL, (RUN,)).fetchone()
        pieces = [row[0] for row in conn.execute(_PIECES_SQL, (RUN,))]
        dirty = conn.execute("SELECT count(*) FROM omray_projection_piece_dirty").fetchone()[0]
    finally:
        conn.close()
    assert dirty == 0
    return (
        None if version is None else version[0],
        None if built is None else built[0],
        "\n".join(pieces) if built is not None else None,
    )


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pieces of two lines, so that the tests' few observations span several pieces.
    monkeypatch.setattr(projection_queries, "PIECE_LINES", 2)


def _expected(db_path: Path) -> str:
    """The projection rendered from full records, the reference the fast paths must equal."""
    memory = SearchReader(db_path).active_memory(RUN)
    return render_active_memory(memory.reflections, memory.candidates.observations)


def _lines_text(db_path: Path) -> str:
    """The observation text read from the lines, as a reader without pieces does."""
    conn = sqlite3.connect(db_path)
    try:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return projection_queries.render_observation_text(conn, RUN, names)
    finally:
        conn.close()


def _raw_insert_observation(db_path: Path, prefix: str) -> None:
    """Insert one observation the way another writer (the PHP extension) would: plain SQL."""
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            row = conn.execute("SELECT * FROM om_observation WHERE run_id = ? LIMIT 1", (RUN,)).fetchone()
            columns = [c[1] for c in conn.execute("PRAGMA table_info(om_observation)")]
            values = dict(zip(columns, row, strict=True))
            values |= {"observation_id": hex_id(prefix), "content": f"written by another writer {prefix}"}
            values["timestamp"] = "2026-07-27 08:00"
            names = ", ".join(values)
            conn.execute(
                f"INSERT INTO om_observation ({names}) VALUES ({', '.join('?' * len(values))})",
                tuple(values.values()),
            )
    finally:
        conn.close()


def test_store_writes_render_the_text_with_the_current_version(tmp_path: Path) -> None:
    db_path = tmp_path / "om.sqlite"
    with Store(db_path) as store:
        commit(
            store, [observation("a1", "first", session_id=RUN), observation("a2", "second", session_id=RUN)]
        )
        first_version, cached_version, text = _cache(db_path)
        assert first_version is not None and cached_version == first_version
        assert text is not None and "first" in text and "second" in text
        promote(store, RUN, [reflection("f1", "durable", session_id=RUN)], [hex_id("a2")], 1)
    version, cached_version, text = _cache(db_path)
    assert version is not None and first_version is not None and version > first_version
    assert cached_version == version
    # Only the retained observation is left in the pool once the generation is active.
    assert text is not None and "second" in text and "first" not in text
    assert project(db_path, RUN) == _expected(db_path)


def test_a_write_by_another_writer_makes_the_text_stale_until_the_store_renders_it(tmp_path: Path) -> None:
    db_path = tmp_path / "om.sqlite"
    with Store(db_path) as store:
        commit(store, [observation("a1", "first", session_id=RUN)])
    _raw_insert_observation(db_path, "b1")
    conn = sqlite3.connect(db_path)
    try:
        version = conn.execute(_VERSION_SQL, (RUN,)).fetchone()[0]
        cached = conn.execute(_BUILT_SQL, (RUN,)).fetchone()[0]
        dirty = [r[0] for r in conn.execute("SELECT run_id FROM omray_projection_piece_dirty")]
    finally:
        conn.close()
    assert version > cached and dirty == [RUN]
    # The reader does not use the stale text: the other writer's row is in the projection.
    text = project(db_path, RUN)
    assert "written by another writer b1" in text and text == _expected(db_path)
    with Store(db_path) as store:  # the next transaction renders the dirty session again
        commit(store, [observation("c1", "third", session_id="other")], session_id="other")
    version, cached_version, cached_text = _cache(db_path)
    assert cached_version == version and cached_text is not None and "another writer" in cached_text


def test_a_failed_transaction_leaves_text_and_version_as_they_were(tmp_path: Path) -> None:
    db_path = tmp_path / "om.sqlite"
    with Store(db_path) as store:
        commit(store, [observation("a1", "first", session_id=RUN)])
        before = _cache(db_path)
        with pytest.raises(StorageError), store.atomic():
            commit(store, [observation("a2", "second", session_id=RUN)])
            store._conn().exec_driver_sql("SELECT * FROM no_such_table")
    assert _cache(db_path) == before
    assert "second" not in project(db_path, RUN)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("commit"), st.integers(0, 30), st.integers(0, 5)),
            st.tuples(st.just("promote"), st.integers(0, 30), st.integers(0, 3)),
            st.tuples(st.just("raw"), st.integers(0, 30), st.just(0)),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_projection_equals_the_full_record_rendering_after_any_writes(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int, int]]
) -> None:
    db_path = tmp_path_factory.mktemp("cache") / "om.sqlite"
    written: list[str] = []
    with Store(db_path) as store:
        for number, (kind, minute, count) in enumerate(steps):
            if kind == "commit" or not written:
                batch = [
                    observation(
                        f"{number:02x}{i:02x}",
                        f"note {number}.{i}",
                        timestamp=f"2026-07-26 12:{(minute + i) % 60:02d}",
                        session_id=RUN,
                    )
                    for i in range(count + 1)
                ]
                commit(store, batch)
                written += [o.observation_id for o in batch]
            elif kind == "promote":
                retained = written[: count + 1]
                promote(
                    store,
                    RUN,
                    [reflection(f"f{number:02x}", f"fact {number}", session_id=RUN)],
                    retained,
                    minute % 4,
                    generation_id=hex_id(f"9{number:02x}"),
                )
            else:
                _raw_insert_observation(db_path, f"7{number:02x}")
            expected = _expected(db_path)
            assert project(db_path, RUN) == expected
            if kind != "raw":  # the Store just rendered the pieces again: they are current and exact
                version, built, text = _cache(db_path)
                assert built == version and text == _lines_text(db_path)
