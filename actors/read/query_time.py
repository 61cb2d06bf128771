"""Time expressions in a search query, resolved against the query's clock, without a model.

``"what did I cook last Saturday?"`` asked on 2023-05-30 means the events of 2023-05-27; ``"which
activity did she take up in October 2023?"`` the events of that month. :func:`query_time_window`
finds such an expression (explicit dates, months, years, weekdays, and relative phrases such as
``yesterday``, ``last week``, ``two days ago``) and returns the window of memory time it names, so
hybrid search can favour memories dated inside it.

The window is a soft preference, never a filter: what a person says about a day is often written
down on another one (``"I went last week"`` in a later session), so a memory outside the window
keeps its own score and only a memory inside it gains. The ``after``/``before`` arguments stay the
way to filter.

Pure: the clock is an argument; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Final

from persistence.search.request import TimeWindow

MONTHS: Final[dict[str, int]] = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
"""Month names and their usual abbreviations."""

WEEKDAYS: Final[dict[str, int]] = {
    name: number
    for number, names in enumerate(
        (
            ("monday", "mon"),
            ("tuesday", "tue", "tues"),
            ("wednesday", "wed"),
            ("thursday", "thu", "thur", "thurs"),
            ("friday", "fri"),
            ("saturday", "sat"),
            ("sunday", "sun"),
        )
    )
    for name in names
}
"""Weekday names (Monday is 0, as :meth:`datetime.date.weekday`)."""

NUMBER_WORDS: Final[dict[str, int]] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "a couple of": 2,
    "a couple": 2,
    "couple of": 2,
    "a few": 3,
    "few": 3,
    "several": 4,
}
"""Counts written as words in relative phrases ("two days ago", "a few weeks ago")."""

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_FULL_MONTH = "|".join(sorted((m for m in MONTHS if len(m) > 3 or m == "may"), key=len, reverse=True))
_WEEKDAY = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_COUNT = "|".join(sorted((re.escape(word) for word in NUMBER_WORDS), key=len, reverse=True))
_UNIT = r"(day|week|month|year)s?"
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d{2})"
_MINUTE = "%Y-%m-%d %H:%M"

_ISO_DATE = re.compile(r"(?<![\d.])(\d{4})-(\d{2})-(\d{2})(?![\d.])")
_SLASH_DATE = re.compile(r"(?<![\d./])(\d{4})/(\d{1,2})/(\d{1,2})(?![\d./])")
_MONTH_DAY_YEAR = re.compile(rf"\b({_MONTH})\.?\s+{_DAY}(?:\s*,\s*|\s+){_YEAR}\b")
_DAY_MONTH_YEAR = re.compile(rf"\b{_DAY}(?:\s+of)?\s+({_MONTH})\.?,?\s+{_YEAR}\b")
_MONTH_DAY = re.compile(rf"\b({_MONTH})\.?\s+{_DAY}\b(?!\s*(?:,\s*)?(?:\d|:))")
_DAY_MONTH = re.compile(rf"\b{_DAY}(?:\s+of)?\s+({_MONTH})\b")
_MONTH_YEAR = re.compile(rf"\b({_MONTH})\.?,?\s+(?:of\s+)?{_YEAR}\b")
_IN_MONTH = re.compile(
    rf"\b(?:in|during|since|last|this|early|late|mid|of|by|until|till)[\s-]+({_FULL_MONTH})\b"
)
_BARE_MONTH = re.compile(r"\b(january|february|april|june|july|august|september|october|november|december)\b")
_YEAR_ONLY = re.compile(r"(?<![\d.,$€£/:-])\b((?:19[7-9]|20\d)\d)\b(?![\d.,:/-]\d)")
_AGO = re.compile(rf"\b(\d{{1,3}}|{_COUNT})\s+{_UNIT}\s+ago\b")
_PAST_N = re.compile(rf"\b(?:past|last|previous)\s+(\d{{1,3}}|{_COUNT})\s+{_UNIT}\b")
_LAST_UNIT = re.compile(r"\b(last|previous|past|this|current)\s+(week|weekend|month|year)\b")
_NAMED_DAY = re.compile(
    r"\b(yesterday|today|tonight|this morning|this afternoon|this evening|day before yesterday)\b"
)
_WEEKDAY_PHRASE = re.compile(rf"\b(?:(last|this|past|previous)\s+)?({_WEEKDAY})\b(?!s)")


@dataclass(frozen=True, slots=True)
class _Window:
    """``start <= t < end`` (UTC)."""

    start: datetime
    end: datetime


def _day_window(day: date) -> _Window:
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    return _Window(start, start + timedelta(days=1))


def _span(first: date, days: int) -> _Window:
    start = datetime(first.year, first.month, first.day, tzinfo=UTC)
    return _Window(start, start + timedelta(days=days))


def _month_window(year: int, month: int) -> _Window:
    start = datetime(year, month, 1, tzinfo=UTC)
    following = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return _Window(start, following)


def _year_window(year: int) -> _Window:
    return _Window(datetime(year, 1, 1, tzinfo=UTC), datetime(year + 1, 1, 1, tzinfo=UTC))


def _real_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _latest_month(month: int, today: date) -> tuple[int, int]:
    """The most recent ``month`` not after ``today`` (this year's, else last year's)."""
    return (today.year if month <= today.month else today.year - 1), month


def _count(word: str) -> int:
    return int(word) if word.isdigit() else NUMBER_WORDS[word]


def _months_back(today: date, months: int) -> tuple[int, int]:
    index = today.year * 12 + (today.month - 1) - months
    return index // 12, index % 12 + 1


def _ago(count: int, unit: str, today: date) -> _Window:
    """``count unit ago``: the unit that far back, a little widened (people round)."""
    if unit == "day":
        spread = 0 if count <= 2 else 1 + count // 7
        return _span(today - timedelta(days=count + spread), 1 + 2 * spread)
    if unit == "week":
        centre = today - timedelta(weeks=count)
        return _span(centre - timedelta(days=6), 13)
    if unit == "month":
        year, month = _months_back(today, count)
        window = _month_window(year, month)
        return _Window(window.start - timedelta(days=10), window.end + timedelta(days=10))
    return _year_window(today.year - count)


def _past(count: int, unit: str, today: date) -> _Window:
    """``past count units``: from that far back through today."""
    days = {"day": 1, "week": 7, "month": 31, "year": 366}[unit] * count
    return _span(today - timedelta(days=days), days + 1)


def _relative_unit(which: str, unit: str, today: date) -> _Window:
    monday = today - timedelta(days=today.weekday())
    current = which in ("this", "current")
    if unit == "week":
        return _span(monday, 7) if current else _span(monday - timedelta(days=7), 7)
    if unit == "weekend":
        saturday = monday + timedelta(days=5)
        if not current or saturday > today:
            saturday -= timedelta(days=7)
        return _span(saturday, 2)
    if unit == "month":
        if current:
            return _month_window(today.year, today.month)
        return _month_window(*_months_back(today, 1))
    return _year_window(today.year if current else today.year - 1)


def _named_day(name: str, today: date) -> _Window:
    if name == "yesterday":
        return _day_window(today - timedelta(days=1))
    if name == "day before yesterday":
        return _day_window(today - timedelta(days=2))
    return _day_window(today)


def _weekday(which: str | None, name: str, today: date) -> _Window:
    """The most recent such weekday before today (``this``: today counts)."""
    back = (today.weekday() - WEEKDAYS[name]) % 7
    if back == 0 and which != "this":
        back = 7
    return _day_window(today - timedelta(days=back))


def _with_year(month: int, day: int, today: date) -> date | None:
    """``Month D`` without a year: its latest occurrence not after today."""
    found = _real_date(today.year, month, day)
    if found is None or found > today:
        found = _real_date(today.year - 1, month, day)
    return found


def _explicit(text: str, today: date) -> _Window | None:
    """Dates, months and years written out: the most precise one wins."""
    for pattern in (_ISO_DATE, _SLASH_DATE):
        if found := pattern.search(text):
            day = _real_date(int(found[1]), int(found[2]), int(found[3]))
            if day is not None:
                return _day_window(day)
    if found := _MONTH_DAY_YEAR.search(text):
        day = _real_date(int(found[3]), MONTHS[found[1]], int(found[2]))
        if day is not None:
            return _day_window(day)
    if found := _DAY_MONTH_YEAR.search(text):
        day = _real_date(int(found[3]), MONTHS[found[2]], int(found[1]))
        if day is not None:
            return _day_window(day)
    if found := _MONTH_YEAR.search(text):
        return _month_window(int(found[2]), MONTHS[found[1]])
    for pattern, month_group, day_group in ((_MONTH_DAY, 1, 2), (_DAY_MONTH, 2, 1)):
        if found := pattern.search(text):
            day = _with_year(MONTHS[found[month_group]], int(found[day_group]), today)
            if day is not None:
                return _day_window(day)
    if found := _IN_MONTH.search(text) or _BARE_MONTH.search(text):
        return _month_window(*_latest_month(MONTHS[found[1]], today))
    if found := _YEAR_ONLY.search(text):
        return _year_window(int(found[1]))
    return None


def _relative(text: str, today: date) -> _Window | None:
    if found := _AGO.search(text):
        return _ago(_count(found[1]), found[2], today)
    if found := _PAST_N.search(text):
        return _past(_count(found[1]), found[2], today)
    if found := _NAMED_DAY.search(text):
        return _named_day(found[1], today)
    if found := _LAST_UNIT.search(text):
        return _relative_unit(found[1], found[2], today)
    if found := _WEEKDAY_PHRASE.search(text):
        return _weekday(found[1], found[2], today)
    return None


def query_time_window(query: str, now: datetime) -> TimeWindow | None:
    """The window of memory time ``query`` names, resolved against ``now``; ``None`` when it names none.

    Explicit dates, months and years come first (``"in October 2023"``, ``"on 2023-10-05"``,
    ``"March 3rd"``, ``"in 2022"``), then relative phrases (``"3 days ago"``, ``"a few weeks ago"``,
    ``"the past two weeks"``, ``"yesterday"``, ``"last week"``, ``"this month"``, ``"last
    Saturday"``). A month or day without a year is its latest occurrence not after ``now``. The
    ambiguous month words ``may`` and ``march`` count only next to a day, a year or a preposition
    (``"in May"``), never as the verb.
    """
    text = " ".join(query.lower().split())
    today = now.astimezone(UTC).date() if now.tzinfo is not None else now.date()
    window = _explicit(text, today) or _relative(text, today)
    if window is None:
        return None
    return TimeWindow(window.start.strftime(_MINUTE), window.end.strftime(_MINUTE))
