"""The read tools' typed argument models (``protocol.read_arguments``): the same answers, codes and
messages as the hand validation they replaced (``read_validation_oracle``), on generated arguments
that mix good and bad values of every field."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from actors.read.recall import validate_recall_arguments
from actors.read.search_arguments import validate_search_arguments
from protocol.read_arguments import (
    INVALID_SEQ_RANGE_MESSAGE,
    MemorySearchArguments,
    ReadArgumentsError,
    RecallArguments,
    is_int,
)
from protocol.tool_specs import MEMORY_SEARCH_ARGUMENTS
from tests.unit.protocol import read_validation_oracle as oracle

_GOOD_DATES = st.sampled_from(
    ["2026-09-11", "2026-09-11 08:15", " 2026-02-28 ", "2024-02-29 23:59", "0001-01-01"]
)
_BAD_DATES = st.sampled_from(
    ["2026-02-29", "2026-13-01", "2026-09-11 24:00", "11-09-2026", "2026-09-11T08:15"]
)
_ODD = st.one_of(
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, allow_infinity=False),
    st.just("x\ud83d"),
    st.lists(st.integers(), max_size=2),
)


def _mostly(good: st.SearchStrategy[Any], bad: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Good values three times as often as bad ones, so that two or three checks fail at once."""
    return st.integers(0, 3).flatmap(lambda pick: good if pick else bad)


_SEARCH_FIELDS: dict[str, Any] = {
    "query": _mostly(
        st.sampled_from(["needle", "  needle  ", "é" * 5_000]),
        st.one_of(st.sampled_from(["", "   ", "x" * 10_001, "é" * 5_001]), _ODD, st.none()),
    ),
    "after": _mostly(
        st.one_of(_GOOD_DATES, st.sampled_from(["", " "]), st.none()), st.one_of(_BAD_DATES, _ODD)
    ),
    "before": _mostly(st.one_of(_GOOD_DATES, st.none()), st.one_of(_BAD_DATES, _ODD)),
    "limit": _mostly(st.one_of(st.integers(1, 60), st.none()), st.sampled_from([0, -1, True, 5.0, "5"])),
    "scope": _mostly(
        st.sampled_from(["all", "session", ["s1"], ["s1", " s1 ", "s2"], ("t",), None]),
        st.one_of(st.sampled_from(["other", [], [""], ["s"] * 51, [" "]]), _ODD),
    ),
    "mode": _mostly(
        st.sampled_from(["auto", "exact", "hybrid", None]), st.one_of(st.sampled_from(["Hybrid", ""]), _ODD)
    ),
    "query_date": _mostly(st.one_of(_GOOD_DATES, st.none()), st.one_of(_BAD_DATES, _ODD)),
}
_UNKNOWN = st.dictionaries(st.sampled_from(["sessions", "Mode", *[f"k{n}" for n in range(10)]]), st.just(1))
search_arguments = st.tuples(
    st.fixed_dictionaries({}, optional=_SEARCH_FIELDS), _mostly(st.just({}), _UNKNOWN)
).map(lambda parts: {**parts[0], **parts[1]})


@settings(max_examples=1500, deadline=None)
@given(search_arguments, st.sampled_from([None, "", "  ", "run-1", " run-2 "]))
@example({"query": "q", "after": "2026-13-01", "before": "2026-02-29"}, None)
@example({"query": "q", "after": "2026-09-12", "before": "2026-09-11", "mode": "x"}, None)
def test_memory_search_answers_as_the_hand_validation_did(
    arguments: dict[str, Any], calling: str | None
) -> None:
    expected = oracle.validate_search_arguments(arguments, calling)
    assert validate_search_arguments(arguments, calling) == expected


@st.composite
def recall_arguments(draw: st.DrawFn) -> dict[str, Any]:
    """``id`` or a seq range (``seq_end`` near the bounds of ``seq_start``), often both, sometimes bad."""
    start = draw(_mostly(st.integers(1, 5), st.one_of(st.sampled_from([0, -1, 2**63]), _ODD, st.none())))
    delta = draw(st.sampled_from([-1, 0, 1, 98, 99, 100, 101]))
    end = draw(
        _mostly(
            st.just(start + delta if is_int(start) else delta),
            st.one_of(st.sampled_from([2**63, 2**63 - 1]), _ODD, st.none()),
        )
    )
    given: dict[str, Any] = {}
    kind = draw(st.sampled_from(["id", "range", "both", "neither"]))
    if kind in ("id", "both"):
        given["id"] = draw(
            _mostly(
                st.sampled_from(["abcdef012345", " ABCDEF012345ab ", "a" * 64]),
                st.one_of(st.sampled_from(["a" * 65, "abc", "", "zzzzzzzzzzzz"]), _ODD),
            )
        )
    if kind in ("range", "both"):
        given["seq_start"] = start
        if draw(st.integers(0, 3)):
            given["seq_end"] = end
    if draw(st.booleans()):
        given["session_id"] = draw(
            _mostly(st.sampled_from(["s2", " s3 "]), st.one_of(st.sampled_from(["", "  "]), _ODD, st.none()))
        )
    if draw(st.integers(0, 3)) == 0:
        given["memory_id"] = "abcdef012345"  # not a recall argument: ignored
    return given


def _recall_shape(answer: object) -> object:
    if isinstance(answer, dict):
        return answer
    assert answer is not None
    return (answer.memory_id, answer.session_id, answer.seq_start, answer.seq_end, answer.is_full_id)  # type: ignore[attr-defined]


@settings(max_examples=1500, deadline=None)
@given(recall_arguments(), st.sampled_from(["5", "", " s "]))
def test_recall_answers_as_the_hand_validation_did(arguments: dict[str, Any], calling: str) -> None:
    new = validate_recall_arguments(arguments, calling)
    old = oracle.validate_recall_arguments(arguments, calling)
    assert _recall_shape(new) == _recall_shape(old)


def test_the_model_takes_exactly_the_tool_schema_arguments() -> None:
    assert set(MemorySearchArguments.model_fields) == set(MEMORY_SEARCH_ARGUMENTS)


def test_checked_arguments_are_normalized() -> None:
    checked = MemorySearchArguments.from_call(
        {"query": "  needle ", "limit": 80, "scope": "session", "after": " 2026-09-11 ", "mode": None},
        calling_session=" run-1 ",
    )
    assert (checked.query, checked.limit, checked.scope, checked.after, checked.mode) == (
        "needle",
        50,
        ("run-1",),
        "2026-09-11",
        "auto",
    )
    assert MemorySearchArguments.from_call({"query": "q"}).limit == 20


def test_the_first_failing_check_answers() -> None:
    with pytest.raises(ReadArgumentsError) as caught:
        # a blank query is a value check, the limit's type comes first
        MemorySearchArguments.from_call({"query": " ", "limit": "5", "mode": "bad"})
    assert (caught.value.code, caught.value.message) == (
        "invalid_limit",
        "limit must be a positive integer when provided.",
    )
    with pytest.raises(ReadArgumentsError) as caught:
        RecallArguments.from_call({"seq_start": 5, "seq_end": 200}, "s1")
    assert (caught.value.code, caught.value.message) == ("invalid_seq_range", INVALID_SEQ_RANGE_MESSAGE)


def test_recall_by_range_and_by_id() -> None:
    by_range = RecallArguments.from_call({"seq_start": 3, "session_id": " s2 "}, "s1")
    assert (by_range.memory_id, by_range.session_id, by_range.seq_start, by_range.seq_end) == ("", "s2", 3, 3)
    by_id = RecallArguments.from_call({"id": "ABCDEF012345", "seq_start": "ignored"}, " s1 ")
    assert (by_id.memory_id, by_id.session_id, by_id.seq_start) == ("abcdef012345", " s1 ", None)
