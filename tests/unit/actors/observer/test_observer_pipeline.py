"""The Observer's orchestration without Ray: a real Store file, the builtin model, injected clocks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from actors.models.builtin import BuiltinExtractiveModel
from actors.models.chat import ChatModel, ChatRequest, ChatResponse, ModelCallError, ToolCall
from actors.models.tokens import token_counter
from actors.observer.pipeline import EventsNotReadyError, ObserverError, ObserverPorts, observe_through
from cluster.commands.demo_session import demo_session, event_line
from persistence.files.events_reader import read_event_window
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.errors import ModelSettingsError
from protocol.jobs import JobEnvelope, ObserveBoundaryJob
from protocol.records import ActivityRecord

# The per-boundary policy (the original): these tests observe at every job, whatever its size.
PER_BOUNDARY: dict[str, Any] = {"observer": {"observe_after_tokens": 0}}

SESSION = "s-unit"


class CountingModel:
    """The builtin model, counting requests."""

    def __init__(self) -> None:
        self.inner = BuiltinExtractiveModel()
        self.calls = 0

    def complete(self, request: ChatRequest) -> Any:
        self.calls += 1
        return self.inner.complete(request)


class FlakyActivityStore:
    """A Store whose activity writes always fail (status must never fail work)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.activity_attempts = 0

    def commit_observer_part(self, part: Any, observations: Sequence[Any], transcript: Any = ()) -> Any:
        return self.store.commit_observer_part(part, observations, transcript)

    def backfill_transcript(self, *args: Any) -> int:
        return self.store.backfill_transcript(*args)

    def upsert_activity(self, activity: ActivityRecord) -> None:
        self.activity_attempts += 1
        raise OSError("disk full")

    def clear_activity(self, session_id: str, job_id: str) -> bool:
        raise OSError("disk full")

    def pin_observe_start(self, *args: Any) -> int:
        return self.store.pin_observe_start(*args)

    def release_observe_start(self, plan_key: str) -> bool:
        return self.store.release_observe_start(plan_key)


def _write_events(path: Path, turns: int) -> int:
    events = [e for turn in demo_session(SESSION)[:turns] for e in turn]
    path.write_text("".join(event_line(e) for e in events), encoding="utf-8")
    return int(events[-1]["seq"])


def _ports(tmp_path: Path, model: ChatModel, store: Any, dispatched: list[JobEnvelope]) -> ObserverPorts:
    db = str(tmp_path / "om.sqlite")
    return ObserverPorts(
        memory=MemoryReader(db),
        store=store,
        read_events=lambda start, end: read_event_window(tmp_path / "events.jsonl", start, end),
        resolve_model=lambda name: (model, 32768),
        count_tokens=token_counter("o200k_base").count,
        now_utc=lambda: "2026-11-30T10:00:00+00:00",
        now_local=lambda: "2026-11-30 10:00",
        dispatch=lambda envelope: dispatched.append(envelope) or envelope.job_id,
    )


def _job(tmp_path: Path, end_seq: int, block: dict[str, Any]) -> ObserveBoundaryJob:
    return ObserveBoundaryJob(
        session_id=SESSION,
        terminal_end_seq=end_seq,
        terminal_status="completed",
        renderer_version="1",
        observer_schema_version="1",
        db_path=str(tmp_path / "om.sqlite"),
        events_path=str(tmp_path / "events.jsonl"),
        settings=block,
    )


BLOCK = {"model": "builtin/extractive", **PER_BOUNDARY}


def test_observes_commits_and_redelivery_makes_no_model_call(tmp_path: Path) -> None:
    end = _write_events(tmp_path / "events.jsonl", 2)
    store = Store(tmp_path / "om.sqlite")
    model, dispatched = CountingModel(), []
    ports = _ports(tmp_path, model, store, dispatched)
    settings = settings_from_mapping(BLOCK)
    first = observe_through(_job(tmp_path, end, BLOCK), "job-1", settings, ports)
    assert first.status == "inserted" and first.observations > 0 and model.calls >= 1
    assert MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") == end
    calls = model.calls
    again = observe_through(_job(tmp_path, end, BLOCK), "job-1", settings, ports)
    assert again.status == "already_covered" and model.calls == calls
    assert MemoryReader(tmp_path / "om.sqlite").activity(SESSION) is None
    assert dispatched == []  # far below the reflection threshold


def test_failing_activity_writes_never_fail_the_job(tmp_path: Path) -> None:
    end = _write_events(tmp_path / "events.jsonl", 1)
    flaky = FlakyActivityStore(Store(tmp_path / "om.sqlite"))
    result = observe_through(
        _job(tmp_path, end, BLOCK),
        "job-2",
        settings_from_mapping(BLOCK),
        _ports(tmp_path, CountingModel(), flaky, []),
    )
    assert result.parts_committed >= 1 and flaky.activity_attempts >= 1


def test_later_boundary_observes_only_the_new_range(tmp_path: Path) -> None:
    store = Store(tmp_path / "om.sqlite")
    model, dispatched = CountingModel(), []
    ports = _ports(tmp_path, model, store, dispatched)
    settings = settings_from_mapping(BLOCK)
    first_end = _write_events(tmp_path / "events.jsonl", 1)
    observe_through(_job(tmp_path, first_end, BLOCK), "a", settings, ports)
    second_end = _write_events(tmp_path / "events.jsonl", 2)
    result = observe_through(_job(tmp_path, second_end, BLOCK), "b", settings, ports)
    assert (result.source_start_seq, result.source_end_seq) == (first_end + 1, second_end)


def test_threshold_crossing_dispatches_one_reflect_job(tmp_path: Path) -> None:
    end = _write_events(tmp_path / "events.jsonl", 3)
    block = {
        "model": "builtin/extractive",
        **PER_BOUNDARY,
        "reflector": {"reflect_after_observation_tokens": 50},
    }
    dispatched: list[JobEnvelope] = []
    ports = _ports(tmp_path, CountingModel(), Store(tmp_path / "om.sqlite"), dispatched)
    result = observe_through(_job(tmp_path, end, block), "j", settings_from_mapping(block), ports)
    assert result.reflect_job_id is not None
    [envelope] = dispatched
    assert envelope.job_id == envelope.payload.generation_id == result.reflect_job_id  # type: ignore[union-attr]
    assert envelope.payload.kind == "reflect_generation" and envelope.payload.settings == block


def test_malformed_model_and_empty_range_are_typed_errors(tmp_path: Path) -> None:
    end = _write_events(tmp_path / "events.jsonl", 1)
    ports = _ports(tmp_path, CountingModel(), Store(tmp_path / "om.sqlite"), [])
    malformed = {**PER_BOUNDARY, "model": "no-provider"}
    with pytest.raises(ModelSettingsError):
        observe_through(_job(tmp_path, end, malformed), "j", settings_from_mapping(malformed), ports)
    (tmp_path / "events.jsonl").write_text("", encoding="utf-8")
    with pytest.raises(ObserverError, match="readable through seq 0"):
        observe_through(_job(tmp_path, end, BLOCK), "j", settings_from_mapping(BLOCK), ports)
    assert json.dumps(MemoryReader(tmp_path / "om.sqlite").all_observations(SESSION)) == "[]"


class OneObservationPerPartModel:
    """Records one observation per part (citing the part's first label); fails on request ``fail_on``."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.fail_on = fail_on
        self.parts = 0

    def complete(self, request: ChatRequest) -> Any:
        if request.messages[-1]["role"] == "tool":
            return ChatResponse(text="done")
        self.parts += 1
        if self.parts == self.fail_on:
            raise ModelCallError("timeout")
        item = {
            "timestamp": "2026-07-23 10:00",
            "content": f"fact {self.parts} " + "detail " * 40,
            "relevance": "medium",
            "source_refs": [{"run_id": SESSION, "seq": 1}],
        }
        arguments = json.dumps({"observations": [item]})
        return ChatResponse(
            tool_calls=(ToolCall(call_id="c1", name="record_observations", arguments=arguments),)
        )


def test_retry_after_a_failure_inside_a_split_chunk_completes(tmp_path: Path) -> None:
    # Part 1 of an oversized block commits an observation, part 2 fails. The retry packs the block
    # again with a longer memory section (a smaller budget); it must not conflict with part 1's row.
    envelope = {"schema_version": "1.0", "run_id": SESSION, "turn_no": 1, "ts": "2026-07-23T10:00:00+00:00"}
    huge = " ".join(f"word{i}" for i in range(6000))
    lines = [
        {**envelope, "seq": 1, "type": "agent_command_applied", "payload": {"text": huge}},
        {**envelope, "seq": 2, "type": "agent_end", "payload": {"reason": "completed"}},
    ]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    store, settings = Store(tmp_path / "om.sqlite"), settings_from_mapping(BLOCK)

    def ports(model: ChatModel) -> ObserverPorts:
        return ObserverPorts(
            memory=MemoryReader(tmp_path / "om.sqlite"),
            store=store,
            read_events=lambda start, end: read_event_window(tmp_path / "events.jsonl", start, end),
            resolve_model=lambda name: (model, 8000),
            count_tokens=token_counter("o200k_base").count,
            now_utc=lambda: "2026-11-30T10:00:00+00:00",
            now_local=lambda: "2026-11-30 10:00",
        )

    with pytest.raises(ModelCallError):
        observe_through(_job(tmp_path, 2, BLOCK), "j", settings, ports(OneObservationPerPartModel(fail_on=2)))
    assert len(MemoryReader(tmp_path / "om.sqlite").all_observations(SESSION)) == 1
    result = observe_through(_job(tmp_path, 2, BLOCK), "j", settings, ports(OneObservationPerPartModel()))
    assert result.parts_skipped == 1
    assert MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") == 2


# --- D1: coverage never claims what was not read ----------------------------------------------


def test_half_written_terminal_line_fails_the_job_and_is_observed_once_complete(tmp_path: Path) -> None:
    end = _write_events(tmp_path / "events.jsonl", 2)
    full = (tmp_path / "events.jsonl").read_text(encoding="utf-8")
    (tmp_path / "events.jsonl").write_text(full[: full.rindex("\n", 0, -1) + 1 + 20], encoding="utf-8")
    model = CountingModel()
    ports = _ports(tmp_path, model, Store(tmp_path / "om.sqlite"), [])
    settings = settings_from_mapping(BLOCK)
    with pytest.raises(EventsNotReadyError, match=f"through seq {end - 1}"):
        observe_through(_job(tmp_path, end, BLOCK), "j", settings, ports)
    assert model.calls == 0
    assert MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") is None
    (tmp_path / "events.jsonl").write_text(full, encoding="utf-8")  # the writer finishes the line
    result = observe_through(_job(tmp_path, end, BLOCK), "j", settings, ports)
    assert result.status == "inserted"
    assert MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") == end


def test_terminal_seq_beyond_the_file_never_becomes_coverage(tmp_path: Path) -> None:
    end = _write_events(tmp_path / "events.jsonl", 1)
    ports = _ports(tmp_path, CountingModel(), Store(tmp_path / "om.sqlite"), [])
    settings = settings_from_mapping(BLOCK)
    with pytest.raises(EventsNotReadyError):
        observe_through(_job(tmp_path, 999, BLOCK), "j999", settings, ports)
    assert MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") is None
    # Later events are observed when they arrive: the real boundary still observes everything.
    later_end = _write_events(tmp_path / "events.jsonl", 2)
    assert later_end > end
    observe_through(_job(tmp_path, later_end, BLOCK), "j-later", settings, ports)
    assert MemoryReader(tmp_path / "om.sqlite").contiguous_covered_end(SESSION, "1", "1") == later_end


# --- D2: a crash mid-job does not change the resulting memory ----------------------------------


class ScriptedMemoryAwareModel:
    """A deterministic fake Observer whose answer depends on the whole prompt (memory included).

    It records one observation per part citing the part's first source label, with content derived
    from a hash of the user message, so a part planned with other memory or other blocks gives other
    observations. ``crash_after`` parts, it raises as a killed worker would.
    """

    def __init__(self, crash_after: int | None = None) -> None:
        self.crash_after = crash_after
        self.parts = 0

    def complete(self, request: ChatRequest) -> Any:
        import hashlib
        import re

        messages = request.messages

        if messages[-1]["role"] == "tool":
            return ChatResponse(text="done")
        if self.crash_after is not None and self.parts >= self.crash_after:
            raise KeyboardInterrupt("worker killed")  # not an Exception: nothing catches it
        self.parts += 1
        prompt = messages[-1]["content"]
        label = re.search(r"\[Source entry id: ([^:\]]+):(\d+)\]", prompt)
        assert label is not None
        digest = hashlib.sha256(prompt.encode()).hexdigest()[:16]
        item = {
            "timestamp": "2026-07-23 10:00",
            "content": f"observed {digest} " + "context " * 30,
            "relevance": "medium",
            "source_refs": [{"run_id": label.group(1), "seq": int(label.group(2))}],
        }
        arguments = json.dumps({"observations": [item]})
        return ChatResponse(
            tool_calls=(ToolCall(call_id="c1", name="record_observations", arguments=arguments),)
        )


def _long_session(path: Path) -> int:
    envelope = {"schema_version": "1.0", "run_id": SESSION, "turn_no": 1, "ts": "2026-07-23T10:00:00+00:00"}
    lines: list[dict[str, Any]] = []
    seq = 0
    for turn in range(40):
        seq += 1
        text = f"turn {turn}: " + " ".join(f"token{turn}x{i}" for i in range(120))
        lines.append({**envelope, "seq": seq, "type": "agent_command_applied", "payload": {"text": text}})
        seq += 1
        call = {"id": f"call{turn}", "name": "read_file", "arguments": {"path": f"f{turn}.py"}}
        message = {"role": "assistant", "content": f"reading {turn}", "tool_calls": [call]}
        lines.append(
            {**envelope, "seq": seq, "type": "llm_step_completed", "payload": {"assistant_message": message}}
        )
        seq += 1
        result = {"tool_name": "read_file", "content": [{"type": "text", "text": "x = 1\n" * 40}]}
        tool_result = {"tool_call_id": f"call{turn}", "result": result, "is_error": False}
        lines.append(
            {**envelope, "seq": seq, "type": "tool_execution_end", "payload": {"tool_result": tool_result}}
        )
    seq += 1
    lines.append({**envelope, "seq": seq, "type": "agent_end", "payload": {"reason": "completed"}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return seq


def _memory_snapshot(db: Path) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    reader = MemoryReader(db)
    observations = sorted(
        (o.observation_id, o.content, o.source_start_seq, o.source_end_seq)
        for o in reader.all_observations(SESSION)
    )
    import sqlite3

    with sqlite3.connect(db) as conn:
        coverage = sorted(
            conn.execute(
                "SELECT coverage_key, source_start_seq, source_end_seq, part_index, part_count "
                "FROM om_coverage"
            ).fetchall()
        )
    return observations, coverage


def _run_observer(tmp_path: Path, name: str, end: int, crash_after: int | None) -> tuple[Any, int]:
    root = tmp_path / name
    root.mkdir()
    (root / "events.jsonl").write_text(
        (tmp_path / "events.jsonl").read_text(encoding="utf-8"), encoding="utf-8"
    )
    store = Store(root / "om.sqlite")
    settings = settings_from_mapping(BLOCK)

    def ports(model: ChatModel) -> ObserverPorts:
        return ObserverPorts(
            memory=MemoryReader(root / "om.sqlite"),
            store=store,
            read_events=lambda start, stop: read_event_window(root / "events.jsonl", start, stop),
            resolve_model=lambda _name: (model, 6000),
            count_tokens=token_counter("o200k_base").count,
            now_utc=lambda: "2026-11-30T10:00:00+00:00",
            now_local=lambda: "2026-11-30 10:00",
        )

    # A previous boundary's memory first, so the long job's memory context is not empty.
    first = observe_through(_job(root, 9, BLOCK), "job-early", settings, ports(ScriptedMemoryAwareModel()))
    assert first.status == "inserted"
    job = _job(root, end, BLOCK)
    parts_total = 0
    retry_id = "job-long"
    if crash_after is not None:
        with pytest.raises(KeyboardInterrupt):
            observe_through(job, "job-long", settings, ports(ScriptedMemoryAwareModel(crash_after)))
        retry_id = "job-coalesced"  # the queue may retry it as part of another job (another id)
    result = observe_through(job, retry_id, settings, ports(ScriptedMemoryAwareModel()))
    parts_total = result.parts
    store.close()
    return _memory_snapshot(root / "om.sqlite"), parts_total


def test_crash_after_k_parts_gives_the_same_memory_as_an_uninterrupted_run(tmp_path: Path) -> None:
    end = _long_session(tmp_path / "events.jsonl")
    uninterrupted, parts = _run_observer(tmp_path, "clean", end, None)
    assert parts >= 6  # the session spans many parts, so a crash lands mid-job
    observations, coverage = uninterrupted
    assert len(observations) == parts + 1 and coverage  # plus the early boundary's part
    for crash_after in (1, 2, parts // 2, parts - 1):
        assert _run_observer(tmp_path, f"crash{crash_after}", end, crash_after)[0] == uninterrupted, (
            crash_after
        )
