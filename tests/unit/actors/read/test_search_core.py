"""``memory_search`` exact mode without SQL (reference §13.2, §13.3)."""

from __future__ import annotations

import pytest

from actors.read.search import like_matches, merge_search_results, search_in_memory
from actors.read.search_arguments import validate_search_arguments
from persistence.search.request import SearchRequest, like_pattern
from protocol.read_arguments import sort_key
from protocol.records import ObservationRecord, ReflectionRecord
from tests.unit.actors.read.factories import hex_id, observation, reflection


def _request(**arguments: object) -> SearchRequest:
    result = validate_search_arguments(arguments)
    assert isinstance(result, SearchRequest), result
    return result


def _error(**arguments: object) -> tuple[object, object]:
    result = validate_search_arguments(arguments)
    assert isinstance(result, dict), result
    assert result["ok"] is False
    return result["error"], result["message"]


# ------------------------------------------------------------------------------------- validation


def test_defaults_and_trimmed_query() -> None:
    request = _request(query="  2510 ")
    assert request == SearchRequest(query="2510", limit=20)


def test_limit_is_clamped_to_50() -> None:
    assert _request(query="x", limit=99).limit == 50
    assert _request(query="x", limit=50).limit == 50
    assert _request(query="x", limit=1).limit == 1


@pytest.mark.parametrize(
    ("arguments", "code", "message"),
    [
        ({"query": 5}, "invalid_query", "query must be a non-empty string."),
        ({}, "invalid_query", "query must be a non-empty string."),
        ({"query": " \t\n"}, "invalid_query", "query must be a non-empty string."),
        (
            {"query": "x", "after": 5},
            "invalid_after",
            "after must be YYYY-MM-DD or YYYY-MM-DD HH:MM when provided.",
        ),
        (
            {"query": "x", "before": []},
            "invalid_before",
            "before must be YYYY-MM-DD or YYYY-MM-DD HH:MM when provided.",
        ),
        ({"query": "x", "limit": 0}, "invalid_limit", "limit must be a positive integer when provided."),
        ({"query": "x", "limit": "5"}, "invalid_limit", "limit must be a positive integer when provided."),
        ({"query": "x", "limit": 2.0}, "invalid_limit", "limit must be a positive integer when provided."),
        ({"query": "x", "limit": True}, "invalid_limit", "limit must be a positive integer when provided."),
        (
            {"query": "x", "after": "yesterday"},
            "invalid_after",
            "after must be YYYY-MM-DD or YYYY-MM-DD HH:MM.",
        ),
        (
            {"query": "x", "before": "2026-9-11"},
            "invalid_before",
            "before must be YYYY-MM-DD or YYYY-MM-DD HH:MM.",
        ),
        (
            {"query": "x", "after": "2026-09-11T08:15"},
            "invalid_after",
            "after must be YYYY-MM-DD or YYYY-MM-DD HH:MM.",
        ),
        (
            {"query": "x", "after": "２０２６-09-11"},
            "invalid_after",
            "after must be YYYY-MM-DD or YYYY-MM-DD HH:MM.",
        ),
        (
            {"query": "x", "after": "2026-02-30"},
            "invalid_after",
            "after must be a real calendar date (YYYY-MM-DD or YYYY-MM-DD HH:MM).",
        ),
        (
            {"query": "x", "before": "2026-09-11 24:00"},
            "invalid_before",
            "before must be a real calendar date (YYYY-MM-DD or YYYY-MM-DD HH:MM).",
        ),
        (
            {"query": "x", "after": "2026-09-12", "before": "2026-09-11"},
            "invalid_date_range",
            "after must be less than or equal to before.",
        ),
        (
            {"query": "x", "after": "2026-09-11 08:16", "before": "2026-09-11 08:15"},
            "invalid_date_range",
            "after must be less than or equal to before.",
        ),
    ],
)
def test_validation_errors(arguments: dict[str, object], code: str, message: str) -> None:
    assert _error(**arguments) == (code, message)


def test_validation_order() -> None:
    assert _error(query=5, limit=0)[0] == "invalid_query"
    assert _error(query="  ", limit=0)[0] == "invalid_limit"  # type checks come before the blank check
    assert _error(query="  ", after="nope")[0] == "invalid_query"
    assert _error(query="x", after="nope", before="nope")[0] == "invalid_after"
    assert _error(query="x", after="2026-02-30", before="nope")[0] == "invalid_after"
    assert _error(query="x", before="2026-02-30", limit=0)[0] == "invalid_limit"


def test_blank_and_null_bounds_are_absent() -> None:
    request = _request(query="x", after="   ", before=None, limit=None)
    assert request.bounds.observation_after is None and request.bounds.reflection_before is None
    assert request.limit == 20


def test_bound_normalization() -> None:
    dates = _request(query="x", after=" 2026-09-10 ", before="2026-09-11")
    assert (dates.bounds.observation_after, dates.bounds.observation_before) == (
        "2026-09-10 00:00",
        "2026-09-11 23:59",
    )
    assert (dates.bounds.reflection_after, dates.bounds.reflection_before) == (
        "2026-09-10T00:00:00+00:00",
        "2026-09-11T23:59:59.999999+00:00",
    )
    minutes = _request(query="x", after="2026-09-11 08:15", before="2026-09-11 08:15")
    assert (minutes.bounds.observation_after, minutes.bounds.observation_before) == (
        "2026-09-11 08:15",
        "2026-09-11 08:15",
    )
    assert (minutes.bounds.reflection_after, minutes.bounds.reflection_before) == (
        "2026-09-11T08:15:00+00:00",
        "2026-09-11T08:15:59.999999+00:00",
    )


def test_range_uses_whole_day_upper_bound() -> None:
    assert isinstance(
        validate_search_arguments({"query": "x", "after": "2026-09-11 23:59", "before": "2026-09-11"}),
        SearchRequest,
    )
    assert isinstance(
        validate_search_arguments({"query": "x", "after": "2026-02-28", "before": "2026-02-28"}),
        SearchRequest,
    )


def test_sort_key() -> None:
    assert sort_key("2026-09-11 08:15") == "2026-09-11T08:15:00"
    assert sort_key("2026-09-11T08:15:30+02:00") == "2026-09-11T08:15:30"
    assert sort_key("2026-09-11 08:15:30.5") == "2026-09-11T08:15:30"
    assert sort_key("garbage") == "garbage"


# ------------------------------------------------------------------------------------------- LIKE


def test_like_pattern_escapes() -> None:
    assert like_pattern("  100%_a\\b ") == "%100\\%\\_a\\\\b%"


@pytest.mark.parametrize(
    ("query", "text", "matches"),
    [
        ("100%", "we hit 100% today", True),
        ("100%", "we hit 1000 today", False),
        ("tool_name", "the tool_name field", True),
        ("tool_name", "the toolXname field", False),
        ("ALPHATOOL", "uses alphatool here", True),
        ("ÉTÉ", "été", False),  # only ASCII letters fold
        ("a\\b", "path a\\b", True),
        ("a\\b", "path ab", False),
        ("2510", "x", False),
    ],
)
def test_like_matches_escaped_queries(query: str, text: str, matches: bool) -> None:
    assert like_matches(like_pattern(query), text) is matches


def test_like_matches_raw_patterns() -> None:
    assert like_matches("a_c", "abc") and not like_matches("a_c", "ac")
    assert like_matches("%", "") and not like_matches("_", "")
    assert not like_matches("abc\\", "abc\\")  # a lone trailing escape never matches
    assert like_matches("ab", "ab\0cd")  # SQLite stops at NUL


# ----------------------------------------------------------------------------------- merge / search


def _memories() -> tuple[list[ObservationRecord], list[ReflectionRecord]]:
    observations = [
        observation("b1", "Ticket 2510 opened", timestamp="2026-09-09 10:00", session_id="1"),
        observation("b2", "Ticket 2510 fixed", timestamp="2026-09-11 09:00", session_id="2"),
        observation("b3", "unrelated", timestamp="2026-09-11 09:30"),
    ]
    reflections = [
        reflection("a1", "Ticket 2510 was a race", created_at="2026-09-11T08:15:30+00:00", session_id="3"),
    ]
    return observations, reflections


def test_search_counts_and_truncation_across_sessions() -> None:
    observations, reflections = _memories()
    full = search_in_memory(_request(query="2510"), observations, reflections)
    assert (full["count"], full["truncated"]) == (3, False)
    assert {item["session_id"] for item in full["results"]} == {"1", "2", "3"}  # type: ignore[attr-defined]
    one = search_in_memory(_request(query="2510", limit=1), observations, reflections)
    assert (one["count"], one["truncated"], one["limit"]) == (1, True, 1)
    assert set(one) == {"ok", "query", "limit", "truncated", "count", "results"}


def test_search_date_window_keeps_the_day() -> None:
    observations, reflections = _memories()
    result = search_in_memory(
        _request(query="2510", after="2026-09-10", before="2026-09-11"), observations, reflections
    )
    assert [item["id"] for item in result["results"]] == [hex_id("b2"), hex_id("a1")]  # type: ignore[attr-defined]


def test_search_same_minute_bounds_match_reflection_seconds() -> None:
    observations, reflections = _memories()
    result = search_in_memory(
        _request(query="2510", after="2026-09-11 08:15", before="2026-09-11 08:15"), observations, reflections
    )
    assert [item["id"] for item in result["results"]] == [hex_id("a1")]  # type: ignore[attr-defined]
    earlier = search_in_memory(
        _request(query="2510", after="2026-09-11 08:14", before="2026-09-11 08:14"), observations, reflections
    )
    assert earlier["count"] == 0


def test_merge_sort_order_example() -> None:
    result = merge_search_results(
        "x",
        10,
        [
            observation("c1", "x", timestamp="2026-09-11 01:00"),
            observation("c2", "x", timestamp="2026-09-11 13:00"),
            observation("c3", "x", timestamp="2026-09-11 12:00"),
        ],
        [reflection("c4", "x", created_at="2026-09-11T08:00:00+00:00")],
    )
    results = result["results"]
    assert isinstance(results, list)
    assert [(item["kind"], item["timestamp"]) for item in results] == [
        ("observation", "2026-09-11 13:00"),
        ("observation", "2026-09-11 12:00"),
        ("reflection", "2026-09-11T08:00:00+00:00"),
        ("observation", "2026-09-11 01:00"),
    ]


def test_merge_ties_observation_first_then_each_tables_order() -> None:
    # Each table's rows come in result order (observations of one minute in source order, the
    # latest first); the merge keeps it, whatever the ids.
    result = merge_search_results(
        "x",
        10,
        [
            observation("e2", "x", timestamp="2026-09-11 08:00"),
            observation("e1", "x", timestamp="2026-09-11 08:00"),
        ],
        [reflection("e0", "x", created_at="2026-09-11T08:00:00+00:00")],
    )
    results = result["results"]
    assert isinstance(results, list)
    assert [item["id"] for item in results] == [hex_id("e2"), hex_id("e1"), hex_id("e0")]


def test_result_item_shapes() -> None:
    result = merge_search_results(
        "q",
        5,
        [
            observation(
                "b1", "  multi \n line ", timestamp="2026-09-11 08:00", relevance="critical", session_id="7"
            )
        ],
        [reflection("a1", "r\t r", created_at="2026-09-10T00:00:00+00:00", session_id="8")],
    )
    assert result["results"] == [
        {
            "kind": "observation",
            "session_id": "7",
            "id": hex_id("b1"),
            "display_id": "b10000000000",
            "timestamp": "2026-09-11 08:00",
            "importance": "critical",
            "content": "multi line",
        },
        {
            "kind": "reflection",
            "session_id": "8",
            "id": hex_id("a1"),
            "display_id": "a10000000000",
            "timestamp": "2026-09-10T00:00:00+00:00",
            "content": "r r",
        },
    ]
    assert (result["ok"], result["query"], result["truncated"]) == (True, "q", False)


@pytest.mark.parametrize("value", ["0001-01-01", "0999-12-31 23:59", "0000-02-29", "0100-01-01 00:00"])
def test_years_before_1000_are_real_calendar_dates(value: str) -> None:
    # The original's strict round trip formats the year with at least 4 digits; "0001-01-01" is a
    # common "since the beginning" bound and must not be rejected as unreal.
    request = _request(query="x", after=value)
    assert request.bounds.observation_after is not None and request.bounds.observation_after.startswith(
        value[:10]
    )


@pytest.mark.parametrize("value", ["0100-02-29", "1900-02-29", "0001-04-31 00:00", "0001-01-01 23:60"])
def test_unreal_dates_before_1000_are_still_rejected(value: str) -> None:
    assert _error(query="x", after=value)[0] == "invalid_after"


@pytest.mark.parametrize("query", ["\ud83d", "build \udc00 failed", "\ud83dx"])
def test_query_with_a_lone_surrogate_is_an_invalid_query(query: str) -> None:
    # A truncated emoji escape ("\ud83d") decodes to a string SQLite cannot bind: it is bad input.
    assert _error(query=query) == ("invalid_query", "query must be a non-empty string.")
