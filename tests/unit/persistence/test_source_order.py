"""Observations in source order everywhere: projection, memory_view, search (issue #30, item 3).

The order is the first event an observation cites in its own session, then the order it was
recorded in; never the id within a minute. Hypothesis draws timestamps from a few minutes (so
that ties are common) and refs from a few seqs, commits the observations in the drawn order in
parts, and checks every reader against the rule computed here in plain Python.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.read.projector import render_active_memory
from actors.read.service import memory_search, memory_view, project
from persistence.reads import projection as projection_queries
from persistence.reads.memory_reader import observation_from_row
from persistence.reads.projection_sql import FIRST_SOURCE_SEQ_SQL, OBSERVATION_LINE_TABLE
from persistence.search.reader import SearchReader
from persistence.writers.store import Store
from protocol.records import ObservationRecord, SourceRef
from tests.unit.actors.read.factories import hex_id
from tests.unit.persistence.builders import make_part

RUN = "s1"
MINUTES = ("2026-07-26 12:00", "2026-07-26 12:01", "2026-07-26 11:59")


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    # Pieces of three lines, so that a drawn session spans several pieces.
    monkeypatch.setattr(projection_queries, "PIECE_LINES", 3)


DrawnObservation = tuple[str, tuple[tuple[str, int], ...]]
"""(minute, refs) of one observation."""

OBSERVATIONS = st.lists(
    st.tuples(
        st.sampled_from(MINUTES),
        st.lists(st.tuples(st.sampled_from([RUN, RUN, RUN, "other"]), st.integers(1, 30)), max_size=3).map(
            tuple
        ),
    ),
    min_size=1,
    max_size=12,
)
PART_SIZES = st.lists(st.integers(1, 4), min_size=1, max_size=12)


def _record(index: int, minute: str, refs: tuple[tuple[str, int], ...], part_start: int) -> ObservationRecord:
    sources = {SourceRef(run_id=run, seq=seq) for run, seq in refs}
    return ObservationRecord(
        observation_id=hex_id(f"{(index * 2654435761) % 2**32:08x}"),  # ids in no particular order
        session_id=RUN,
        boundary_key="b" * 64,
        source_start_seq=part_start,
        source_end_seq=max([part_start, *(seq for _, seq in refs)]),
        source_refs=tuple(sorted(sources, key=lambda ref: (ref.run_id, ref.seq))),
        content=f"note {index} of the session",
        content_hash=f"{index:064x}",
        relevance="medium",
        timestamp=minute,
        token_count=5,
        observer_model="local/test",
        observer_schema_version="1",
        created_at="2026-07-26T12:00:00+00:00",
    )


def _commit_in_parts(
    db_path: Path, drawn: list[DrawnObservation], sizes: list[int]
) -> list[ObservationRecord]:
    """Commit the drawn observations in order, as consecutive parts; returns them as recorded."""
    records: list[ObservationRecord] = []
    with Store(db_path) as store:
        index, part = 0, 0
        while index < len(drawn):
            size = sizes[part % len(sizes)]
            part += 1
            batch = [
                _record(index + n, minute, refs, part_start=part)
                for n, (minute, refs) in enumerate(drawn[index : index + size])
            ]
            store.commit_observer_part(make_part(RUN, part, part, digest_seed=f"p{part}"), batch)
            records.extend(batch)
            index += size
    return records


def _expected_order(records: list[ObservationRecord]) -> list[str]:
    """The rule, computed independently: own-session first seq (else part start), then recorded."""

    def first_seq(record: ObservationRecord) -> int:
        own = [ref.seq for ref in record.source_refs if ref.run_id == RUN]
        return min(own) if own else record.source_start_seq

    ranked = sorted(enumerate(records), key=lambda pair: (first_seq(pair[1]), pair[0]))
    return [record.observation_id for _, record in ranked]


def _shown_ids(text: str) -> list[str]:
    body = text.split("## Observations\n", 1)[1]
    return [line[1:13] for line in body.splitlines()]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=OBSERVATIONS, sizes=PART_SIZES)
def test_every_reader_lists_observations_in_source_order(
    tmp_path_factory: pytest.TempPathFactory, drawn: list[DrawnObservation], sizes: list[int]
) -> None:
    db_path = tmp_path_factory.mktemp("order") / "om.sqlite"
    records = _commit_in_parts(db_path, drawn, sizes)
    expected = _expected_order(records)
    short = [observation_id[:12] for observation_id in expected]

    # Compaction's path (pieces rendered at write time), the lines, and the rows themselves.
    assert _shown_ids(project(db_path, RUN)) == short
    conn = sqlite3.connect(db_path)
    try:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        lines = projection_queries.render_observation_text(conn, RUN, names)
        rows = projection_queries.render_observation_text(conn, RUN, names - {OBSERVATION_LINE_TABLE})
        slim = projection_queries.select_projection(conn, RUN)
    finally:
        conn.close()
    assert [line[1:13] for line in lines.splitlines()] == short
    assert rows == lines
    assert [o.observation_id for o in slim.observations] == expected
    # Full records (the Reflector's candidate order) and the pure renderer agree.
    memory = SearchReader(db_path).active_memory(RUN)
    assert [o.observation_id for o in memory.candidates.observations] == expected
    assert render_active_memory(memory.reflections, memory.candidates.observations) == project(db_path, RUN)
    # memory_view lists them the same way.
    markdown, view = memory_view(db_path, RUN)
    assert [item["id"] for item in view["observations"]] == expected  # type: ignore[attr-defined]
    assert [line[2:14] for line in markdown.splitlines() if line.startswith("`[")] == short
    # Search: newest minute first; within one minute, source order, the latest first.
    answer = memory_search(db_path, {"query": "of the session", "limit": 50})
    found = [item["id"] for item in answer["results"]]  # type: ignore[union-attr]
    by_id = {record.observation_id: record for record in records}
    position = {observation_id: rank for rank, observation_id in enumerate(expected)}
    want = sorted(expected, key=lambda i: (by_id[i].timestamp, position[i]), reverse=True)
    assert found == want


def test_php_rows_keep_source_order_and_never_fail_the_trigger(tmp_path: Path) -> None:
    # Rows another writer inserts with plain SQL: the PHP `runId` spelling, a seq as text, refs of
    # another session only, and refs that are not JSON at all. The insert never fails, and the
    # SQL rule agrees with the records' rule wherever the refs can be read.
    db_path = tmp_path / "om.sqlite"
    _commit_in_parts(db_path, [("2026-07-26 12:00", ((RUN, 20),))], [1])
    odd_refs = {
        "a1": '[{"runId":"s1","seq":7}]',
        "a2": '[{"run_id":"s1","seq":"3"},{"run_id":"s1","seq":12}]',
        "a3": '[{"run_id":"other","seq":1}]',
        "a4": "not json",
        "a5": '{"run_id":"s1","seq":2}',
        "a6": '[{"run_id":"s1","seq":0},{"run_id":"s1","seq":9.7},true,"x"]',
    }
    conn = sqlite3.connect(db_path)
    try:
        with conn:
            template = conn.execute("SELECT * FROM om_observation").fetchone()
            columns = [c[1] for c in conn.execute("PRAGMA table_info(om_observation)")]
            for prefix, refs in odd_refs.items():
                values = dict(zip(columns, template, strict=True))
                values |= {
                    "observation_id": hex_id(prefix),
                    "content": f"php row {prefix}",
                    "source_refs_json": refs,
                    "source_start_seq": 5,
                }
                marks = ", ".join("?" * len(values))
                conn.execute(
                    f"INSERT INTO om_observation ({', '.join(values)}) VALUES ({marks})",
                    tuple(values.values()),
                )
        first = FIRST_SOURCE_SEQ_SQL.format(row="")
        sql_seqs = dict(conn.execute(f"SELECT observation_id, {first} FROM om_observation").fetchall())
    finally:
        conn.close()
    assert sql_seqs[hex_id("a1")] == 7 and sql_seqs[hex_id("a2")] == 3
    assert sql_seqs[hex_id("a3")] == 5 and sql_seqs[hex_id("a4")] == 5 and sql_seqs[hex_id("a5")] == 5
    assert sql_seqs[hex_id("a6")] == 9
    shown = _shown_ids(project(db_path, RUN))
    assert shown == [hex_id(p)[:12] for p in ("a2", "a3", "a4", "a5", "a1", "a6")] + [shown[-1]]
    # Refs that are not JSON cannot be read as records at all (a StorageError, as before); every
    # other row's rule in Python is the SQL's.
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("DELETE FROM om_observation WHERE observation_id = ?", (hex_id("a4"),))
    conn.close()
    readable = SearchReader(db_path).active_memory(RUN).candidates.observations
    assert len(readable) == 6
    for record in readable:
        assert record.first_source_seq == sql_seqs[record.observation_id]


@settings(max_examples=200, deadline=None)
@given(
    refs=st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "run_id": st.sampled_from([RUN, "other", ""]),
                    "seq": st.one_of(st.integers(-2, 40), st.floats(0, 40)),
                }
            ),
            st.fixed_dictionaries({"runId": st.sampled_from([RUN, "other"]), "seq": st.integers(1, 40)}),
            st.fixed_dictionaries({"run_id": st.just(RUN), "seq": st.sampled_from(["4", "17", "x"])}),
        ),
        max_size=5,
    ),
    start=st.integers(1, 50),
)
def test_sql_first_source_seq_equals_the_records_rule(refs: list[dict[str, object]], start: int) -> None:
    raw = json.dumps(refs)
    conn = sqlite3.connect(":memory:")
    try:
        row = conn.execute(
            f"SELECT {FIRST_SOURCE_SEQ_SQL.format(row='t.')} FROM"
            " (SELECT ? AS source_refs_json, ? AS run_id, ? AS source_start_seq) t",
            (raw, RUN, start),
        ).fetchone()
    finally:
        conn.close()

    class _Row:
        def _asdict(self) -> dict[str, object]:
            return {
                "observation_id": "0" * 64,
                "run_id": RUN,
                "boundary_key": "b",
                "source_start_seq": start,
                "source_end_seq": start,
                "source_refs_json": raw,
                "content": "c",
                "content_hash": "h",
                "relevance": "low",
                "timestamp": "2026-07-26 12:00",
                "token_count": 1,
                "observer_model": "m",
                "observer_schema_version": "1",
                "created_at": "x",
            }

    assert row[0] == observation_from_row(_Row()).first_source_seq  # type: ignore[arg-type]


def test_a_database_of_the_minute_order_is_migrated_to_source_order(tmp_path: Path) -> None:
    from persistence.database import migrations, omray_tables

    db_path = tmp_path / "om.sqlite"
    drawn: list[DrawnObservation] = [
        ("2026-07-26 12:00", ((RUN, 15), (RUN, 19))),
        ("2026-07-26 12:00", ((RUN, 7), (RUN, 9))),
        ("2026-07-26 11:00", ((RUN, 30),)),
    ]
    records = _commit_in_parts(db_path, drawn, [3])
    # Back to the shape omray_006/omray_008 left (lines and pieces keyed by minute, then id).
    step = next(m for m in migrations.OMRAY_MIGRATIONS if m.version == "omray_012_projection_source_order")
    conn = sqlite3.connect(db_path)
    with conn:
        for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name LIKE 'omray_projection_%' AND type IN"
            " ('trigger', 'table') AND name NOT LIKE 'sqlite_%' ORDER BY type = 'table'"
        ).fetchall():
            conn.execute(f"DROP {kind.upper()} IF EXISTS {name}")
        for statement in (*omray_tables.observation_line_ddl_v1(), *omray_tables.projection_cache_ddl_v1()):
            conn.execute(statement)
        conn.execute("DELETE FROM om_schema_version WHERE version = ?", (step.version,))
    conn.close()
    # Before any writer migrates it, a reader renders from om_observation in source order: it
    # never takes the old tables (minute order) for its own.
    assert _shown_ids(project(db_path, RUN)) == [i[:12] for i in _expected_order(records)]
    with Store(db_path) as store:  # migrates
        assert _shown_ids(project(db_path, RUN)) == [i[:12] for i in _expected_order(records)]
        more = [_record(9, "2026-07-26 10:00", ((RUN, 1),), part_start=2)]
        store.commit_observer_part(make_part(RUN, 2, 2, digest_seed="p-more"), more)
    expected = [i[:12] for i in _expected_order([*records, *more])]
    assert _shown_ids(project(db_path, RUN)) == expected
    conn = sqlite3.connect(db_path)
    try:
        built = conn.execute(
            "SELECT count(*) FROM omray_projection_piece_built WHERE run_id = ?", (RUN,)
        ).fetchone()
    finally:
        conn.close()
    assert built[0] == 1  # the change rendered the session's pieces again, from the start
