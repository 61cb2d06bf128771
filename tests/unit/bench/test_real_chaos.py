"""The pure parts of ``omray bench chaos --real``: kill schedule, memory snapshot and comparison, workload."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.chaos_workload import Workload, last_seqs, request_kind, session_turns
from bench.queue_bench import BenchError
from bench.real_chaos import KILL_KINDS, TRIGGER_OF, plan_kills
from persistence.writers.store import Store
from testkit.memory_snapshot import MemorySnapshot, compare_memory, memory_snapshot

REQUESTS = {"observer": 50, "reflector": 24, "embeddings": 49, "any": 123}


# --- the kill schedule ------------------------------------------------------------------------------


def test_the_schedule_is_a_function_of_the_seed() -> None:
    assert plan_kills(3, REQUESTS, 2) == plan_kills(3, REQUESTS, 2)
    assert plan_kills(3, REQUESTS, 2) != plan_kills(4, REQUESTS, 2)


@given(
    seed=st.integers(0, 10**6),
    per_kind=st.integers(0, 4),
    counts=st.dictionaries(st.sampled_from(sorted(set(TRIGGER_OF.values()))), st.integers(0, 40)),
    max_delay=st.floats(0.0, 2.0),
)
def test_each_kind_gets_distinct_points_within_its_trigger_count(
    seed: int, per_kind: int, counts: dict[str, int], max_delay: float
) -> None:
    schedule = plan_kills(seed, counts, per_kind, max_delay)
    for kind in KILL_KINDS:
        points = [p for p in schedule if p.kind == kind]
        available = counts.get(TRIGGER_OF[kind], 0)
        assert len(points) == min(per_kind, available)
        numbers = [p.after_requests for p in points]
        assert numbers == sorted(set(numbers))
        assert all(
            1 <= n <= available and p.trigger == TRIGGER_OF[kind]
            for n, p in zip(numbers, points, strict=True)
        )
        assert all(0.0 <= p.delay_s <= max_delay + 0.001 for p in points)


def test_workers_are_triggered_by_their_own_requests() -> None:
    assert (TRIGGER_OF["observer"], TRIGGER_OF["reflector"], TRIGGER_OF["indexer"]) == (
        "observer",
        "reflector",
        "embeddings",
    )
    assert plan_kills(0, {"any": 10}, 1) == tuple(
        p for p in plan_kills(0, {"any": 10}, 1) if p.trigger == "any"
    )
    assert {p.kind for p in plan_kills(0, {"any": 10}, 1)} == {"queue", "store"}


def test_a_negative_schedule_is_refused() -> None:
    with pytest.raises(BenchError):
        plan_kills(0, REQUESTS, -1)


# --- the workload -----------------------------------------------------------------------------------


def test_turns_past_the_sample_session_continue_its_seqs_and_times() -> None:
    turns = session_turns("s", 12)
    events = [event for turn in turns for event in turn]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [turn[0]["turn_no"] for turn in turns] == list(range(1, 13))
    assert all(turn[-1]["type"] == "agent_end" for turn in turns)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    assert session_turns("s", 12) == turns  # two runs get the same input
    assert last_seqs(Workload(sessions=2, turns=12)) == {"chaos-00": len(events), "chaos-01": len(events)}


def test_requests_are_told_apart_by_route_and_tool() -> None:
    def chat(tool: str) -> dict[str, object]:
        return {"tools": [{"function": {"name": tool}}]}

    assert request_kind("/v1/chat/completions", chat("record_observations")) == "observer"
    assert request_kind("/v1/chat/completions", chat("record_reflections")) == "reflector"
    assert request_kind("/v1/chat/completions", chat("drop_observations")) == "reflector"
    assert request_kind("/v1/embeddings", {}) == "embeddings"
    assert request_kind("/v1/rerank", {}) is None


# --- memory snapshots ---------------------------------------------------------------------------------


def _memory(tmp_path: Path, name: str, observations: list[tuple[str, str, str]]) -> Path:
    """A migrated database holding ``(observation_id, content, created_at)`` rows and one coverage row."""
    db = tmp_path / name / "om.sqlite"
    db.parent.mkdir()
    Store(db).close()
    with sqlite3.connect(db) as conn:
        for observation_id, content, created_at in observations:
            conn.execute(
                "INSERT INTO om_observation VALUES (?, 'run', 'b', 1, 1, '[]', ?, 'h', 'low',"
                " '2026-11-30 09:01', 3, 'scripted/memory', '1', ?)",
                (observation_id, content, created_at),
            )
        conn.execute(
            "INSERT INTO om_coverage VALUES ('k', 'run', 'b', 1, 1, 'c', 1, 1, 'sd', 'pd', '1', '1', ?, ?)",
            (len(observations), observations[0][2] if observations else "2026-11-30T09:00:00+00:00"),
        )
    return db


def test_runs_that_differ_only_in_wall_clock_times_have_identical_memory(tmp_path: Path) -> None:
    first = memory_snapshot(_memory(tmp_path, "a", [("o1", "x", "2026-12-01T08:00:00+00:00")]))
    second = memory_snapshot(_memory(tmp_path, "b", [("o1", "x", "2026-12-01T09:30:00+00:00")]))
    diff = compare_memory(second, first)
    assert diff.identical and diff.missing == {} and diff.extra == {}
    assert first.count("observations") == 1 and first.count("coverage") == 1
    assert first.count("index_state") == 0 and first.count("index_chunks") == 0  # never indexed


def test_a_changed_text_is_one_lost_and_one_extra_row(tmp_path: Path) -> None:
    reference = memory_snapshot(_memory(tmp_path, "a", [("o1", "x", "t"), ("o2", "y", "t")]))
    changed = memory_snapshot(_memory(tmp_path, "b", [("o1", "x", "t"), ("o2", "z", "t")]))
    diff = compare_memory(changed, reference)
    assert diff.differing == ("observations",)
    assert (diff.missing, diff.extra) == ({"observations": 1}, {"observations": 1})


def test_missing_and_duplicated_rows_are_counted_per_section() -> None:
    reference = MemorySnapshot({"observations": (("o1",), ("o2",)), "coverage": (("k",),)})
    run = MemorySnapshot({"observations": (("o1",), ("o1",)), "coverage": (("k",),)})
    diff = compare_memory(run, reference)
    assert not diff.identical
    assert (diff.missing, diff.extra) == ({"observations": 1}, {"observations": 1})
    assert compare_memory(reference, MemorySnapshot({})).extra == {"observations": 2, "coverage": 1}


def test_a_snapshot_survives_its_json_form(tmp_path: Path) -> None:
    snapshot = memory_snapshot(_memory(tmp_path, "a", [("o1", "x", "t"), ("o2", "y", "t")]))
    assert compare_memory(MemorySnapshot.from_json(snapshot.to_json()), snapshot).identical


def test_the_killer_retries_an_actor_that_does_not_answer_and_reports_kills_it_missed(
    tmp_path: Path,
) -> None:
    from unittest import mock

    from bench.real_chaos import Killer, KillPoint
    from cluster.naming import RuntimeNames

    schedule = (KillPoint("queue", "any", 2, 0.0), KillPoint("store", "any", 16, 0.0))
    killer = Killer(RuntimeNames(prefix="k"), tmp_path / "om.sqlite", schedule)
    answers = iter([False, False, True])  # restarting twice, then killed
    with (
        mock.patch.object(Killer, "_find", return_value=object()),
        mock.patch("bench.real_chaos.kill_actor", side_effect=lambda handle, deadline: next(answers)),
    ):
        killer.start()
        killer.on_request("any", 1)
        killer.on_request("any", 2)  # the queue's trigger; the store's (16) never comes
        kills = killer.finish()
    assert kills["queue"] == 1 and kills["store"] == 0
    assert killer.missed() == {"store": 1}


def test_two_kinds_due_at_one_request_are_both_delivered(tmp_path: Path) -> None:
    """The queue and the store share the trigger ``any``: a schedule may put both on one request."""
    from unittest import mock

    from bench.real_chaos import Killer, KillPoint
    from cluster.naming import RuntimeNames

    schedule = (KillPoint("queue", "any", 5, 0.0), KillPoint("store", "any", 5, 0.0))
    killer = Killer(RuntimeNames(prefix="k"), tmp_path / "om.sqlite", schedule)
    with (
        mock.patch.object(Killer, "_find", return_value=object()),
        mock.patch("bench.real_chaos.kill_actor", return_value=True),
    ):
        killer.start()
        killer.on_request("any", 5)
        kills = killer.finish()
    assert (kills["queue"], kills["store"], killer.missed()) == (1, 1, {})
