"""The Observer at its project's daily budget and its per-call prompt cap (issue 41 item 3).

At the cap nothing is sent and nothing is committed: the job raises ``BudgetReachedError`` (the queue
holds it). Parts committed before the cap was reached stay; the rest is observed once the budget
allows it, each part once. Under ``budget.max_prompt_tokens`` every call is sent at most that many
prompt tokens, the range split into more parts, all of it covered.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from actors.models.builtin import BuiltinExtractiveModel
from actors.models.chat import (
    PROMPT_FRAMING_TOKENS,
    ChatRequest,
    ChatResponse,
    message_tokens,
    tool_schema_tokens,
)
from actors.models.tokens import token_counter
from actors.observer.pipeline import ObserverPorts, observe_through
from cluster.commands.demo_session import demo_session, event_line
from persistence.files.events_reader import read_event_window
from persistence.reads.memory_reader import MemoryReader
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.errors import BudgetReachedError
from protocol.jobs import ObserveBoundaryJob
from protocol.records import TokenUsageRecord

SESSION = "s-budget"
DAY = 86_400.0
NOON = 1_767_355_200.0  # 2026-01-02 12:00 UTC
COUNT = token_counter("o200k_base").count


class SpendingModel:
    """The builtin model, reporting 1,000 prompt tokens a request, keeping what it was sent."""

    def __init__(self) -> None:
        self.inner = BuiltinExtractiveModel()
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        answer = self.inner.complete(request)
        return answer.model_copy(update={"usage": answer.usage.model_copy(update={"prompt_tokens": 1000})})


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def iso(self) -> str:
        return datetime.fromtimestamp(self.now, tz=UTC).replace(microsecond=0).isoformat()


def _events(path: Path) -> int:
    turns = demo_session(SESSION)[:4]
    path.write_text("".join(event_line(e) for turn in turns for e in turn), encoding="utf-8")
    return int(turns[-1][-1]["seq"])


def _ports(tmp: Path, model: SpendingModel, clock: Clock, context_window: int = 32768) -> ObserverPorts:
    return ObserverPorts(
        memory=MemoryReader(tmp / "om.sqlite"),
        store=Store(tmp / "om.sqlite"),
        read_events=lambda start, end: read_event_window(tmp / "events.jsonl", start, end),
        resolve_model=lambda name: (model, context_window),
        count_tokens=COUNT,
        now_utc=clock.iso,
        now_local=lambda: "2026-01-02 12:00",
        clock=clock,
    )


def _job(tmp: Path, end: int) -> ObserveBoundaryJob:
    return ObserveBoundaryJob(
        session_id=SESSION,
        terminal_end_seq=end,
        terminal_status="completed",
        renderer_version="1",
        observer_schema_version="1",
        db_path=str(tmp / "om.sqlite"),
        events_path=str(tmp / "events.jsonl"),
    )


def _settings(**budget: Any) -> Any:
    # "local/m": any model but the built-in one is metered (this test resolves it to a fake).
    block = {
        "model": "local/m",
        "providers": {"local": {"base_url": "http://127.0.0.1:9/v1", "context_window": 32768}},
        "observer": {"observe_after_tokens": 0},
        "reflector": {"reflect_after_observation_tokens": 2048},
        "budget": budget,
    }
    return settings_from_mapping(block)


def _spent_earlier(store: Store, tokens: int, recorded_at: str) -> None:
    store.record_token_usage(
        TokenUsageRecord(
            usage_id=f"earlier-{recorded_at}",
            session_id="other-session",
            job_kind="observe",
            model="claude-code/haiku",
            requests=1,
            prompt_tokens=tokens,
            cached_prompt_tokens=0,
            completion_tokens=0,
            recorded_at=recorded_at,
        )
    )


def test_at_the_cap_nothing_is_sent_or_committed_until_the_next_day(tmp_path: Path) -> None:
    end = _events(tmp_path / "events.jsonl")
    clock, model = Clock(NOON), SpendingModel()
    ports = _ports(tmp_path, model, clock)
    _spent_earlier(ports.store, 5000, "2026-01-02T08:00:00+00:00")  # today, another session
    _spent_earlier(ports.store, 10**9, "2026-01-01T23:59:59+00:00")  # yesterday: not today's
    reader = MemoryReader(tmp_path / "om.sqlite")

    with pytest.raises(BudgetReachedError) as info:
        observe_through(_job(tmp_path, end), "job-1", _settings(daily_tokens=5000), ports)
    assert info.value.reason == "budget_tokens" and info.value.until == NOON + DAY / 2
    assert model.requests == [] and reader.contiguous_covered_end(SESSION, "1", "1") is None
    assert reader.all_observations(SESSION) == []

    clock.now = NOON + DAY / 2  # 00:00 UTC: a new day, a new budget
    result = observe_through(_job(tmp_path, end), "job-1", _settings(daily_tokens=5000), ports)
    assert result.status == "inserted" and reader.contiguous_covered_end(SESSION, "1", "1") == end


def test_a_cap_reached_mid_job_keeps_what_is_committed_and_the_rest_follows_once(tmp_path: Path) -> None:
    end = _events(tmp_path / "events.jsonl")
    clock, model = Clock(NOON), SpendingModel()
    ports = _ports(tmp_path, model, clock, context_window=1400)  # small parts: several calls
    reader = MemoryReader(tmp_path / "om.sqlite")
    settings = _settings(daily_tokens=1000)  # the first call (1,000 tokens) reaches it

    with pytest.raises(BudgetReachedError):
        observe_through(_job(tmp_path, end), "job-1", settings, ports)
    assert len(model.requests) == 1
    first_end = reader.contiguous_covered_end(SESSION, "1", "1")
    assert first_end is not None and 1 <= first_end < end  # the first part stays committed

    raised = _settings(daily_tokens=None)  # the user lifted the cap: the rest is observed
    result = observe_through(_job(tmp_path, end), "job-1", raised, ports)
    assert reader.contiguous_covered_end(SESSION, "1", "1") == end
    assert result.parts_skipped == 1 and result.parts_committed == result.parts - 1
    assert len(model.requests) == result.parts  # every part sent once
    # The same memory as one uninterrupted run: every part observed once, nothing twice.
    alone = tmp_path / "alone"
    alone.mkdir()
    _events(alone / "events.jsonl")
    observe_through(_job(alone, end), "job-1", raised, _ports(alone, SpendingModel(), clock, 1400))
    assert _memory(reader) == _memory(MemoryReader(alone / "om.sqlite"))


def _memory(reader: MemoryReader) -> list[tuple[str, tuple[int, ...]]]:
    return sorted(
        (o.content, tuple(ref.seq for ref in o.source_refs)) for o in reader.all_observations(SESSION)
    )


def _counted_prompt(request: ChatRequest) -> int:
    return (
        PROMPT_FRAMING_TOKENS
        + tool_schema_tokens(request.tools, COUNT)
        + sum(message_tokens(m, COUNT) for m in request.messages)
    )


def test_the_prompt_cap_splits_the_range_into_calls_under_it(tmp_path: Path) -> None:
    turn = [dict(e) for e in demo_session(SESSION)[0]]
    big = "\n".join(f"line {n}: " + "word " * 40 for n in range(400))  # some 17,000 tokens in one event
    turn[0]["payload"] = {"text": big}  # the user's message (tool output is shortened when rendered)
    (tmp_path / "events.jsonl").write_text("".join(event_line(e) for e in turn), encoding="utf-8")
    end = int(turn[-1]["seq"])
    clock, model = Clock(NOON), SpendingModel()
    ports = _ports(tmp_path, model, clock, context_window=200_000)
    reader = MemoryReader(tmp_path / "om.sqlite")
    settings = _settings(max_prompt_tokens=4096, daily_tokens=None)

    result = observe_through(_job(tmp_path, end), "job-1", settings, ports)

    assert result.status == "inserted" and result.parts >= 5  # one event, cut into calls under the cap
    assert all(_counted_prompt(request) <= 4096 for request in model.requests)
    assert len(model.requests) == result.parts and reader.contiguous_covered_end(SESSION, "1", "1") == end
