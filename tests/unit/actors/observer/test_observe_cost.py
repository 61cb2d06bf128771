"""Fewer, fuller, cache-friendly observer calls: deferral, idle flush, prefix stability, no receipt round."""

from __future__ import annotations

import json
from itertools import takewhile
from pathlib import Path
from typing import Any

from actors.models.builtin import BuiltinExtractiveModel
from actors.models.chat import ChatRequest, ChatResponse, ToolCall
from actors.models.tokens import token_counter
from actors.observer.pipeline import ObserverPorts, observe_through
from cluster.commands.demo_session import demo_session, event_line
from persistence.files.events_reader import read_event_window
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.jobs import JobEnvelope, ObserveBoundaryJob, ObserveSignal

SESSION = "s-cost"
NOW = 1_800_000_000.0


class RecordingModel:
    """The builtin model, keeping every request's messages."""

    def __init__(self) -> None:
        self.inner = BuiltinExtractiveModel()
        self.requests: list[list[dict[str, Any]]] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append([dict(m) for m in request.messages])
        return self.inner.complete(request)


def _write(path: Path, turns: int) -> list[int]:
    session = demo_session(SESSION)[:turns]
    path.write_text("".join(event_line(e) for turn in session for e in turn), encoding="utf-8")
    return [int(turn[-1]["seq"]) for turn in session]


def _ports(tmp: Path, model: Any, dispatched: list[JobEnvelope]) -> ObserverPorts:
    return ObserverPorts(
        memory=MemoryReader(tmp / "om.sqlite"),
        store=Store(tmp / "om.sqlite"),
        read_events=lambda start, end: read_event_window(tmp / "events.jsonl", start, end),
        resolve_model=lambda name: (model, 32768),
        count_tokens=token_counter("o200k_base").count,
        now_utc=lambda: "2026-11-30T10:00:00+00:00",
        now_local=lambda: "2026-11-30 10:00",
        dispatch=lambda envelope: dispatched.append(envelope) or envelope.job_id,
        clock=lambda: NOW,
    )


def _job(
    tmp: Path, end: int, block: dict[str, Any], signal: ObserveSignal = "turn_end", **extra: Any
) -> ObserveBoundaryJob:
    return ObserveBoundaryJob(
        session_id=SESSION,
        terminal_end_seq=end,
        terminal_status="completed",
        renderer_version="1",
        observer_schema_version="1",
        db_path=str(tmp / "om.sqlite"),
        events_path=str(tmp / "events.jsonl"),
        settings=block,
        signal=signal,
        **extra,
    )


def test_small_turns_defer_and_the_session_end_observes_them_in_one_call(tmp_path: Path) -> None:
    ends = _write(tmp_path / "events.jsonl", 3)
    block = {"model": "builtin/extractive", "observer": {"idle_flush_seconds": 90}}
    settings = settings_from_mapping(block)
    model, dispatched = RecordingModel(), []
    ports = _ports(tmp_path, model, dispatched)
    reader = MemoryReader(tmp_path / "om.sqlite")

    for end in ends[:2]:
        result = observe_through(_job(tmp_path, end, block), f"job-{end}", settings, ports)
        assert result.status == "deferred" and 0 < result.uncovered_tokens < settings.observe_after_tokens
    assert model.requests == [] and reader.contiguous_covered_end(SESSION, "1", "1") is None
    # Each deferral leaves the tail to an idle flush that the queue holds for 90 s.
    assert [e.payload.signal for e in dispatched] == ["idle_flush", "idle_flush"]  # type: ignore[union-attr]
    assert {e.not_before for e in dispatched} == {NOW + 90}
    assert dispatched[1].payload.terminal_end_seq == ends[1]

    result = observe_through(_job(tmp_path, ends[2], block, "session_end"), "job-end", settings, ports)
    assert (result.status, result.trigger, result.parts_committed) == ("inserted", "session_end", 1)
    assert len(model.requests) == 1  # one call for the whole session; its answer needed no receipt round
    assert reader.contiguous_covered_end(SESSION, "1", "1") == ends[2]
    # The held flush finds nothing left to do.
    flush = dispatched[1].payload
    assert isinstance(flush, ObserveBoundaryJob)
    assert observe_through(flush, dispatched[1].job_id, settings, ports).status == "already_covered"


def test_pressure_observes_half_the_threshold_and_the_idle_flush_observes_anything(tmp_path: Path) -> None:
    ends = _write(tmp_path / "events.jsonl", 1)
    model, dispatched = RecordingModel(), []
    ports = _ports(tmp_path, model, dispatched)
    deferred = settings_from_mapping({"model": "builtin/extractive"})
    tokens = observe_through(_job(tmp_path, ends[0], {}), "a", deferred, ports).uncovered_tokens
    # A threshold just above the turn's size: under pressure half of it is enough.
    block = {"model": "builtin/extractive", "observer": {"observe_after_tokens": tokens + 1}}
    settings = settings_from_mapping(block)
    calm = observe_through(
        _job(tmp_path, ends[0], block, "checkpoint", context_fill=0.2), "b", settings, ports
    )
    assert calm.status == "deferred"
    pressed = observe_through(
        _job(tmp_path, ends[0], block, "checkpoint", context_fill=0.8), "c", settings, ports
    )
    assert (pressed.status, pressed.trigger) == ("inserted", "pressure")


def test_consecutive_jobs_of_a_session_share_the_whole_previous_prompt_prefix(tmp_path: Path) -> None:
    ends = _write(tmp_path / "events.jsonl", 4)
    block = {"model": "builtin/extractive", "observer": {"observe_after_tokens": 0}}
    settings = settings_from_mapping(block)
    model = RecordingModel()
    ports = _ports(tmp_path, model, [])
    for end in ends:
        observe_through(_job(tmp_path, end, block), f"job-{end}", settings, ports)
    assert len(model.requests) == len(ends)  # one part per turn, no receipt rounds

    def serialized(request: list[dict[str, Any]]) -> str:
        return json.dumps(request, ensure_ascii=False)

    def memory_section(request: list[dict[str, Any]]) -> str:
        return str(request[1]["content"]).split("\n\nNEW SOURCE-ADDRESSED CONVERSATION CHUNK:", 1)[0]

    for first, second in zip(model.requests[1:], model.requests[2:], strict=False):
        # System prompt first, then the memory; the next job only appends its new observations.
        assert first[0] == second[0]
        pairs = zip(serialized(first), serialized(second), strict=False)
        shared = "".join(a for a, _ in takewhile(lambda pair: pair[0] == pair[1], pairs))
        assert json.dumps(memory_section(first), ensure_ascii=False)[1:-1] in shared
        assert "[1] " in memory_section(second)  # short stable ids, not 64-character canonical ones
        assert len(memory_section(second)) > len(memory_section(first))


class OneInvalidItemModel:
    """Answers the first request with one valid and one invalid item, then stops."""

    def __init__(self) -> None:
        self.requests = 0

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests += 1
        if request.messages[-1]["role"] == "tool":
            return ChatResponse(text="Done.")
        good = {
            "timestamp": "2026-11-30 10:00",
            "content": "A fact",
            "relevance": "low",
            "source_refs": [{"run_id": SESSION, "seq": 1}],
        }
        bad = {**good, "relevance": "urgent"}
        arguments = json.dumps({"observations": [good, bad]})
        return ChatResponse(
            tool_calls=(ToolCall(call_id="c1", name="record_observations", arguments=arguments),)
        )


def test_an_invalid_item_still_gets_its_correction_receipt(tmp_path: Path) -> None:
    ends = _write(tmp_path / "events.jsonl", 1)
    block = {"model": "builtin/extractive", "observer": {"observe_after_tokens": 0}}
    model = OneInvalidItemModel()
    result = observe_through(
        _job(tmp_path, ends[0], block), "j", settings_from_mapping(block), _ports(tmp_path, model, [])
    )
    assert (model.requests, result.model_rounds, result.observations) == (2, 2, 1)
