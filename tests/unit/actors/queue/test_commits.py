"""The group-commit bookkeeping (``actors.queue.commits``): what is unwritten, and which commit makes
what durable. Pure: no store, no threads."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from actors.queue.commits import CommitLog, CommitStats
from actors.queue.state import MarkSucceeded, OutcomeIgnored, WakeAt
from actors.queue.writes import Accept

from .helpers import envelope


def test_a_caller_waits_for_the_generation_of_the_commit_that_carries_its_job() -> None:
    log = CommitLog()
    first = log.accept(1, envelope("j1"), 0.0)
    assert log.accept_pending(1) == first and not log.is_durable(first)
    batch = log.take()
    assert batch is not None and batch.generation == first and log.committing
    second = log.accept(2, envelope("j2"), 0.0)  # arrives while the first commit is in flight
    assert second == first + 1
    log.written(batch)
    assert log.is_durable(first) and not log.is_durable(second)
    assert log.accept_pending(1) is None and log.accept_pending(2) == second


def test_a_failed_batch_goes_back_in_front_of_newer_items_in_order() -> None:
    log = CommitLog()
    log.accept(1, envelope("j1"), 0.0)
    log.add([MarkSucceeded(7, "j7", 1)], 0.0)
    batch = log.take()
    assert batch is not None
    log.accept(2, envelope("j2"), 1.0)
    log.put_back(batch)
    assert not log.committing and not log.is_durable(batch.generation)
    retry = log.take()
    assert retry is not None
    assert [item for item, _ in retry.items] == [
        *(item for item, _ in batch.items),
        Accept(2, envelope("j2")),
    ]
    assert retry.generation > batch.generation  # the retry's callers are woken by the later commit


def test_notices_are_not_queued_and_an_empty_log_has_nothing_to_take() -> None:
    log = CommitLog()
    log.add([WakeAt(5.0), OutcomeIgnored(3, "not_in_flight")], 0.0)
    assert len(log) == 0 and log.take() is None and not log.only_finishes()
    log.add([MarkSucceeded(1, "j1", 1)], 0.0)
    assert log.only_finishes()
    log.accept(2, envelope("j2"), 0.0)
    assert not log.only_finishes()


def test_commit_figures_are_nearest_rank_below_and_zero_when_empty() -> None:
    stats = CommitStats()
    assert stats.figures()["dispatch_ms_p50"] == 0.0 and stats.figures()["transactions"] == 0
    stats.dispatched(4.0, jobs=3)
    stats.dispatched(1.0)
    stats.committed(writes=6, elapsed_s=0.002)
    figures = stats.figures()
    assert figures["dispatch_ms_p50"] == 4.0 and figures["writes_per_transaction"] == 6.0
    assert figures["commit_ms_max"] == 2.0


_steps = st.lists(st.sampled_from(["accept", "finish", "take", "fail", "write"]), max_size=60)


@given(_steps)
def test_every_item_is_written_once_in_the_order_it_was_queued(steps: list[str]) -> None:
    log = CommitLog()
    queued: list[object] = []
    written: list[object] = []
    in_flight = None
    waiting: dict[int, int] = {}  # job_seq -> generation its caller waits for
    for n, step in enumerate(steps):
        if step == "accept":
            waiting[n] = log.accept(n, envelope(f"j{n}"), float(n))
            queued.append(Accept(n, envelope(f"j{n}")))
        elif step == "finish":
            log.add([MarkSucceeded(n, f"j{n}", 1)], float(n))
            queued.append(MarkSucceeded(n, f"j{n}", 1))
        elif step == "take" and in_flight is None:
            in_flight = log.take()
        elif step == "fail" and in_flight is not None:
            log.put_back(in_flight)
            in_flight = None
        elif step == "write" and in_flight is not None:
            log.written(in_flight)
            written.extend(item for item, _ in in_flight.items)
            in_flight = None
    if in_flight is not None:
        log.put_back(in_flight)
    while (batch := log.take()) is not None:
        log.written(batch)
        written.extend(item for item, _ in batch.items)
    assert written == queued  # nothing lost, nothing twice, order kept
    assert all(log.is_durable(generation) for generation in waiting.values())
    assert all(log.accept_pending(seq) is None for seq in waiting)
