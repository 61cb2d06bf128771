"""Forgetting (issue 33 item 5): a forgotten memory, event or session is gone from exact search, hybrid
search (before any index job), the projection and the transcript at once; nothing else is lost;
forgetting is idempotent, crash-safe, and never undone by a replayed part or a backfill."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.indexer.sync import synchronize
from actors.read.service import memory_search, project
from persistence.semantic import SemanticIndex
from persistence.writers.forget import KILL_POINT_ENV
from persistence.writers.store import Store
from protocol.forget import ForgetRequest
from protocol.records import ObservationRecord, TranscriptEntry
from tests.unit.persistence.builders import make_observation, make_part
from tests.unit.persistence.semantic.conftest import (
    HashEmbedder,
    RecordingWriter,
    hybrid_tool,
    semantic_settings,
)

TS = "2026-07-23 10:00"


def observation(session_id: str, word: str, seq: int) -> ObservationRecord:
    return make_observation(session_id, f"Observed {word} marker", seq=seq)


def transcript(session_id: str, word: str, seq: int) -> TranscriptEntry:
    return TranscriptEntry(
        session_id=session_id,
        seq=seq,
        event_type="agent_command_applied",
        timestamp=TS,
        content=f"User: said {word}tail",
    )


def commit_turn(store: Store, session_id: str, seq: int, word: str) -> str:
    """One part covering event ``seq``: one observation and one transcript row; returns the observation id."""
    obs = observation(session_id, word, seq)
    store.commit_observer_part(
        make_part(session_id, seq, seq, digest_seed=word), [obs], [transcript(session_id, word, seq)]
    )
    return obs.observation_id


def exact_ids(db: Path, query: str) -> set[str]:
    answer = memory_search(db, {"query": query, "mode": "exact", "limit": 50})
    assert answer["ok"] is True, answer
    return {str(item["id"]) for item in answer["results"]}  # type: ignore[union-attr]


def hybrid_ids(db: Path, index: SemanticIndex, embedder: HashEmbedder, query: str) -> set[str]:
    answer = memory_search(
        db, {"query": query, "mode": "hybrid", "limit": 50}, hybrid_search=hybrid_tool(index, embedder)
    )
    assert answer["ok"] is True, answer
    return {str(item["id"]) for item in answer["results"]}  # type: ignore[union-attr]


def sync(index: SemanticIndex, embedder: HashEmbedder) -> None:
    for _ in range(100):
        if synchronize(index, embedder).complete:
            return
    raise AssertionError("index never completed")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "om.sqlite"


def test_forgetting_an_observation_removes_it_from_every_read_path_before_the_index_job(db: Path) -> None:
    store = Store(db)
    keep = commit_turn(store, "s1", 1, "alpha")
    gone = commit_turn(store, "s1", 2, "bravo")
    index = SemanticIndex(db, semantic_settings(), RecordingWriter(store))
    embedder = HashEmbedder()
    sync(index, embedder)
    assert gone in exact_ids(db, "bravo marker") and gone in hybrid_ids(db, index, embedder, "bravo marker")
    assert gone[:12] in project(db, "s1")

    result = store.forget(
        ForgetRequest(session_id="s1", memory_ids=(gone,)), "job-1", "2026-07-23T11:00:00+00:00"
    )

    assert result["observations"] == [gone] and result["unknown"] == []
    assert gone not in exact_ids(db, "bravo")
    assert gone not in hybrid_ids(db, index, embedder, "bravo marker")  # no index job ran yet
    assert gone[:12] not in project(db, "s1") and keep[:12] in project(db, "s1")
    assert keep in exact_ids(db, "alpha marker") and keep in hybrid_ids(db, index, embedder, "alpha marker")
    # The event the observation was written from stays findable (only the observation was forgotten).
    assert exact_ids(db, "bravotail")
    sync(index, embedder)  # the index job rebuilds without it
    assert gone not in hybrid_ids(db, index, embedder, "bravo marker")
    with sqlite3.connect(db) as conn:
        assert conn.execute(
            "SELECT count(*) FROM omray_observation_trigram WHERE observation_id = ?", (gone,)
        ).fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM omray_projection_line WHERE observation_id = ?", (gone,)
        ).fetchone() == (0,)


def test_forgetting_a_session_removes_all_of_it_and_a_replayed_part_or_backfill_never_brings_it_back(
    db: Path,
) -> None:
    store = Store(db)
    first = commit_turn(store, "s1", 1, "alpha")
    commit_turn(store, "s1", 2, "bravo")
    other = commit_turn(store, "s2", 1, "alpha")

    result = store.forget(
        ForgetRequest(session_id="s1", whole_session=True), "job-1", "2026-07-23T11:00:00+00:00"
    )

    assert len(result["observations"]) == 2 and result["transcript_events"] == 2
    assert exact_ids(db, "alpha") == {other} | exact_ids(db, "alphatail") - {other}
    assert not any(item for item in exact_ids(db, "bravo"))
    assert project(db, "s1") == "" and other[:12] in project(db, "s2")
    # Replaying the first part (an observe retry) and backfilling its event write nothing again.
    store.commit_observer_part(
        make_part("s1", 1, 1, digest_seed="alpha"),
        [observation("s1", "alpha", 1)],
        [transcript("s1", "alpha", 1)],
    )
    store.backfill_transcript("s1", [transcript("s1", "bravo", 2)], 1, 2, "2026-07-23T12:00:00+00:00")
    assert first not in exact_ids(db, "alpha marker") and not exact_ids(db, "bravotail")
    with sqlite3.connect(db) as conn:  # coverage stays: the session is never observed again from its events
        assert conn.execute("SELECT count(*) FROM om_coverage WHERE run_id = 's1'").fetchone() == (2,)
        assert conn.execute(
            "SELECT through_seq FROM omray_transcript_through WHERE run_id = 's1'"
        ).fetchone() == (2,)


def test_forgetting_an_event_range_removes_only_those_transcript_rows(db: Path) -> None:
    store = Store(db)
    ids = [commit_turn(store, "s1", seq, word) for seq, word in ((1, "alpha"), (2, "bravo"), (3, "charlie"))]
    result = store.forget(
        ForgetRequest(session_id="s1", event_ranges=((2, 3),)), "job-1", "2026-07-23T11:00:00+00:00"
    )
    assert result["transcript_events"] == 2
    assert exact_ids(db, "alphatail") and not exact_ids(db, "bravotail") and not exact_ids(db, "charlietail")
    assert set(ids) <= exact_ids(db, "marker")  # the observations stay


def test_forgetting_is_idempotent_and_reports_unknown_ids(db: Path) -> None:
    store = Store(db)
    gone = commit_turn(store, "s1", 1, "alpha")
    unknown = "f" * 64
    first = store.forget(
        ForgetRequest(session_id="s1", memory_ids=(gone, unknown)), "job-1", "2026-07-23T11:00:00+00:00"
    )
    second = store.forget(
        ForgetRequest(session_id="s1", memory_ids=(gone, unknown)), "job-2", "2026-07-23T11:00:01+00:00"
    )
    assert first["observations"] == [gone] and first["unknown"] == [unknown]
    assert second["observations"] == [] and second["unknown"] == [unknown]  # already forgotten: not unknown
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM omray_forget_request").fetchone() == (2,)


_KILLED_FORGET = textwrap.dedent(
    """
    import sys
    from persistence.writers.forget import ForgetRequest
    from persistence.writers.store import Store
    request = ForgetRequest(session_id="s1", whole_session=True)
    Store(sys.argv[1]).forget(request, "job-killed", "2026-07-23T11:00:00+00:00")
    """
)


def snapshot(db: Path) -> dict[str, list[tuple[object, ...]]]:
    tables = (
        "om_observation",
        "omray_transcript",
        "omray_projection_line",
        "omray_observation_trigram",
        "omray_transcript_trigram",
        "omray_forgotten",
        "omray_forget_request",
        "om_coverage",
    )
    with sqlite3.connect(db) as conn:
        return {table: sorted(conn.execute(f"SELECT * FROM {table}").fetchall()) for table in tables}


def test_a_process_killed_mid_forget_leaves_the_database_as_before_and_the_forget_can_run_again(
    db: Path,
) -> None:
    store = Store(db)
    commit_turn(store, "s1", 1, "alpha")
    commit_turn(store, "s1", 2, "bravo")
    index = SemanticIndex(db, semantic_settings(), RecordingWriter(store))
    embedder = HashEmbedder()
    sync(index, embedder)
    before = snapshot(db)
    env = {**os.environ, KILL_POINT_ENV: "after_delete", "PYTHONPATH": str(Path(__file__).parents[3])}
    done = subprocess.run([sys.executable, "-c", _KILLED_FORGET, str(db)], env=env, check=False, timeout=120)
    assert done.returncode == 137  # killed inside the transaction, after its deletes
    assert snapshot(db) == before  # all or nothing: nothing was removed
    assert exact_ids(db, "bravo marker") and hybrid_ids(db, index, embedder, "bravo marker")

    env.pop(KILL_POINT_ENV)
    done = subprocess.run([sys.executable, "-c", _KILLED_FORGET, str(db)], env=env, check=False, timeout=120)
    assert done.returncode == 0
    after = snapshot(db)
    assert after["om_observation"] == [] and after["omray_transcript"] == [] and after["omray_forget_request"]
    assert not exact_ids(db, "marker") and not hybrid_ids(db, index, embedder, "bravo marker")


# --- property: random interleavings of observe, forget and index against a pure model -------------

WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
SESSIONS = ("s1", "s2")

operation = st.one_of(
    st.tuples(st.just("observe"), st.sampled_from(SESSIONS), st.sampled_from(WORDS)),
    st.tuples(st.just("forget_memory"), st.integers(0, 50)),
    st.tuples(st.just("forget_session"), st.sampled_from(SESSIONS)),
    st.tuples(st.just("forget_events"), st.sampled_from(SESSIONS), st.integers(1, 6), st.integers(0, 3)),
    st.tuples(st.just("replay"), st.integers(0, 50)),
    st.tuples(st.just("index")),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=st.lists(operation, min_size=1, max_size=14))
def test_a_forgotten_id_is_never_returned_and_nothing_else_is_lost(
    tmp_path_factory: pytest.TempPathFactory, operations: list[tuple[object, ...]]
) -> None:
    db = tmp_path_factory.mktemp("forget") / "om.sqlite"
    store = Store(db)
    index = SemanticIndex(db, semantic_settings(), RecordingWriter(store))
    embedder = HashEmbedder()
    # The pure model: live observations (id -> (session, word)), live transcript events, forgotten ids/events.
    live: dict[str, tuple[str, str]] = {}
    events: dict[tuple[str, int], str] = {}
    forgotten: set[str] = set()
    forgotten_events: set[tuple[str, int]] = set()
    committed: list[tuple[str, int, str]] = []
    next_seq = dict.fromkeys(SESSIONS, 0)
    indexed = False
    for number, op in enumerate(operations):
        job = f"job-{number}"
        if op[0] == "observe":
            session_id, word = str(op[1]), str(op[2])
            next_seq[session_id] += 1
            seq = next_seq[session_id]
            memory_id = commit_turn(store, session_id, seq, word)
            committed.append((session_id, seq, word))
            if memory_id not in forgotten:
                live[memory_id] = (session_id, word)
            if (session_id, seq) not in forgotten_events:
                events[(session_id, seq)] = word
        elif op[0] == "replay" and committed:
            session_id, seq, word = committed[int(op[1]) % len(committed)]
            commit_turn(store, session_id, seq, word)  # an observe retry of a committed part: a no-op
        elif op[0] == "forget_memory" and (live or forgotten):
            pool = sorted(live) + sorted(forgotten)
            memory_id = pool[int(op[1]) % len(pool)]
            session_id = live[memory_id][0] if memory_id in live else "s1"
            store.forget(
                ForgetRequest(session_id=session_id, memory_ids=(memory_id,)),
                job,
                "2026-07-23T11:00:00+00:00",
            )
            if memory_id in live and live[memory_id][0] == session_id:
                del live[memory_id]
                forgotten.add(memory_id)
        elif op[0] == "forget_session":
            session_id = str(op[1])
            store.forget(
                ForgetRequest(session_id=session_id, whole_session=True), job, "2026-07-23T11:00:00+00:00"
            )
            for memory_id in [key for key, value in live.items() if value[0] == session_id]:
                del live[memory_id]
                forgotten.add(memory_id)
            for key in [key for key in events if key[0] == session_id]:
                del events[key]
                forgotten_events.add(key)
            forgotten_events.update((session_id, seq) for seq in range(1, next_seq[session_id] + 1))
        elif op[0] == "forget_events":
            session_id, start, length = str(op[1]), int(op[2]), int(op[3])  # type: ignore[call-overload]
            store.forget(
                ForgetRequest(session_id=session_id, event_ranges=((start, start + length),)),
                job,
                "2026-07-23T11:00:00+00:00",
            )
            for seq in range(start, start + length + 1):
                events.pop((session_id, seq), None)
                forgotten_events.add((session_id, seq))
        elif op[0] == "index":
            sync(index, embedder)
            indexed = True
    for word in WORDS:
        found = exact_ids(db, f"{word} marker")
        expected = {memory_id for memory_id, (_run, w) in live.items() if w == word}
        assert found == expected  # nothing forgotten returned, nothing else lost
        tail_hits = memory_search(db, {"query": f"said {word}tail", "mode": "exact", "limit": 50})
        seqs = {(item["session_id"], item["source"]["seq_start"]) for item in tail_hits["results"]}  # type: ignore[index, union-attr]
        assert seqs == {key for key, w in events.items() if w == word}
        if indexed:
            answer = memory_search(
                db,
                {"query": f"{word} marker", "mode": "hybrid", "limit": 50},
                hybrid_search=hybrid_tool(index, embedder),
            )
            if answer["ok"] is False:
                assert answer["error"] == "index_building"  # indexed before the first memory: no vectors yet
            else:
                assert not {str(item["id"]) for item in answer["results"]} & forgotten  # type: ignore[union-attr]
    for session_id in SESSIONS:
        text = project(db, session_id)
        assert not any(memory_id[:12] in text for memory_id in forgotten)
        assert all(memory_id[:12] in text for memory_id, (run, _w) in live.items() if run == session_id)


def _database_bytes(db: Path) -> bytes:
    """The database file and its WAL and shared-memory files, as they are on disk."""
    return b"".join(path.read_bytes() for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if path.exists())


def test_forgotten_text_leaves_the_database_file_and_its_wal(tmp_path: Path) -> None:
    """No copy of a forgotten memory's text stays on disk (issue 40 item 13): deleted pages are
    overwritten (``secure_delete``) and the WAL is checkpointed and truncated after the forget."""
    db = tmp_path / "om.sqlite"
    with Store(db) as store:
        forgotten = commit_turn(store, "s1", 1, "zanzibarquux")
        commit_turn(store, "s1", 2, "keptword")
        assert b"zanzibarquux" in _database_bytes(db)
        store.forget(
            ForgetRequest(session_id="s1", memory_ids=(forgotten,), event_ranges=((1, 1),)), "job-1", TS
        )
        on_disk = _database_bytes(db)
        assert b"zanzibarquux" not in on_disk
        assert b"keptword" in on_disk


def _trigrams(word: str) -> list[bytes]:
    return [word[i : i + 3].encode() for i in range(len(word) - 2)]


@pytest.mark.parametrize("whole_session", [False, True])
def test_no_trigram_of_forgotten_text_stays_in_the_exact_search_index(
    tmp_path: Path, whole_session: bool
) -> None:
    """An FTS5 delete only appends a marker: the trigrams (with positions, so the text can be read
    back) stayed in the index's older segments, in the file, after the forget (issue 40 item 13)."""
    db = tmp_path / "om.sqlite"
    marker = "zqxjvwkpyf"  # trigrams that no kept word shares
    with Store(db) as store:
        forgotten = commit_turn(store, "s1", 1, marker)
        for seq in range(2, 12):
            commit_turn(store, "s2" if whole_session else "s1", seq, f"keptword{seq}")
        assert all(tri in _database_bytes(db) for tri in _trigrams(marker))
        request = (
            ForgetRequest(session_id="s1", whole_session=True)
            if whole_session
            else ForgetRequest(session_id="s1", memory_ids=(forgotten,), event_ranges=((1, 1),))
        )
        store.forget(request, "job-1", TS)
        on_disk = _database_bytes(db)
        assert [tri for tri in _trigrams(marker) if tri in on_disk] == []
        assert exact_ids(db, "keptword5")  # the index still answers
        assert not exact_ids(db, marker)
