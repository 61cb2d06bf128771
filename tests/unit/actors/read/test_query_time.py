"""Time expressions in queries, resolved against fixed clocks (``actors.read.query_time``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from actors.read.query_time import query_time_window
from persistence.search.request import TimeWindow

TUESDAY = datetime(2023, 5, 30, 10, 0, tzinfo=UTC)
"""The clock of most cases: Tuesday 30 May 2023, 10:00 UTC."""
NEW_YEAR = datetime(2024, 1, 2, 9, 0, tzinfo=UTC)
"""A clock just after a year boundary: Tuesday 2 January 2024."""

CASES: list[tuple[str, datetime, tuple[str, str] | None]] = [
    # explicit dates, most precise first
    ("what happened on 2023-05-14?", TUESDAY, ("2023-05-14", "2023-05-15")),
    ("notes from 2023/5/3", TUESDAY, ("2023-05-03", "2023-05-04")),
    ("the meeting on March 3rd, 2022", TUESDAY, ("2022-03-03", "2022-03-04")),
    ("the 3rd of March 2022 call", TUESDAY, ("2022-03-03", "2022-03-04")),
    ("which activity did she take up in October 2023?", TUESDAY, ("2023-10-01", "2023-11-01")),
    ("plans for Sept. 2021", TUESDAY, ("2021-09-01", "2021-10-01")),
    ("what did I buy on May 20", TUESDAY, ("2023-05-20", "2023-05-21")),
    ("what did I buy on June 20", TUESDAY, ("2022-06-20", "2022-06-21")),  # latest not after now
    ("the 14th of February dinner", TUESDAY, ("2023-02-14", "2023-02-15")),
    ("museums I visited in the month of February", TUESDAY, ("2023-02-01", "2023-03-01")),
    ("trips in December", NEW_YEAR, ("2023-12-01", "2024-01-01")),
    ("what did I start in 2022", TUESDAY, ("2022-01-01", "2023-01-01")),
    # relative phrases
    ("what did I eat yesterday", TUESDAY, ("2023-05-29", "2023-05-30")),
    ("the day before yesterday", TUESDAY, ("2023-05-28", "2023-05-29")),
    ("what did I fix today", TUESDAY, ("2023-05-30", "2023-05-31")),
    ("two days ago I called someone", TUESDAY, ("2023-05-28", "2023-05-29")),
    ("10 days ago", TUESDAY, ("2023-05-18", "2023-05-23")),  # people round: widened by two days
    ("a week ago", TUESDAY, ("2023-05-17", "2023-05-30")),
    ("three months ago", TUESDAY, ("2023-01-22", "2023-03-11")),  # February, widened by ten days
    ("hours of yoga last week", TUESDAY, ("2023-05-22", "2023-05-29")),
    ("this week's standup", TUESDAY, ("2023-05-29", "2023-06-05")),
    ("the cocktail I tried last weekend", TUESDAY, ("2023-05-27", "2023-05-29")),
    ("plants I got last month", TUESDAY, ("2023-04-01", "2023-05-01")),
    ("plants I got last month", NEW_YEAR, ("2023-12-01", "2024-01-01")),
    ("camping this year", TUESDAY, ("2023-01-01", "2024-01-01")),
    ("what did I read in the past two weeks", TUESDAY, ("2023-05-16", "2023-05-31")),
    ("lunch last Tuesday", TUESDAY, ("2023-05-23", "2023-05-24")),
    ("on Saturday we hiked", TUESDAY, ("2023-05-27", "2023-05-28")),
    ("this Tuesday", TUESDAY, ("2023-05-30", "2023-05-31")),
    # no time named: no window
    ("how do I configure the retry policy", TUESDAY, None),
    ("may I ask what the port was", TUESDAY, None),  # "may" the verb
    ("we march on with the migration", TUESDAY, None),  # "march" the verb
    ("price was $2023.50", TUESDAY, None),
    ("version 1.2023.4", TUESDAY, None),
    ("Mondays are for planning", TUESDAY, None),  # a habit, not a day
]


@pytest.mark.parametrize(("query", "now", "expected"), CASES, ids=[case[0] for case in CASES])
def test_query_time_window(query: str, now: datetime, expected: tuple[str, str] | None) -> None:
    window = query_time_window(query, now)
    if expected is None:
        assert window is None
    else:
        assert window == TimeWindow(f"{expected[0]} 00:00", f"{expected[1]} 00:00")


def test_naive_clock_is_read_as_utc() -> None:
    assert query_time_window("yesterday", datetime(2023, 5, 30, 23, 0)) == TimeWindow(
        "2023-05-29 00:00", "2023-05-30 00:00"
    )


def test_window_contains_minutes_and_iso_times() -> None:
    window = TimeWindow("2023-05-29 00:00", "2023-05-30 00:00")
    assert window.contains("2023-05-29 00:00")
    assert window.contains("2023-05-29T23:59:59.5+00:00")
    assert not window.contains("2023-05-30 00:00")
    assert not window.contains("2023-05-28 23:59")
