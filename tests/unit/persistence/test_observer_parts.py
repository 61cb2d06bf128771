"""Observer part commits and their idempotency/conflict rules (reference §7.8, §4.4)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from persistence.reads.memory_reader import MemoryReader, select_coverage
from persistence.writers.store import Store
from protocol.errors import ConflictError, InvalidPayloadError, StorageError
from protocol.records import ActivityRecord
from tests.unit.persistence.builders import COVERED_AT, OBSERVER_SCHEMA, RENDERER, make_observation, make_part

RUN = "run-1"


def _rows(db_path: Path, sql: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_zero_observation_part_is_committed_then_noop(store: Store, reader: MemoryReader) -> None:
    part = make_part(RUN, 1, 10)
    first = store.commit_observer_part(part, [])
    assert (first.status, first.observation_count) == ("inserted", 0)
    assert reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) == 10
    again = store.commit_observer_part(part, [])
    assert (again.status, again.observation_count) == ("noop", 0)
    stored = reader.stored_coverage_part(part.coverage_key)
    assert stored is not None and stored.observation_count == 0


def test_observations_take_range_and_time_from_the_part(
    store: Store, reader: MemoryReader, db_path: Path
) -> None:
    part = make_part(RUN, 3, 7, covered_at="2026-07-24T01:02:03+00:00")
    observations = [make_observation(RUN, "one", seq=4), make_observation(RUN, "two", seq=5)]
    result = store.commit_observer_part(part, observations)
    assert (result.status, result.observation_count) == ("inserted", 2)
    stored = reader.all_observations(RUN)
    assert {o.observation_id for o in stored} == {o.observation_id for o in observations}
    for row in stored:
        assert (row.source_start_seq, row.source_end_seq) == (3, 7)
        assert row.created_at == "2026-07-24T01:02:03+00:00"
        assert row.boundary_key == part.chunk_key
    refs = _rows(db_path, "SELECT source_refs_json FROM om_observation ORDER BY content")
    assert refs == [('[{"run_id":"run-1","seq":4}]',), ('[{"run_id":"run-1","seq":5}]',)]
    redelivered = store.commit_observer_part(part, observations)
    assert (redelivered.status, redelivered.observation_count) == ("noop", 2)
    assert reader.memory_counts(RUN).recorded_observations == 2


def test_incompatible_existing_part_conflicts(store: Store) -> None:
    part = make_part(RUN, 1, 2)
    store.commit_observer_part(part, [])
    changed = part.model_copy(update={"part_digest": "f" * 64})
    with pytest.raises(
        ConflictError, match=rf"Coverage conflict for key '{part.coverage_key}': digest mismatch\."
    ):
        store.commit_observer_part(changed, [])


def test_duplicate_observation_with_equal_hash_is_ignored(store: Store, reader: MemoryReader) -> None:
    observation = make_observation(RUN, "same fact")
    store.commit_observer_part(make_part(RUN, 1, 1), [observation])
    store.commit_observer_part(make_part(RUN, 2, 2), [observation, observation])
    assert reader.memory_counts(RUN).recorded_observations == 1
    assert reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) == 2


def test_duplicate_observation_with_other_hash_conflicts_and_writes_nothing(
    store: Store, reader: MemoryReader
) -> None:
    observation = make_observation(RUN, "fact")
    store.commit_observer_part(make_part(RUN, 1, 1), [observation])
    tampered = observation.model_copy(update={"content_hash": "0" * 64})
    fresh = make_observation(RUN, "new fact", seq=2)
    second = make_part(RUN, 2, 2)
    with pytest.raises(ConflictError, match=rf"Observation conflict for id '{observation.observation_id}'"):
        store.commit_observer_part(second, [fresh, tampered])
    assert reader.stored_coverage_part(second.coverage_key) is None
    assert [o.observation_id for o in reader.all_observations(RUN)] == [observation.observation_id]


def test_one_id_twice_in_a_part_with_other_hashes_conflicts_and_writes_nothing(
    store: Store, reader: MemoryReader
) -> None:
    observation = make_observation(RUN, "fact")
    tampered = observation.model_copy(update={"content_hash": "0" * 64})
    part = make_part(RUN, 1, 1)
    with pytest.raises(ConflictError, match=rf"Observation conflict for id '{observation.observation_id}'"):
        store.commit_observer_part(part, [observation, tampered])
    assert reader.stored_coverage_part(part.coverage_key) is None
    assert reader.all_observations(RUN) == []


def test_unique_violation_without_stored_key_conflicts_and_rolls_back(
    store: Store, reader: MemoryReader
) -> None:
    store.commit_observer_part(make_part(RUN, 1, 4, part_index=1, part_count=2, part_text="a"), [])
    # Same chunk and part index, different part text: another coverage key for the same slot.
    rival = make_part(RUN, 1, 4, part_index=1, part_count=2, part_text="b")
    with pytest.raises(ConflictError, match=r"after concurrent insert\."):
        store.commit_observer_part(rival, [make_observation(RUN, "lost", seq=2)])
    assert reader.all_observations(RUN) == []


def test_insert_race_with_compatible_row_is_noop(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    part = make_part(RUN, 1, 3)
    store.commit_observer_part(part, [])
    calls = {"n": 0}
    real = select_coverage

    def first_read_misses(conn: Any, key: str) -> Any:
        calls["n"] += 1
        return None if calls["n"] == 1 else real(conn, key)

    monkeypatch.setattr("persistence.writers.store.select_coverage", first_read_misses)
    result = store.commit_observer_part(part, [])
    assert (result.status, calls["n"]) == ("noop", 2)


def test_observation_of_another_session_is_rejected(store: Store, reader: MemoryReader) -> None:
    with pytest.raises(InvalidPayloadError):
        store.commit_observer_part(make_part(RUN, 1, 1), [make_observation("other", "x")])
    assert reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) is None


def test_outer_atomic_rolls_back_every_grouped_write(store: Store, reader: MemoryReader) -> None:
    activity = ActivityRecord(
        session_id=RUN, job_id="j", stage="observer", current_tokens=5, updated_at=COVERED_AT
    )
    with pytest.raises(RuntimeError), store.atomic():
        store.commit_observer_part(make_part(RUN, 1, 1), [make_observation(RUN, "x")])
        store.upsert_activity(activity)
        raise RuntimeError("boom")
    assert reader.all_observations(RUN) == []
    assert reader.activity(RUN) is None


def test_nested_atomic_failure_only_undoes_the_savepoint(store: Store, reader: MemoryReader) -> None:
    observation = make_observation(RUN, "fact")
    with store.atomic():
        store.commit_observer_part(make_part(RUN, 1, 1), [observation])
        with pytest.raises(ConflictError):
            store.commit_observer_part(
                make_part(RUN, 2, 2), [observation.model_copy(update={"content_hash": "0" * 64})]
            )
    assert reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) == 1
    assert len(reader.all_observations(RUN)) == 1


def test_sqlite_errors_surface_as_storage_errors_without_values(store: Store, db_path: Path) -> None:
    conn = sqlite3.connect(db_path)
    conn.execute("DROP TABLE om_current_activity")
    conn.commit()
    conn.close()
    secret = "secret-memory-text"
    activity = ActivityRecord(
        session_id=RUN, job_id=secret, stage="observer", current_tokens=1, updated_at=COVERED_AT
    )
    with pytest.raises(StorageError) as raised:
        store.upsert_activity(activity)
    assert secret not in str(raised.value)


def test_observe_start_is_pinned_by_the_first_attempt(store: Store) -> None:
    at = "2026-07-23T10:00:00+00:00"
    assert store.pin_observe_start("plan-s1", "s1", "job-a", 10, 40, at) == 10
    # A retry (or the job it was coalesced into) whose coverage start moved on plans from the pin.
    assert store.pin_observe_start("plan-s1", "s1", "job-b", 25, 60, at) == 10
    assert store.pin_observe_start("plan-s2", "s2", "job-c", 41, 50, at) == 41
    assert store.release_observe_start("plan-s1") is True
    assert store.release_observe_start("plan-s1") is False
    assert store.pin_observe_start("plan-s1", "s1", "job-d", 61, 70, at) == 61
