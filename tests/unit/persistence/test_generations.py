"""Active candidate set (reference §8), generation claims (§9.3) and promotion (§9.8)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from persistence.reads.memory_reader import MemoryReader
from persistence.search.reader import SearchReader
from persistence.writers.store import NotFoundError, Store
from protocol.errors import ConflictError, InvalidPayloadError, StorageError
from protocol.identities import observation_set_hash
from protocol.records import ObservationRecord
from tests.unit.persistence.builders import (
    MODEL,
    REFLECTOR_SCHEMA,
    make_observation,
    make_part,
    make_reflection,
)

RUN = "run-1"
T0 = "2026-07-23T12:00:00+00:00"
T1 = "2026-07-23T12:01:35+00:00"


def _commit(store: Store, start: int, end: int, *observations: ObservationRecord) -> None:
    store.commit_observer_part(make_part(RUN, start, end), list(observations))


def _claim(store: Store, gen: str, required_end_seq: int = 3, now: str = T0, set_hash: str = "s" * 64) -> str:
    return store.claim_generation(gen, RUN, set_hash, MODEL, REFLECTOR_SCHEMA, 1, required_end_seq, now)


def _generation_row(db_path: Path, gen: str) -> tuple[object, ...]:
    conn = sqlite3.connect(db_path)
    try:
        row = conn.execute(
            "SELECT status, failure_code, created_at, completed_at, threshold_idempotency_key"
            " FROM om_memory_generation WHERE generation_id = ?",
            (gen,),
        ).fetchone()
        assert row is not None
        return tuple(row)
    finally:
        conn.close()


def _count(db_path: Path, table: str) -> int:
    conn = sqlite3.connect(db_path)
    try:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


# --- active candidate set ------------------------------------------------------------------


def test_without_generation_all_observations_are_active(store: Store, reader: MemoryReader) -> None:
    late = make_observation(RUN, "late", seq=2, timestamp="2026-07-23 11:00")
    early = make_observation(RUN, "early", seq=1, timestamp="2026-07-23 09:00")
    _commit(store, 1, 4, late, early)
    _commit(store, 5, 6)
    store.commit_observer_part(make_part("other", 1, 1), [make_observation("other", "elsewhere")])
    active = reader.active_candidate_set(RUN)
    assert [o.content for o in active.observations] == ["early", "late"]
    assert active.observation_ids == tuple(sorted([late.observation_id, early.observation_id]))
    assert active.observation_set_hash == observation_set_hash(RUN, active.observation_ids)
    assert active.max_source_end_seq == 4


def test_equal_timestamps_are_ordered_by_id(store: Store, reader: MemoryReader) -> None:
    first, second = make_observation(RUN, "a", seq=1), make_observation(RUN, "b", seq=1)
    _commit(store, 1, 1, first, second)
    ids = [o.observation_id for o in reader.active_candidate_set(RUN).observations]
    assert ids == sorted([first.observation_id, second.observation_id])


def test_empty_session_has_empty_set(reader: MemoryReader, store: Store) -> None:
    active = reader.active_candidate_set(RUN)
    assert (active.observations, active.max_source_end_seq) == ((), 0)
    assert active.observation_set_hash == observation_set_hash(RUN, [])


def test_generation_keeps_retained_and_newer_and_never_resurrects_dropped(
    store: Store, reader: MemoryReader
) -> None:
    kept = make_observation(RUN, "kept", seq=1)
    dropped = make_observation(RUN, "dropped", seq=2)
    _commit(store, 1, 3, kept, dropped)
    assert _claim(store, "g" * 64, required_end_seq=3) == "claimed"
    reflection = make_reflection(RUN, "durable", (kept.observation_id,))
    assert store.promote_generation("g" * 64, RUN, [reflection], [kept.observation_id], T1) == "promoted"
    after = make_observation(RUN, "after", seq=4)
    _commit(store, 4, 4, after)
    active = reader.active_candidate_set(RUN)
    assert {o.content for o in active.observations} == {"kept", "after"}
    assert active.max_source_end_seq == 4
    # a later redelivery of the dropped observation does not bring it back
    _commit(store, 5, 5, dropped)
    assert dropped.observation_id not in reader.active_candidate_set(RUN).observation_ids
    counts = reader.memory_counts(RUN)
    assert (counts.recorded_observations, counts.visible_retained_observations) == (3, 1)


def test_generation_without_required_end_seq_means_all(
    store: Store, reader: MemoryReader, db_path: Path
) -> None:
    _commit(store, 1, 2, make_observation(RUN, "a"), make_observation(RUN, "b"))
    _claim(store, "g" * 64)
    store.promote_generation("g" * 64, RUN, [], [], T1)
    conn = sqlite3.connect(db_path)
    conn.execute("UPDATE om_memory_generation SET required_end_seq = NULL")
    conn.commit()
    conn.close()
    assert len(reader.active_candidate_set(RUN).observations) == 2


# --- claims --------------------------------------------------------------------------------


def test_claim_outcomes_follow_the_row_status(store: Store, db_path: Path) -> None:
    gen = "a" * 64
    assert _claim(store, gen) == "claimed"
    assert _generation_row(db_path, gen) == ("running", None, T0, None, gen)
    assert _claim(store, gen, now=T1) == "already_running"
    assert store.fail_generation(gen, "transient_runtime", T1) is True
    assert _generation_row(db_path, gen) == ("failed", "transient_runtime", T0, T1, gen)
    assert store.fail_generation(gen, "transient_runtime", T1) is False  # only running rows change
    reclaim_time = "2026-07-23T12:05:00+00:00"
    assert _claim(store, gen, now=reclaim_time) == "claimed"
    assert _generation_row(db_path, gen) == ("running", None, reclaim_time, None, gen)
    assert store.succeed_generation_without_promotion(gen, T1) is True
    assert _claim(store, gen) == "already_succeeded"
    assert store.succeed_generation_without_promotion(gen, T1) is False


def test_under_threshold_success_does_not_move_the_pointer(store: Store, reader: MemoryReader) -> None:
    _claim(store, "a" * 64)
    store.succeed_generation_without_promotion("a" * 64, T1)
    assert reader.active_generation(RUN) is None


def test_claim_unique_violation_maps_per_reference(store: Store, db_path: Path) -> None:
    # A legacy row whose idempotency key equals the new id makes the insert violate the unique index.
    conn = sqlite3.connect(db_path)
    conn.execute(
        "INSERT INTO om_memory_generation (generation_id, run_id, trigger_kind, status, observation_set_hash,"
        " reflector_model, reflector_schema_version, threshold_idempotency_key, created_at)"
        " VALUES ('legacy', ?, 'threshold', 'running', ?, 'm', 'v', ?, ?)",
        (RUN, "s" * 64, "b" * 64, T0),
    )
    conn.execute(
        "INSERT INTO om_memory_generation (generation_id, run_id, trigger_kind, status, observation_set_hash,"
        " reflector_model, reflector_schema_version, threshold_idempotency_key, created_at)"
        " VALUES ('legacy2', ?, 'threshold', 'failed', ?, 'm', 'v', ?, ?)",
        (RUN, "t" * 64, "c" * 64, T0),
    )
    conn.commit()
    conn.close()
    assert _claim(store, "b" * 64, set_hash="s" * 64) == "already_running"
    assert _claim(store, "c" * 64, set_hash="t" * 64) == "conflict"


def test_failure_codes_must_be_category_codes(store: Store) -> None:
    _claim(store, "a" * 64)
    with pytest.raises(InvalidPayloadError):
        store.fail_generation("a" * 64, "Traceback: something broke", T1)


# --- promotion -----------------------------------------------------------------------------


def test_promotion_links_reflections_retained_and_pointer(
    store: Store, reader: MemoryReader, db_path: Path
) -> None:
    obs = make_observation(RUN, "o")
    _commit(store, 1, 3, obs)
    first = make_reflection(RUN, "first", (obs.observation_id,))
    _claim(store, "a" * 64, set_hash="1" * 64)
    assert store.promote_generation("a" * 64, RUN, [first], [obs.observation_id], T1) == "promoted"
    second = make_reflection(RUN, "second", (obs.observation_id,))
    _claim(store, "b" * 64, set_hash="2" * 64)
    later = "2026-07-23T13:00:00+00:00"
    assert store.promote_generation("b" * 64, RUN, [first, second], [obs.observation_id], later) == "promoted"
    generation = reader.active_generation(RUN)
    assert generation is not None and generation.generation_id == "b" * 64
    assert (generation.status, generation.completed_at) == ("succeeded", later)
    active = reader.active_reflections(RUN)
    assert [(r.content, r.position) for r in active] == [("first", 0), ("second", 1)]
    assert active[0].supporting_observation_ids == (obs.observation_id,)
    assert _count(db_path, "om_reflection") == 2  # prior reflection re-linked, not duplicated
    conn = sqlite3.connect(db_path)
    stored = dict(conn.execute("SELECT content, observation_set_hash FROM om_reflection").fetchall())
    conn.close()
    assert stored == {"first": "1" * 64, "second": "2" * 64}
    assert reader.memory_counts(RUN).recorded_reflections == 2


def test_promotion_redelivery_is_noop(store: Store, db_path: Path) -> None:
    _claim(store, "a" * 64)
    reflection = make_reflection(RUN, "r")
    assert store.promote_generation("a" * 64, RUN, [reflection], [], T1) == "promoted"
    assert store.promote_generation("a" * 64, RUN, [reflection], [], T1) == "noop"
    assert _count(db_path, "om_generation_reflection") == 1


def test_promotion_preconditions(store: Store) -> None:
    with pytest.raises(NotFoundError, match=r"Generation 'x' not found for success commit\."):
        store.promote_generation("x", RUN, [], [], T1)
    _claim(store, "a" * 64)
    store.fail_generation("a" * 64, "stale_observation_set", T1)
    with pytest.raises(ConflictError, match=r"is 'failed'; cannot commit success\."):
        store.promote_generation("a" * 64, RUN, [], [], T1)
    _claim(store, "b" * 64, set_hash="9" * 64)
    with pytest.raises(ConflictError, match="identity mismatch on success commit"):
        store.promote_generation("b" * 64, "another-run", [], [], T1)
    with pytest.raises(InvalidPayloadError):
        store.promote_generation("b" * 64, RUN, [], ["o", "o"], T1)


def test_failed_promotion_leaves_nothing_written(store: Store, reader: MemoryReader, db_path: Path) -> None:
    existing = make_reflection(RUN, "existing")
    _claim(store, "a" * 64, set_hash="1" * 64)
    store.promote_generation("a" * 64, RUN, [existing], [], T1)
    before = {t: _count(db_path, t) for t in ("om_reflection", "om_generation_reflection")}
    _claim(store, "b" * 64, set_hash="2" * 64)
    fresh = make_reflection(RUN, "fresh")
    clash = existing.model_copy(update={"content": "different text"})
    with pytest.raises(ConflictError, match=rf"Reflection conflict for id '{existing.reflection_id}'\."):
        store.promote_generation("b" * 64, RUN, [fresh, clash], ["o1"], T1)
    assert {t: _count(db_path, t) for t in before} == before
    assert _count(db_path, "om_generation_retained_observation") == 0
    assert _generation_row(db_path, "b" * 64)[0] == "running"
    generation = reader.active_generation(RUN)
    assert generation is not None and generation.generation_id == "a" * 64


def test_redelivered_attempt_takes_over_an_orphaned_running_generation(store: Store, db_path: Path) -> None:
    gen = "d" * 64
    assert _claim(store, gen) == "claimed"
    # A first delivery that finds the row running backs off; a redelivered attempt takes it over.
    assert _claim(store, gen, now="2026-07-26T13:00:00+00:00") == "already_running"
    taken = store.claim_generation(
        gen, RUN, "s" * 64, MODEL, REFLECTOR_SCHEMA, 1, 3, "2026-07-26T14:00:00+00:00", take_over_running=True
    )
    assert taken == "claimed"
    status, failure, created_at, completed_at, _ = _generation_row(db_path, gen)
    assert (status, failure, created_at, completed_at) == ("running", None, "2026-07-26T14:00:00+00:00", None)
    assert store.succeed_generation_without_promotion(gen, "2026-07-26T14:01:00+00:00")
    again = store.claim_generation(
        gen, RUN, "s" * 64, MODEL, REFLECTOR_SCHEMA, 1, 3, "2026-07-26T15:00:00+00:00", take_over_running=True
    )
    assert again == "already_succeeded"  # a finished generation is never taken over


def test_a_replayed_claim_is_still_claimed(store: Store, db_path: Path) -> None:
    # The worker's durable StoreProxy repeats a call whose StoreActor died after committing it.
    # The replay (same arguments, same claim time) must not turn this attempt's own claim into
    # ``already_running``, which would end the job as a no-op and leave the generation running
    # for good (its set is then never dispatched again).
    gen = "e" * 64
    assert _claim(store, gen, now=T0) == "claimed"
    assert _claim(store, gen, now=T0) == "claimed"
    assert _generation_row(db_path, gen) == ("running", None, T0, None, gen)
    assert _claim(store, gen, now=T1) == "already_running"  # a different claimant backs off
    assert store.fail_generation(gen, "transient_runtime", T1)
    reclaim = "2026-07-23T12:05:00+00:00"
    assert _claim(store, gen, now=reclaim) == "claimed"
    assert _claim(store, gen, now=reclaim) == "claimed"  # a replayed reclaim too


def test_damaged_support_ids_fail_the_pipelines_read_and_show_empty_in_the_read_tools(
    store: Store, reader: MemoryReader, db_path: Path
) -> None:
    obs = make_observation(RUN, "o")
    _commit(store, 1, 3, obs)
    _claim(store, "a" * 64, set_hash="1" * 64)
    assert store.promote_generation("a" * 64, RUN, [make_reflection(RUN, "r", (obs.observation_id,))], [], T1)
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("UPDATE om_reflection SET supporting_observation_ids_json = 'not json'")
    conn.close()
    # The pipelines (observer, reflector) must not work from a damaged row: their read fails loudly.
    with pytest.raises(StorageError):
        reader.active_reflections(RUN)
    # The read tools (status, view) show the reflection with no support ids instead of failing.
    [shown] = SearchReader(db_path).active_memory(RUN).reflections
    assert (shown.content, shown.supporting_observation_ids) == ("r", ())
