"""``builtin/extractive``: observations, reflections and drops from rendered inputs (§7.4, §9.5, §9.7)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from actors.models.builtin import (
    MAX_CONTENT_CHARS,
    MAX_MESSAGE_CHARS,
    BuiltinExtractiveModel,
    extract_observations,
    find_paths,
    propose_drops,
    propose_reflections,
)
from actors.models.chat import ChatResponse, run_tool_loop
from protocol.tool_specs import (
    DROP_OBSERVATIONS,
    RECORD_OBSERVATIONS,
    RECORD_REFLECTIONS,
    drop_observations_spec,
    record_observations_spec,
    record_reflections_spec,
)
from protocol.tools import (
    observation_items,
    observation_receipt,
    parse_observation_draft,
    parse_reflection_draft,
)

CHUNK = """CURRENT REFLECTIONS:
(none yet)

CURRENT OBSERVATIONS:
[obs-1] 2026-07-22 10:00 [medium] Run ended with reason completed.

NEW SOURCE-ADDRESSED CONVERSATION CHUNK:
[Source entry id: run-1:1]
[User @ 2026-07-23 08:00]: Use feature flags for the new checkout in src/checkout/flags.py
and keep the old path working.

[Source entry id: run-1:2]
[Assistant @ 2026-07-23 08:01]: {"role":"assistant","content":null,"tool_calls":[{"id":"c1"}]}
[Tool call c1 name=read args={"path":"src/checkout/flags.py"}]
[Source entry id: run-1:3]
[Tool result for read @ 2026-07-23 08:02]: def enabled(name): return False

[Source entry id: run-1:4]
[Tool result for bash (error) @ 2026-07-23 08:03]: pytest failed: tests/test_flags.py::test_default
AssertionError: expected True

[Source entry id: run-1:5]
[Assistant @ 2026-07-23 08:04]: I added the FEATURE_CHECKOUT flag; the default test passes now.

[Source entry id: run-1:7]
[Outcome @ 2026-07-23 08:05]: agent_end reason=completed

Current local time fallback: 2026-07-23 09:15"""

CHUNK_REFS = {("run-1", seq) for seq in (1, 2, 3, 4, 5, 7)}
CHUNK_TIMES = {f"2026-07-23 08:0{minute}" for minute in range(6)}

POOL = """CURRENT REFLECTIONS:
[{rid}] The team ships with blue-green deployments.

CURRENT OBSERVATIONS:
[1] 2026-07-20 09:00 [high] [coverage: none] User request: Use feature flags in src/checkout/flags.py
[2] 2026-07-20 09:05 [low] [coverage: none] Tool read touched src/checkout/flags.py
[3] 2026-07-20 09:10 [medium] [coverage: partial] Assistant replied: the pipeline uses blue-green deployments
[4] 2026-07-21 10:00 [high] [coverage: none] Tool bash failed: FEATURE_CHECKOUT default is wrong
[5] 2026-07-21 10:30 [medium] [coverage: none] Assistant replied: set FEATURE_CHECKOUT default to true
[6] 2026-07-22 08:00 [low] [coverage: none] Run ended with reason completed.
""".replace("{rid}", "a" * 64)

REFLECT_INPUT = (
    POOL + "\nCrystallize any missing durable facts or patterns into new reflections. "
    "If nothing is stable enough, do not call the tool."
)

DROP_POOL = """CURRENT REFLECTIONS:
[{rid}] src/checkout/flags.py holds the checkout feature flags.

CURRENT OBSERVATIONS:
[1] 2026-07-20 09:00 [high] [coverage: partial] User request: Use feature flags in src/checkout/flags.py
[2] 2026-07-20 09:05 [low] [coverage: partial] Tool read touched src/checkout/flags.py
[3] 2026-07-20 09:01 [medium] [coverage: strong] Assistant replied: flags live in one module
[4] 2026-07-19 09:00 [low] [coverage: none] Run ended with reason completed.
[5] 2026-07-21 09:00 [low] [coverage: strong] Tool read touched README.md

Active observation pool: ~1,200 tokens; target: ~1,000 tokens; fullness against target: ~120%; over target by ~200 tokens.
Maximum drops allowed this run: {cap} observation{s}. This maximum is sized to move the active pool toward the target if every proposed drop is clearly safe.
This maximum is a hard upper bound, not a target. Drop fewer or none if fewer observations are clearly safe.
""".replace("{rid}", "b" * 64)  # noqa: E501


def drop_input(cap: int) -> str:
    return DROP_POOL.replace("{cap}", f"{cap:,}").replace("{s}", "" if cap == 1 else "s")


def ask(text: str, spec: Mapping[str, Any]) -> ChatResponse:
    messages = [{"role": "system", "content": "stage prompt"}, {"role": "user", "content": text}]
    return BuiltinExtractiveModel().complete("extractive", messages, [spec], 10.0)


def arguments_of(response: ChatResponse) -> dict[str, Any]:
    assert len(response.tool_calls) == 1
    parsed = json.loads(response.tool_calls[0].arguments)
    assert isinstance(parsed, dict)
    return parsed


# --- record_observations ---------------------------------------------------------------------------


def test_observations_are_valid_and_cite_only_the_chunk() -> None:
    response = ask(CHUNK, record_observations_spec())
    assert response.tool_calls[0].name == RECORD_OBSERVATIONS
    items = observation_items(arguments_of(response))
    assert items

    for item in items:
        draft = parse_observation_draft(item)
        assert draft is not None, item
        assert draft.cites_only(CHUNK_REFS)
        assert draft.timestamp in CHUNK_TIMES
        assert len(draft.content) <= MAX_CONTENT_CHARS


def test_observations_cover_requests_errors_files_answers_and_outcomes() -> None:
    observations = extract_observations(CHUNK)
    by_ref = {(o["source_refs"][0]["seq"], o["relevance"]): o["content"] for o in observations}

    assert by_ref[(1, "high")].startswith("User request: Use feature flags")
    assert "src/checkout/flags.py" in by_ref[(2, "low")]  # file touched by the tool call
    assert by_ref[(4, "high")].startswith("Tool bash failed: pytest failed")
    assert "tests/test_flags.py" in by_ref[(4, "low")]
    assert "FEATURE_CHECKOUT" in by_ref[(5, "medium")]
    assert all(seq != 3 for seq, _ in by_ref)  # plain tool output with no path: nothing to keep
    # The outcome line equals an observation already in memory, so it is not restated.
    assert all(seq != 7 for seq, _ in by_ref)
    assert all("\n" not in o["content"] for o in observations)
    assert observations[0]["timestamp"] == "2026-07-23 08:00"


def test_outcomes_and_model_step_failures() -> None:
    chunk = (
        "[Source entry id: r:1]\n[Outcome @ 2026-01-01 00:00]: llm_step_failed retryable=false\n\n"
        "[Source entry id: r:2]\n[Outcome @ 2026-01-01 00:01]: agent_end reason=cancelled\n"
    )
    observations = extract_observations(chunk)
    assert [(o["relevance"], o["content"]) for o in observations] == [
        ("high", "Model step failed (retryable=false)."),
        ("medium", "Run ended with reason cancelled."),
    ]


def test_short_messages_are_kept_whole_on_one_line() -> None:
    said = "The invoice total was 4,512.30 EUR and it is due on the 14th, paid by transfer. " * 12
    chunk = (
        "[Source entry id: r:1]\n[User @ 2026-01-01 00:00]: " + said + "\nsecond line\n\n"
        "[Source entry id: r:2]\n[Assistant @ 2026-01-01 00:01]: " + said + "\n"
    )
    assert len(said) > MAX_CONTENT_CHARS
    observations = extract_observations(chunk)
    assert [o["content"] for o in observations] == [
        "User request: " + " ".join((said + " second line").split()),
        "Assistant replied: " + " ".join(said.split()),
    ]


def test_long_text_is_trimmed_to_one_line_and_secrets_are_not_copied() -> None:
    chunk = (
        "[Source entry id: r:1]\n[User @ 2026-01-01 00:00]: " + "word " * (MAX_MESSAGE_CHARS // 4) + "\n\n"
        "[Source entry id: r:2]\n[User @ 2026-01-01 00:01]: my api_key=sk-live-123 please store it\n"
    )
    observations = extract_observations(chunk)
    assert len(observations) == 1
    assert len(observations[0]["content"]) <= MAX_CONTENT_CHARS
    assert observations[0]["content"].endswith("…")


def test_same_input_same_output() -> None:
    first = ask(CHUNK, record_observations_spec())
    second = ask(CHUNK, record_observations_spec())
    assert first == second
    assert ask(REFLECT_INPUT, record_reflections_spec()) == ask(REFLECT_INPUT, record_reflections_spec())


def test_one_tool_round_then_a_final_message_through_the_tool_loop() -> None:
    received: list[object] = []

    def handler(arguments: object) -> Any:
        received.append(arguments)
        assert isinstance(arguments, dict)
        items = observation_items(arguments) or []
        return observation_receipt(len(items), 0, 0, len(items))

    result = run_tool_loop(
        BuiltinExtractiveModel(),
        model="builtin/extractive",
        instructions="observer prompt",
        input_text=CHUNK,
        tools=[(record_observations_spec(), handler)],
        max_tool_calls=6,
        max_duration_s=60,
    )

    assert (result.tool_calls, result.rounds, result.stop_reason) == (1, 2, "model_stopped")
    assert len(received) == 1


def test_nothing_to_record_means_no_tool_call() -> None:
    for text in (
        "",
        "hello",
        "NEW SOURCE-ADDRESSED CONVERSATION CHUNK:\n[Source entry id: bad]\n[User @ x]: y",
    ):
        response = ask(text, record_observations_spec())
        assert response.tool_calls == ()
        assert response.text


def test_unknown_tools_or_missing_user_message_mean_no_tool_call() -> None:
    other = {"type": "function", "function": {"name": "memory_search", "parameters": {}}}
    assert ask(CHUNK, other).tool_calls == ()
    response = BuiltinExtractiveModel().complete("extractive", [], [record_observations_spec()], 1.0)
    assert response.tool_calls == ()


_LINE = st.one_of(
    st.builds("[Source entry id: {}:{}]".format, st.sampled_from(["r", "run:x", ""]), st.integers(-1, 5)),
    st.builds(
        "[{} @ 2026-01-0{} 1{}:00]: {}".format,
        st.sampled_from(["User", "Assistant", "Outcome", "Tool result for bash (error)", "Custom"]),
        st.integers(1, 9),
        st.integers(0, 9),
        st.text(max_size=40),
    ),
    st.builds("[Tool call c name={} args={}]".format, st.sampled_from(["edit", "x"]), st.text(max_size=40)),
    st.just("Current local time fallback: 2026-02-02 02:02"),
    st.text(max_size=60),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=12))
def test_any_input_gives_valid_observations_citing_labels_present(lines: list[str]) -> None:
    text = "\n".join(lines)
    labels = {
        (run, int(seq))
        for run, seq in re.findall(r"^\[Source entry id: (.+):(\d+)\]\s*$", text, re.MULTILINE)
    }
    response = ask(text, record_observations_spec())
    if not response.tool_calls:
        return
    for item in arguments_of(response)["observations"]:
        draft = parse_observation_draft(item)
        assert draft is not None, item
        assert draft.cites_only(labels)


# --- record_reflections -------------------------------------------------------------------------------


def test_reflections_group_observations_sharing_paths_or_identifiers() -> None:
    response = ask(REFLECT_INPUT, record_reflections_spec())
    assert response.tool_calls[0].name == RECORD_REFLECTIONS
    reflections = arguments_of(response)["reflections"]

    supports = [tuple(item["supporting_observation_ids"]) for item in reflections]
    assert supports == [("1", "2"), ("4", "5")]
    for item in reflections:
        draft = parse_reflection_draft(item)
        assert draft is not None
    assert "src/checkout/flags.py" in reflections[0]["content"]
    assert "FEATURE_CHECKOUT" in reflections[1]["content"]


def test_topics_already_in_a_reflection_are_not_reflected_again() -> None:
    text = REFLECT_INPUT.replace(
        "blue-green deployments.", "blue-green deployments; see src/checkout/flags.py."
    )
    reflections = propose_reflections(text)
    assert [item["supporting_observation_ids"] for item in reflections] == [["4", "5"]]


def test_no_shared_topic_means_no_reflection_call() -> None:
    text = (
        "CURRENT REFLECTIONS:\n(none yet)\n\nCURRENT OBSERVATIONS:\n"
        "[1] 2026-01-01 00:00 [low] [coverage: none] src/a.py\n"
        "[2] 2026-01-01 00:01 [low] [coverage: none] src/b.py\n"
    )
    assert ask(text, record_reflections_spec()).tool_calls == ()


# --- drop_observations --------------------------------------------------------------------------------


def test_drops_are_the_oldest_low_or_medium_observations_a_reflection_cites() -> None:
    response = ask(drop_input(2), drop_observations_spec())
    assert response.tool_calls[0].name == DROP_OBSERVATIONS
    assert arguments_of(response)["ids"] == ["3", "2"]
    # Uncited (4) and high (1) are never proposed, however large the cap.
    assert propose_drops(drop_input(1000)) == ["3", "2", "5"]


def test_zero_cap_or_no_cap_means_no_drop_call() -> None:
    assert ask(drop_input(0), drop_observations_spec()).tool_calls == ()
    assert propose_drops(DROP_POOL.split("Maximum")[0]) == []


def test_find_paths_ignores_urls_and_prose() -> None:
    text = "see https://example.com/a/b.html and src/app.py:12, README.md, e.g. and/or ~/x/y.toml"
    assert find_paths(text) == ["src/app.py:12", "README.md", "~/x/y.toml"]
