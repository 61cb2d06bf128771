"""Readers never block on, or fail because of, the writer (WAL, reference §4.1)."""

from __future__ import annotations

import threading
from pathlib import Path

from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from tests.unit.persistence.builders import OBSERVER_SCHEMA, RENDERER, make_observation, make_part

RUN = "run-1"


def test_reader_sees_the_last_commit_while_a_write_transaction_is_open(
    store: Store, reader: MemoryReader
) -> None:
    store.commit_observer_part(make_part(RUN, 1, 1), [make_observation(RUN, "committed")])
    with store.atomic():
        store.commit_observer_part(make_part(RUN, 2, 2), [make_observation(RUN, "pending", seq=2)])
        assert [o.content for o in reader.all_observations(RUN)] == ["committed"]
        assert reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) == 1
    assert reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) == 2


def test_reader_thread_reads_while_writer_thread_commits(db_path: Path) -> None:
    store = Store(db_path)
    reader = MemoryReader(db_path)
    errors: list[BaseException] = []
    seen: list[int] = []
    parts = 30

    def write() -> None:
        try:
            for seq in range(1, parts + 1):
                store.commit_observer_part(
                    make_part(RUN, seq, seq), [make_observation(RUN, f"fact {seq}", seq=seq)]
                )
        except BaseException as exc:  # asserted below
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(parts):
                end = reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) or 0
                count = reader.memory_counts(RUN).recorded_observations
                seen.append(end)
                assert count >= end  # one snapshot per call: never coverage without its observations
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    store.close()
    assert errors == []
    assert seen == sorted(seen)  # the watermark only moves forward
    assert reader.contiguous_covered_end(RUN, RENDERER, OBSERVER_SCHEMA) == parts
