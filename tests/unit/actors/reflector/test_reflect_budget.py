"""The Reflector and Dropper at the project's daily budget and per-call prompt cap (issue 41 item 3)."""

from __future__ import annotations

from datetime import datetime

import pytest

from actors.models.chat import OpenAIChatModel
from actors.reflector.pipeline import reflect_generation
from actors.worker import failure_reason
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.errors import BudgetReachedError, PromptOverCapError
from protocol.records import TokenUsageRecord
from protocol.settings import BudgetSettings, OmSettings
from testkit.scripted_server import ScriptedServer

from .helpers import RUN, SCRIPTED_MODEL, commit_observation, ports, threshold_job
from .test_scripted_model import FIRST_SET, commit_all, script_first_generation

NOON = datetime.fromisoformat("2026-07-23T12:00:00+00:00").timestamp()  # the helpers' clock's day


def capped(**budget: int | float | None) -> OmSettings:
    return OmSettings(
        model=SCRIPTED_MODEL,
        reflect_after_observation_tokens=20,
        observations_max_tokens=15,
        budget=BudgetSettings.model_construct(**{**BudgetSettings().model_dump(), **budget}),
    )


def spent_today(store: Store, tokens: int) -> None:
    store.record_token_usage(
        TokenUsageRecord(
            usage_id="earlier",
            session_id="other-session",
            job_kind="observe",
            model=SCRIPTED_MODEL,
            requests=1,
            prompt_tokens=tokens,
            cached_prompt_tokens=0,
            completion_tokens=0,
            recorded_at="2026-07-23T08:00:00+00:00",
        )
    )


def test_at_the_cap_nothing_is_claimed_or_sent(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    settings = capped(daily_tokens=1000)
    job = threshold_job(reader, settings)
    spent_today(store, 1000)
    the_ports = ports(reader, store, chat)
    the_ports.clock = lambda: NOON

    with pytest.raises(BudgetReachedError) as info:
        reflect_generation(job, job.generation_id, settings, the_ports)

    assert info.value.reason == "budget_tokens"
    assert reader.generation(job.generation_id) is None and server.chat_requests == []


def test_the_dropper_is_skipped_once_the_reflectors_call_reaches_the_cap(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    settings = capped(daily_tokens=1000)
    job = threshold_job(reader, settings)
    spent_today(store, 990)  # under the cap: the Reflector runs, and its 15 tokens reach the cap
    script_first_generation(server)
    the_ports = ports(reader, store, chat)
    the_ports.clock = lambda: NOON

    result = reflect_generation(job, job.generation_id, settings, the_ports)

    assert (result.status, result.dropper_skipped, result.dropped) == ("promoted", "budget_tokens", 0)
    assert [r.content for r in reader.active_reflections(RUN)]  # the reflection is kept
    assert len(server.chat_requests) == 2  # the Reflector and its receipt round; no Dropper call


def test_a_reflector_call_over_the_prompt_cap_is_never_sent(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    for seq in range(1, 40):
        commit_observation(store, seq, f"observation number {seq} says something worth keeping")
    settings = capped(max_prompt_tokens=100)  # below the settings' floor, to reach it with few rows
    job = threshold_job(reader, settings)

    with pytest.raises(PromptOverCapError) as info:
        reflect_generation(job, job.generation_id, settings, ports(reader, store, chat))

    assert server.chat_requests == [] and info.value.cap == 100
    assert failure_reason(info.value) == ("prompt_over_cap", False)
