"""reflect_generation end to end: real SQLite, the real OpenAI client against the scripted server."""

from __future__ import annotations

from typing import Any

import pytest

from actors.models.chat import ModelCallError, OpenAIChatModel
from actors.reflector.core import ReflectPayloadError
from actors.reflector.pipeline import ReflectResult, reflect_generation
from persistence.reads.memory_reader import MemoryReader
from persistence.writers.store import Store
from protocol.errors import ConflictError
from protocol.jobs import ReflectGenerationJob
from protocol.records import ActivityRecord, ObservationRecord, Relevance
from testkit.scripted_server import ScriptedServer, chat_text, chat_tool_calls, http_error

from .helpers import (
    RUN,
    SCRIPTED_MODEL,
    Clock,
    FlakyStatusStore,
    HookedModel,
    ScriptedStore,
    commit_observation,
    no_model,
    ports,
    settings,
    threshold_job,
)

# Six observations of five words each (30 tokens; threshold 20, target 15 -> at most 3 drops).
FIRST_SET: list[tuple[int, str, Relevance]] = [
    (1, "Project stores memory in SQLite", "medium"),
    (2, "Routine acknowledgement of test run", "low"),
    (3, "Store class owns every write", "medium"),
    (4, "User prefers short commit messages", "critical"),
    (5, "Assistant listed files in repo", "low"),
    (6, "Queue retries failed jobs thrice", "medium"),
]
SECOND_SET: list[tuple[int, str, Relevance]] = [
    (7, "User chose Ray for actors", "high"),
    (8, "Dashboard binds to loopback only", "medium"),
    (9, "Reflector runs after forty thousand", "medium"),
]
R1 = "Memory lives in SQLite and only the Store class writes it."
R2 = "Ray hosts the actors and its dashboard stays on loopback."


def commit_all(store: Store, rows: list[tuple[int, str, Relevance]]) -> dict[int, ObservationRecord]:
    return {seq: commit_observation(store, seq, text, relevance=rel) for seq, text, rel in rows}


def script_first_generation(server: ScriptedServer) -> None:
    reflections = {
        "reflections": [
            {"content": R1, "supporting_observation_ids": ["1", "3"]},
            {"content": "Cites an id the model never saw.", "supporting_observation_ids": ["99"]},
        ]
    }
    server.push_chat(
        chat_tool_calls(("record_reflections", reflections)),
        chat_text("Recorded one reflection."),
        # Worst-first proposals; the server keeps the 3 best-covered, least relevant, oldest. Every id
        # is known, so no receipt round follows (the Reflector's call had a rejected item: it did).
        chat_tool_calls(("drop_observations", {"ids": ["5", "6", "2", "1", "3", "4"], "reason": "r"})),
    )


def run_first_generation(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> tuple[ReflectGenerationJob, dict[int, ObservationRecord], ReflectResult]:
    observations = commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    script_first_generation(server)
    result = reflect_generation(job, job.generation_id, settings(), ports(reader, store, chat))
    assert result.status == "promoted"
    return job, observations, result


def test_promotes_reflections_applies_capped_drops_and_keeps_later_observations(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    observations = commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    script_first_generation(server)
    seen: dict[str, ActivityRecord | None] = {}
    model = HookedModel(
        chat,
        hooks={
            0: lambda: seen.update(reflector=reader.activity(RUN)),
            2: lambda: seen.update(dropper=reader.activity(RUN)),
        },
    )

    result = reflect_generation(job, job.generation_id, settings(), ports(reader, store, model))

    assert result.as_dict() == {
        "status": "promoted",
        "generation_id": job.generation_id,
        "failure_code": None,
        "new_reflections": 1,
        "dropped": 3,
        "retained": 3,
        "model_rounds": 3,
        "prompt_tokens": 30,
        "cached_prompt_tokens": 0,
        "completion_tokens": 15,
        "model": job.reflector_model,
        "cost_usd": None,  # an OpenAI-compatible endpoint reports no money
        "dropper_skipped": None,
        # The same counts by stage, for the token metrics (omray_model_tokens_total{kind=...}).
        "usage_by_kind": {
            "reflect": {"prompt_tokens": 20, "cached_prompt_tokens": 0, "completion_tokens": 10},
            "drop": {"prompt_tokens": 10, "cached_prompt_tokens": 0, "completion_tokens": 5},
        },
    }
    # The cost report: one usage row per stage, counts only.
    usage = {
        (u.job_kind, u.model): (u.requests, u.prompt_tokens, u.completion_tokens)
        for u in reader.token_usage(RUN)
    }
    assert usage == {("reflect", SCRIPTED_MODEL): (2, 20, 10), ("drop", SCRIPTED_MODEL): (1, 10, 5)}
    active = reader.active_generation(RUN)
    assert active is not None and active.generation_id == job.generation_id
    assert active.status == "succeeded" and active.required_end_seq == 6
    reflections = reader.active_reflections(RUN)
    assert [r.content for r in reflections] == [R1]
    assert reflections[0].supporting_observation_ids == tuple(
        sorted([observations[1].observation_id, observations[3].observation_id])
    )
    # Cap 3: partial coverage (1, 3) first, then the low, oldest uncovered one (2).
    remaining = reader.active_candidate_set(RUN).observation_ids
    assert set(remaining) == {observations[seq].observation_id for seq in (4, 5, 6)}

    requests = server.chat_requests
    assert len(requests) == 3
    assert [t["function"]["name"] for t in requests[0].body["tools"]] == ["record_reflections"]
    assert [t["function"]["name"] for t in requests[2].body["tools"]] == ["drop_observations"]
    assert "chat_template_kwargs" not in requests[0].body  # Reflector: default thinking
    assert requests[2].body["chat_template_kwargs"] == {"enable_thinking": False}  # Dropper: thinking off
    dropper_prompt = requests[2].body["messages"][1]["content"]
    assert "Maximum drops allowed this run: 3 observations." in dropper_prompt
    for request in requests:  # models only ever see request-local ids
        assert all(o.observation_id not in str(request.body) for o in observations.values())

    assert seen["reflector"] is not None and seen["reflector"].stage == "reflector"
    assert seen["reflector"].current_tokens == 30
    assert seen["dropper"] is not None and seen["dropper"].stage == "dropper"
    assert (seen["dropper"].current_tokens, seen["dropper"].target_tokens) == (30, 15)
    assert reader.activity(RUN) is None

    # An observation past the generation's watermark joins the active set; drops never come back.
    later = commit_observation(store, 7, "New fact after the generation")
    assert set(reader.active_candidate_set(RUN).observation_ids) == {
        observations[4].observation_id,
        observations[5].observation_id,
        observations[6].observation_id,
        later.observation_id,
    }


def test_second_generation_keeps_prior_reflections_first(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    first_job, _, _ = run_first_generation(store, reader, server, chat)
    commit_all(store, SECOND_SET)
    job = threshold_job(reader, settings())
    assert job.prior_active_generation_id == first_job.generation_id
    server.push_chat(
        chat_tool_calls(
            (
                "record_reflections",
                {"reflections": [{"content": R2, "supporting_observation_ids": ["4", "5"]}]},
            )
        ),
        chat_text("Nothing is clearly safe to drop."),  # the Reflector's call was accepted in full
    )

    result = reflect_generation(job, job.generation_id, settings(), ports(reader, store, chat))

    assert (result.status, result.new_reflections, result.dropped, result.retained) == ("promoted", 1, 0, 6)
    assert [(r.content, r.position) for r in reader.active_reflections(RUN)] == [(R1, 0), (R2, 1)]
    active = reader.active_generation(RUN)
    assert active is not None and active.generation_id == job.generation_id
    assert len(server.chat_requests) == 3 + 2


def test_zero_new_reflections_still_promotes_without_the_dropper(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    run_first_generation(store, reader, server, chat)
    commit_all(store, SECOND_SET)
    job = threshold_job(reader, settings())
    before = set(reader.active_candidate_set(RUN).observation_ids)
    server.push_chat(chat_text("Nothing durable to add."))

    result = reflect_generation(job, job.generation_id, settings(), ports(reader, store, chat))

    assert (result.status, result.new_reflections, result.dropped, result.retained) == ("promoted", 0, 0, 6)
    assert result.model_rounds == 1
    assert len(server.chat_requests) == 3 + 1  # no Dropper request
    assert [r.content for r in reader.active_reflections(RUN)] == [R1]
    active = reader.active_generation(RUN)
    assert active is not None and active.generation_id == job.generation_id
    assert set(reader.active_candidate_set(RUN).observation_ids) == before


def test_redelivery_after_success_makes_no_model_call(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    job, _, _ = run_first_generation(store, reader, server, chat)
    requests_before = len(server.chat_requests)
    indexed: list[str] = []
    redelivery_ports = ports(reader, store, chat)
    redelivery_ports.resolve_model = no_model
    redelivery_ports.schedule_index = indexed.append

    result = reflect_generation(job, job.generation_id, settings(), redelivery_ports)

    assert result.status == "noop_redelivery" and result.model_rounds == 0
    assert len(server.chat_requests) == requests_before
    assert indexed == [RUN]  # already_succeeded still schedules the semantic index
    assert len(reader.active_reflections(RUN)) == 1


def test_already_running_generation_is_a_silent_noop(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    claimed = store.claim_generation(
        job.generation_id,
        RUN,
        job.observation_set_hash,
        job.reflector_model,
        "1",
        1,
        6,
        "2026-07-23T11:59:00+00:00",
    )
    assert claimed == "claimed"
    noop_ports = ports(reader, store, chat)
    noop_ports.resolve_model = no_model
    indexed: list[str] = []
    noop_ports.schedule_index = indexed.append

    result = reflect_generation(job, job.generation_id, settings(), noop_ports)

    assert result.status == "noop_redelivery"
    assert server.chat_requests == []
    assert indexed == []
    generation = reader.generation(job.generation_id)
    assert generation is not None and generation.status == "running"
    assert reader.active_generation(RUN) is None


def test_set_changed_before_the_model_fails_the_generation_stale(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    commit_observation(store, 7, "Arrived after the dispatch")

    result = reflect_generation(job, job.generation_id, settings(), ports(reader, store, chat))

    assert (result.status, result.failure_code) == ("stale", "stale_observation_set")
    assert server.chat_requests == []
    generation = reader.generation(job.generation_id)
    assert generation is not None
    assert (generation.status, generation.failure_code) == ("failed", "stale_observation_set")
    assert reader.active_generation(RUN) is None
    assert reader.activity(RUN) is None


def test_set_changed_during_the_model_calls_fails_the_generation_stale(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    script_first_generation(server)
    model = HookedModel(chat, hooks={0: lambda: commit_observation(store, 7, "Committed mid reflection")})

    result = reflect_generation(job, job.generation_id, settings(), ports(reader, store, model))

    assert (result.status, result.failure_code) == ("stale", "stale_observation_set")
    assert len(server.chat_requests) == 3  # the re-check comes after both models
    generation = reader.generation(job.generation_id)
    assert generation is not None
    assert (generation.status, generation.failure_code) == ("failed", "stale_observation_set")
    assert reader.active_generation(RUN) is None
    assert reader.active_reflections(RUN) == []
    assert reader.activity(RUN) is None


def test_model_error_fails_transient_and_propagates_then_a_retry_reclaims(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    server.push_chat(http_error(500))

    with pytest.raises(ModelCallError):
        reflect_generation(job, job.generation_id, settings(), ports(reader, store, chat))

    failed = reader.generation(job.generation_id)
    assert failed is not None and (failed.status, failed.failure_code) == ("failed", "transient_runtime")
    assert reader.active_generation(RUN) is None
    assert reader.activity(RUN) is None

    script_first_generation(server)
    result = reflect_generation(job, job.generation_id, settings(), ports(reader, store, chat))

    assert result.status == "promoted"
    generation = reader.generation(job.generation_id)
    assert generation is not None and (generation.status, generation.failure_code) == ("succeeded", None)
    assert len(reader.active_reflections(RUN)) == 1


def test_failing_activity_writes_never_fail_the_job(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    script_first_generation(server)
    flaky = FlakyStatusStore(store)

    result = reflect_generation(job, job.generation_id, settings(), ports(reader, flaky, chat))

    assert result.status == "promoted" and result.dropped == 3
    assert flaky.activity_attempts == 3  # reflector write, dropper write, clear


def test_activity_row_of_a_newer_job_is_not_cleared(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    server.push_chat(chat_text("Nothing durable."))
    newer = ActivityRecord(
        session_id=RUN,
        job_id="observe-job",
        stage="observer",
        current_tokens=5,
        updated_at="2026-07-23T12:00:00+00:00",
    )
    model = HookedModel(chat, hooks={0: lambda: store.upsert_activity(newer)})

    reflect_generation(job, job.generation_id, settings(), ports(reader, store, model))

    assert reader.activity(RUN) == newer


def test_claim_conflict_raises_and_changes_nothing(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    conflicted = ScriptedStore(store, claim_generation=lambda *args, **kwargs: "conflict")

    with pytest.raises(ConflictError, match="claim conflict"):
        reflect_generation(job, job.generation_id, settings(), ports(reader, conflicted, chat))

    assert server.chat_requests == []
    assert reader.generation(job.generation_id) is None


def test_conflict_during_promotion_rethrows_without_marking_failed(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    script_first_generation(server)

    def conflict(*_args: object) -> str:
        raise ConflictError("Reflection conflict for id 'x'.")

    conflicted = ScriptedStore(store, promote_generation=conflict)

    with pytest.raises(ConflictError, match="Reflection conflict"):
        reflect_generation(job, job.generation_id, settings(), ports(reader, conflicted, chat))

    generation = reader.generation(job.generation_id)
    assert generation is not None and (generation.status, generation.failure_code) == ("running", None)
    assert reader.activity(RUN) is None


def test_under_threshold_at_claim_succeeds_without_promotion_with_fresh_timestamps(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    raised_threshold = settings(threshold=30)  # the pool holds exactly 30 tokens: equal is not over
    noop_ports = ports(reader, store, chat, clock=Clock(step_s=95))
    noop_ports.resolve_model = no_model

    result = reflect_generation(job, job.generation_id, raised_threshold, noop_ports)

    assert result.status == "succeeded_noop"
    generation = reader.generation(job.generation_id)
    assert generation is not None and generation.status == "succeeded"
    assert generation.created_at == "2026-07-23T12:00:00+00:00"
    assert generation.completed_at == "2026-07-23T12:01:35+00:00"
    assert reader.active_generation(RUN) is None
    assert server.chat_requests == []


def test_invalid_payload_is_rejected_before_any_claim(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())

    with pytest.raises(ReflectPayloadError, match="model/schema mismatch"):
        reflect_generation(job, job.generation_id, settings(model="other/model"), ports(reader, store, chat))

    assert reader.generation(job.generation_id) is None
    assert server.chat_requests == []


def test_a_generation_on_the_retained_set_never_resurrects_earlier_drops(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    # Reference §8: dropped observations never come back. The first generation drops the newest
    # observation (seq 6); the pool (seqs 1-5, 25 tokens) is still over the threshold, so the next
    # boundary dispatches a generation on the retained set alone. Its watermark must not fall below
    # the first one's, or seq 6 (past the lower watermark) would rejoin the active set.
    observations = commit_all(store, FIRST_SET)
    first = threshold_job(reader, settings())
    server.push_chat(
        chat_tool_calls(
            (
                "record_reflections",
                {"reflections": [{"content": R1, "supporting_observation_ids": ["1", "3"]}]},
            )
        ),
        chat_tool_calls(("drop_observations", {"ids": ["6"]})),  # both accepted in full: no receipts
    )
    assert reflect_generation(first, first.generation_id, settings(), ports(reader, store, chat)).dropped == 1
    retained = {observations[seq].observation_id for seq in (1, 2, 3, 4, 5)}
    assert set(reader.active_candidate_set(RUN).observation_ids) == retained

    second = threshold_job(reader, settings())
    server.push_chat(chat_text("Nothing durable to add."))
    result = reflect_generation(second, second.generation_id, settings(), ports(reader, store, chat))

    assert (result.status, result.dropped, result.retained) == ("promoted", 0, 5)
    assert set(reader.active_candidate_set(RUN).observation_ids) == retained
    generation = reader.active_generation(RUN)
    assert generation is not None and generation.required_end_seq == 6


def test_a_replayed_promotion_still_schedules_the_index(
    store: Store, reader: MemoryReader, server: ScriptedServer, chat: OpenAIChatModel
) -> None:
    # The durable StoreProxy repeats a promotion whose StoreActor died after committing it: the
    # replay answers ``noop``, yet the generation did succeed and its reflections need indexing.
    commit_all(store, FIRST_SET)
    job = threshold_job(reader, settings())
    script_first_generation(server)

    def promote_then_replay(*args: Any) -> str:
        assert store.promote_generation(*args) == "promoted"
        return store.promote_generation(*args)

    replaying = ScriptedStore(store, promote_generation=promote_then_replay)
    replay_ports = ports(reader, replaying, chat)
    indexed: list[str] = []
    replay_ports.schedule_index = indexed.append

    reflect_generation(job, job.generation_id, settings(), replay_ports)

    active = reader.active_generation(RUN)
    assert active is not None and active.generation_id == job.generation_id
    assert indexed == [RUN]
