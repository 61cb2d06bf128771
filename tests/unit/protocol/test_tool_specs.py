"""Tool specs: exact parameter schemas (§7.7, §9.5, §9.7, §13.1, §13.5) and mode-dependent texts."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from protocol.tool_specs import (
    MEMORY_SEARCH_ARGUMENTS,
    MEMORY_SEARCH_MAX_SCOPE_SESSIONS,
    MEMORY_SEARCH_MODES,
    MEMORY_SEARCH_SUMMARY,
    MEMORY_TOOLS_GUIDANCE,
    drop_observations_spec,
    memory_search_spec,
    memory_tool_specs,
    memory_tools_guidance,
    recall_spec,
    record_observations_spec,
    record_reflections_spec,
)

RECORD_OBSERVATIONS_SCHEMA = r"""
{"type":"object","additionalProperties":false,"required":["observations"],
 "properties":{"observations":{"type":"array","items":{"type":"object",
  "additionalProperties":false,"required":["timestamp","content","relevance","source_refs"],
  "properties":{
   "timestamp":{"type":"string","pattern":"^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}$"},
   "content":{"type":"string","minLength":1,"description":"Single-line plain prose. No markdown/tags/embedded timestamp."},
   "relevance":{"type":"string","enum":["low","medium","high","critical"]},
   "source_refs":{"type":"array","minItems":1,"items":{"type":"object","additionalProperties":false,
     "required":["run_id","seq"],"properties":{"run_id":{"type":"string","minLength":1},
     "seq":{"type":"integer","minimum":1}}}}}}}}}
"""  # noqa: E501

RECORD_REFLECTIONS_SCHEMA = r"""
{"type":"object","additionalProperties":false,"required":["reflections"],
 "properties":{"reflections":{"type":"array","minItems":1,
   "description":"New durable reflections only (delta). Existing reflections are retained automatically.",
   "items":{"type":"object","additionalProperties":false,
     "required":["content","supporting_observation_ids"],
     "properties":{"content":{"type":"string","minLength":1,"description":"Single-line plain prose durable fact."},
       "supporting_observation_ids":{"type":"array","minItems":1,"items":{"type":"string","minLength":1}}}}}}}
"""  # noqa: E501

DROP_OBSERVATIONS_SCHEMA = r"""
{"type":"object","additionalProperties":false,"required":["ids"],
 "properties":{"ids":{"type":"array","minItems":1,"items":{"type":"string","minLength":1},
   "description":"Active observation ids to propose for drop."},
  "reason":{"type":"string","description":"Optional unpersisted rationale for the proposal."}}}
"""

RECALL_SCHEMA = r"""
{"type":"object","additionalProperties":false,
 "properties":{
  "id":{"type":"string","pattern":"^[a-f0-9]{12,64}$",
    "description":"Full lowercase hex id of an observation, reflection or transcript event, or a unique 12–64 character prefix from compacted memory, /om-view, memory_search, or a previous recall result. Not a topic search."},
  "session_id":{"type":"string","minLength":1,
    "description":"Optional originating session id from memory_search. Omit to keep current-session recall."},
  "seq_start":{"type":"integer","minimum":1,
    "description":"Instead of an id: the first seq of a range of the session's events to read (a memory_search result's source.seq_start)."},
  "seq_end":{"type":"integer","minimum":1,
    "description":"With seq_start: the last seq of the range (default seq_start; at most 100 events)."}}}
"""  # noqa: E501

SEARCH_SCHEMA = r"""
{"type":"object","additionalProperties":false,"required":["query"],
 "properties":{
  "query":{"type":"string","minLength":1,"description":"<mode-specific>"},
  "after":{"type":"string","pattern":"^\\d{4}-\\d{2}-\\d{2}( \\d{2}:\\d{2})?$",
    "description":"Optional inclusive lower bound on memory date (YYYY-MM-DD or YYYY-MM-DD HH:MM). Omit to search all retained history."},
  "before":{"type":"string","pattern":"^\\d{4}-\\d{2}-\\d{2}( \\d{2}:\\d{2})?$",
    "description":"Optional inclusive upper bound on memory date (YYYY-MM-DD or YYYY-MM-DD HH:MM). Omit to search all retained history."},
  "limit":{"type":"integer","minimum":1,"maximum":50,"description":"<mode-specific>"}}}
"""  # noqa: E501


def _check_function(spec: dict[str, Any], name: str) -> dict[str, Any]:
    assert set(spec) == {"type", "function"} and spec["type"] == "function"
    function = spec["function"]
    assert set(function) == {"name", "description", "parameters"}
    assert function["name"] == name
    assert function["description"].strip()
    parameters: dict[str, Any] = function["parameters"]
    return parameters


@pytest.mark.parametrize(
    ("spec", "name", "schema"),
    [
        (record_observations_spec(), "record_observations", RECORD_OBSERVATIONS_SCHEMA),
        (record_reflections_spec(), "record_reflections", RECORD_REFLECTIONS_SCHEMA),
        (drop_observations_spec(), "drop_observations", DROP_OBSERVATIONS_SCHEMA),
        (recall_spec(), "recall", RECALL_SCHEMA),
    ],
)
def test_parameter_schemas_are_exact(spec: dict[str, Any], name: str, schema: str) -> None:
    parameters = _check_function(spec, name)
    assert json.dumps(parameters, sort_keys=False) == json.dumps(json.loads(schema), sort_keys=False)


@pytest.mark.parametrize("hybrid", [False, True])
def test_memory_search_schema_is_the_same_in_both_modes(hybrid: bool) -> None:
    parameters = _check_function(memory_search_spec(hybrid), "memory_search")
    expected = json.loads(SEARCH_SCHEMA)
    for field in ("query", "limit"):
        assert parameters["properties"][field]["description"].strip()
        parameters["properties"][field]["description"] = "<mode-specific>"
    # omray's own, after the reference's
    assert list(parameters["properties"])[4:] == ["scope", "mode", "query_date"]
    query_date = parameters["properties"]["query_date"]
    assert query_date["pattern"] == parameters["properties"]["after"]["pattern"]
    assert "last week" in query_date["description"]
    del parameters["properties"]["scope"], parameters["properties"]["mode"]
    del parameters["properties"]["query_date"]
    assert parameters == expected
    pattern = re.compile(parameters["properties"]["after"]["pattern"])
    assert (
        pattern.match("2026-09-11") and pattern.match("2026-09-11 08:15") and not pattern.match("yesterday")
    )


@pytest.mark.parametrize("hybrid", [False, True])
def test_scope_and_mode_are_described_with_examples(hybrid: bool) -> None:
    properties = memory_search_spec(hybrid)["function"]["parameters"]["properties"]
    assert tuple(properties) == MEMORY_SEARCH_ARGUMENTS
    scope = properties["scope"]
    text_form, list_form = scope["anyOf"]
    assert text_form == {"type": "string", "enum": ["all", "session"]}
    assert list_form["type"] == "array" and list_form["minItems"] == 1
    assert list_form["maxItems"] == MEMORY_SEARCH_MAX_SCOPE_SESSIONS
    assert '"session"' in scope["description"] and "e.g. [" in scope["description"]
    mode = properties["mode"]
    assert mode["enum"] == list(MEMORY_SEARCH_MODES) == ["auto", "exact", "hybrid"]
    assert "e.g." in mode["description"]
    assert ("not configured" in mode["description"]) is not hybrid


def test_modes_differ_and_hybrid_never_mentions_reranker_or_rrf() -> None:
    exact, hybrid = memory_search_spec(False), memory_search_spec(True)
    assert exact["function"]["description"] != hybrid["function"]["description"]
    texts = json.dumps([hybrid, MEMORY_SEARCH_SUMMARY["hybrid"], MEMORY_TOOLS_GUIDANCE["hybrid"]]).lower()
    assert "rerank" not in texts and "rrf" not in texts


def test_guidance_lines() -> None:
    exact, hybrid = memory_tools_guidance(False), memory_tools_guidance(True)
    assert len(exact["memory_search"]) == len(hybrid["memory_search"]) == 7
    assert len(exact["recall"]) == 6 and exact["recall"] == hybrid["recall"]
    differing = [
        i
        for i, (a, b) in enumerate(zip(exact["memory_search"], hybrid["memory_search"], strict=True))
        if a != b
    ]
    assert differing == [1, 2, 3]
    assert all(0 < len(line) <= 120 for lines in (*exact.values(), *hybrid.values()) for line in lines)


def test_specs_are_fresh_copies() -> None:
    spec = recall_spec()
    spec["function"]["parameters"]["properties"].clear()
    assert recall_spec()["function"]["parameters"]["properties"]
    assert [s["function"]["name"] for s in memory_tool_specs(True)] == ["memory_search", "recall"]
