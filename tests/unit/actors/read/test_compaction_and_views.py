"""Projection, the before-compaction hook, status and view through read_service (§10, §12)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

import actors.read.service as read_service
import persistence.files.events_reader as events_reader
import persistence.writers.store as store_module
from actors import worker
from actors.models import builtin as builtin_model
from actors.models import chat as models
from actors.models import registry
from actors.queue import actor as queue_actor
from actors.queue import state as queue_state
from actors.read.projector import render_active_memory
from actors.read.service import before_compaction, memory_search, memory_status, memory_view, project
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.events import BeforeCompactionContext, projection_metadata
from tests.unit.actors.read.factories import hex_id, observation, reflection
from tests.unit.actors.read.helpers import commit, promote
from tests.unit.persistence.builders import OBSERVER_SCHEMA, RENDERER

COMPACT_RUN = BeforeCompactionContext(
    session_id="s1", turn_no=4, trigger="compact_run", required_start_seq=1, required_end_seq=3
)
FORK = BeforeCompactionContext(session_id="s1", turn_no=4, trigger="snapshot")
VERSIONS = (RENDERER, OBSERVER_SCHEMA)  # the versions the fixture's coverage rows were written with


@pytest.fixture
def memory(store: Store) -> Store:
    commit(
        store,
        [
            observation(
                "a1", "Dropped later", timestamp="2026-07-26 09:00", session_id="s1", refs=(("s1", 1),)
            )
        ],
    )
    commit(
        store,
        [observation("a2", "Kept fact", timestamp="2026-07-26 10:00", session_id="s1", refs=(("s1", 2),))],
    )
    commit(
        store,
        [
            observation(
                "a3", "After watermark", timestamp="2026-07-26 11:00", session_id="s1", refs=(("s1", 3),)
            )
        ],
    )
    commit(store, [observation("a9", "Other session", session_id="s2")])
    promote(
        store,
        "s1",
        [reflection("b1", "User likes tests", session_id="s1", supports=(hex_id("a1"), hex_id("f0")))],
        [hex_id("a2")],
        2,
    )
    return store


def test_project_renders_active_reflections_and_pool(memory: Store) -> None:
    text = project(memory.db_path, "s1")
    assert "[b10000000000] User likes tests" in text
    assert "[a20000000000] 2026-07-26 10:00 [medium] Kept fact" in text
    assert "After watermark" in text
    assert "Dropped later" not in text and "Other session" not in text
    assert project(memory.db_path, "nobody") == ""


def test_before_compaction_replaces_continues_and_cancels(memory: Store, tmp_path: Path) -> None:
    replaced = before_compaction(memory.db_path, COMPACT_RUN, *VERSIONS)
    assert replaced.action == "replace_summary"
    assert replaced.summary_text == project(memory.db_path, "s1")
    assert replaced.metadata == projection_metadata(True)
    assert before_compaction(memory.db_path, FORK).metadata["om_has_coverage_watermark"] is False
    # Coverage ends at seq 3: replacing through seq 9 would lose seqs 4..9, so the hook fails closed.
    ahead = before_compaction(
        memory.db_path, COMPACT_RUN.model_copy(update={"required_end_seq": 9}), *VERSIONS
    )
    assert ahead.action == "cancel"
    assert ahead.reason == (
        "observational_memory coverage incomplete: observed through seq 3, compaction replaces through 9"
    )
    empty = before_compaction(memory.db_path, COMPACT_RUN.model_copy(update={"session_id": "empty"}))
    assert empty.action == "continue"
    assert before_compaction(tmp_path / "missing.sqlite", COMPACT_RUN).action == "continue"
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"not a database at all" * 100)
    cancelled = before_compaction(corrupt, COMPACT_RUN)
    assert cancelled.action == "cancel"
    assert cancelled.reason == "observational_memory active-memory projection failed: StorageError"


def test_before_compaction_never_dispatches_calls_models_reads_events_polls_or_sleeps(
    memory: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("forbidden call during compaction")

    monkeypatch.setattr(time, "sleep", forbidden)
    monkeypatch.setattr(read_service, "iter_events", forbidden)
    monkeypatch.setattr(events_reader, "read_event_range", forbidden)
    monkeypatch.setattr(events_reader, "iter_events", forbidden)
    for name in dir(Store):
        if not name.startswith("__") and callable(getattr(Store, name)):
            monkeypatch.setattr(store_module.Store, name, forbidden)
    # Every model entry point and every ray-free dispatch hook.
    for target in (
        models.OpenAIChatModel.complete,
        models.run_tool_loop,
        registry.model_for,
        builtin_model.BuiltinExtractiveModel.complete,
        queue_actor.QueueActor.dispatch,
        queue_actor.QueueActor.tick,
        queue_state.QueueState.accept,
        queue_state.QueueState.next_dispatch,
        worker.WorkerActor.handle,
    ):
        owner = target.__qualname__.split(".")[0]
        module = sys.modules[target.__module__]
        if owner == target.__name__:
            monkeypatch.setattr(module, target.__name__, forbidden)
        else:
            monkeypatch.setattr(getattr(module, owner), target.__name__, forbidden)
    with pytest.raises(AssertionError):
        time.sleep(0)  # the traps are armed
    with pytest.raises(AssertionError):
        queue_actor.QueueActor.dispatch(None, {})  # type: ignore[arg-type]
    decision = before_compaction(memory.db_path, COMPACT_RUN, *VERSIONS)
    assert decision.action == "replace_summary"


def test_status_counts_tokens_with_the_counter(memory: Store) -> None:
    settings = settings_from_mapping({})
    text, data = memory_status(memory.db_path, "s1", settings, lambda content: len(content))
    assert data["recorded_observations"] == 3 and data["active_observations"] == 2
    assert data["dropped_observations"] == 1 and data["visible_observations"] == 1
    assert data["visible_reflections"] == 1
    assert data["active_tokens"] == len("Kept fact") + len("After watermark")
    assert data["session_id"] == "s1"
    assert "- **Observations:** 3 recorded / 1 dropped / 2 active / 1 visible" in text


def test_view_hides_unknown_support_ids_and_foreign_sources(memory: Store) -> None:
    text, data = memory_view(memory.db_path, "s1")
    assert "> Supports observations `[a10000000000]`" in text
    assert "f00000000000" not in text
    reflections: Any = data["reflections"]
    assert reflections[0]["supporting_observation_ids"] == [hex_id("a1")]
    assert "> Sources: event `2`" in text


def test_reads_run_concurrently_with_a_committing_writer(db_path: Path) -> None:
    writer = Store(db_path)
    rows = [
        observation(
            f"{index:02x}", f"fact number {index}", timestamp=f"2026-07-26 10:{index:02d}", session_id="s1"
        )
        for index in range(1, 31)
    ]
    prefixes = {render_active_memory([], rows[:count]) for count in range(len(rows) + 1)}
    errors: list[BaseException] = []
    seen_projections: list[str] = []
    seen_counts: list[int] = []
    done = threading.Event()

    def write() -> None:
        try:
            for row in rows:
                commit(writer, [row], "s1")
        except BaseException as exc:  # asserted below
            errors.append(exc)
        finally:
            done.set()

    def read() -> None:
        try:
            while not done.is_set() or len(seen_projections) < 5:
                seen_projections.append(project(db_path, "s1"))
                seen_counts.append(
                    int(memory_search(db_path, {"query": "fact number", "limit": 50})["count"])
                )  # type: ignore[call-overload]
        except BaseException as exc:  # asserted below
            errors.append(exc)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    assert errors == []
    assert all(text in prefixes for text in seen_projections)  # never torn
    assert seen_counts == sorted(seen_counts)
    assert project(db_path, "s1") == render_active_memory([], rows)


def test_before_compaction_fails_closed_even_on_a_malformed_context(memory: Store) -> None:
    # "Any error means cancel": the failure path itself must not raise, even when the context is
    # not a BeforeCompactionContext (a plain dict from an untyped caller).
    decision = before_compaction(memory.db_path, {"run_id": "s1"})  # type: ignore[arg-type]
    assert decision.action == "cancel"
    assert decision.reason == "observational_memory active-memory projection failed: AttributeError"
