"""Which plan exact search takes on one table, and its rows (reference §13.3).

Exact search runs over every session in the database, on both tables, with the escaped
``LIKE ... ESCAPE '\\'`` of the reference, the per-table date bounds, newest first and
``LIMIT limit + 1`` (so the caller can tell ``truncated``). Every plan below returns exactly what
the plain scan returns; only the work differs (their statements: ``persistence.search.sql``):

* ``scan``: the plain escaped ``LIKE`` over the whole table, then a sort of every match (what the
  original does; pinned with ``NOT INDEXED`` so the order indexes cannot turn it into a walk).
* ``trigram``: a quoted-phrase ``MATCH`` on the FTS5 trigram index (migration ``omray_002``) picks
  candidate rows by id and the very same ``LIKE`` decides. The tokenizer folds case (Unicode, a
  superset of the ASCII folding ``LIKE`` does), so every ``LIKE`` match is a candidate and ``LIKE``
  alone removes the extra ones. A 1-2 character query takes instead the index terms that start
  with it and the rows that end with it (``persistence.search.short_queries``, migration
  ``omray_006``). Only for literal queries with no NUL. Costs about one id lookup per candidate:
  the plan for rare substrings, short ones too.
* ``ordered``: walks the index in result order (time descending, id ascending; since migration
  ``omray_009`` it also holds every column a search reads, so the walk never visits the table),
  inside the date range, and stops at the ``fetch_limit``-th match. Costs one index entry per row
  visited (about 0.2 us): the plan for common substrings, short queries that match often, and
  narrow dates.

* ``session``: for a search scoped to some sessions (``scope``), reads only their rows through the
  table's ``run_id`` index, then sorts the matches. Every plan applies the same ``run_id IN (...)``.

``auto`` picks per table with cheap probes (a scoped search takes ``session`` right after a rare
trigram phrase): the trigram candidate count, capped (rare phrase:
``trigram``), after a first walk of the newest few hundred rows in the date range, which answers a
common query by itself (unless the search is scoped) and skips the probe when, at the density it
found, the budget walk or its extension will finish; then an ordered walk bounded to a row budget
(it goes on from the first one), whose answer is final when it found enough matches or covered
the whole date range (one that found some goes on, bounded again, when at the density found it
would finish within two more budgets); then, for what is left (matches
that are few and far from the newest rows), an unbounded walk when the date range is narrow, the
trigram plan when its candidates are few enough, else the scan. Every bounded probe caps the
work it can waste.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final, Literal

from persistence.search.sql import HitRow, OrderKey, TableSearch, can_prefilter
from protocol.errors import SettingsError

SearchStrategy = Literal["auto", "trigram", "ordered", "session", "scan"]
"""``auto``: per table, the plan the selectivity probes pick (see the module docstring);
``trigram``: the trigram pre-filter whenever it applies (3+ characters, index present), else scan;
``ordered``: the result-order walk to the end of the date range (index present), else scan;
``session``: for a search scoped to sessions, their rows by the session index, else scan;
``scan``: always the plain ``LIKE`` scan."""

UsedStrategy = Literal["trigram", "ordered", "session", "scan"]
"""What a search actually did on one table."""


@dataclass(frozen=True, slots=True)
class PlanTuning:
    """Cost figures behind ``auto``'s plan choice (measured at 5k-50k observations; see the bench).

    They only move work around: any values give the same answers, which the tests use to drive
    every branch on tiny corpora.
    """

    candidate_cost: int = 32
    """A trigram candidate (looked up by id in the table, then sorted) costs about this many rows of an
    ordered walk through the covering index (7 us against 0.2 us at 50,000 rows)."""
    min_candidate_cap: int = 64
    """Below this many trigram candidates the pre-filter is always taken (small tables)."""
    walk_budget_min: int = 1024
    """The bounded ordered walk may visit at least this many rows..."""
    walk_budget_fraction: int = 16
    """...or 1/this of the table, whichever is more: its worst-case waste before another plan."""
    first_window: int = 512
    """Rows the first, short walk may visit before any probe (a common query ends there)..."""
    first_window_fraction: int = 256
    """...or 1/this of the table, whichever is more."""
    probe_skip_matches: int = 3
    """The trigram probe is skipped when the first walk found at least this many matches..."""
    probe_skip_budgets: int = 3
    """...and, at the density it found, this many walk budgets will finish the search."""
    walk_extension: int = 2
    """A bounded walk that found some matches but not enough goes on for up to this many more budgets
    when, at the density it found, that is enough to finish."""
    narrow_range_fraction: int = 2
    """A date range holding fewer than 1/this of the table's rows is walked whole instead of scanned."""
    selective_fraction: int = 16
    """After the walk, the trigram pre-filter still beats the scan below 1/this of the rows as candidates."""

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 1:
                raise SettingsError(f"plan tuning {field.name!r} must be >= 1")


DEFAULT_TUNING: Final = PlanTuning()
"""The tuning :meth:`persistence.search.reader.SearchReader.exact_search` uses unless told otherwise."""


def choose_and_fetch(
    search: TableSearch, trigram_ok: bool, ordered_ok: bool, tuning: PlanTuning, session_ok: bool = False
) -> tuple[list[HitRow], UsedStrategy]:
    """``auto``: the cheapest plan by bounded probes, and its rows (see the module docstring)."""
    fetch_limit = search.spec.fetch_limit
    rows_estimate = search.approximate_rows()
    budget = max(tuning.walk_budget_min, rows_estimate // tuning.walk_budget_fraction)
    rows: list[HitRow] = []
    walked: OrderKey | None = None  # the walk so far covers the rows before this one
    window = 0
    first_window = ordered_ok and not session_ok
    if first_window:
        # A short walk first: a common query finds its first matches among the newest rows, for
        # less than any probe costs; its rows are kept for the longer walk below.
        window = min(budget, max(tuning.first_window, rows_estimate // tuning.first_window_fraction))
        walked = search.boundary(window)
        rows = search.ordered_rows(walked)
        if walked is None or len(rows) >= fetch_limit:
            return rows, "ordered"
    # At the density the first walk found (enough matches to go by), the budget walk or its
    # extension would finish: walking on is the plan, and the probe would be wasted.
    dense = (
        first_window
        and len(rows) >= tuning.probe_skip_matches
        and (fetch_limit - len(rows)) * window <= len(rows) * budget * tuning.probe_skip_budgets
    )
    rare_cap = 0
    if trigram_ok and not dense:
        # Uniform matches: a walk visits ~fetch_limit * rows / m rows, the pre-filter costs m lookups;
        # equal at m = sqrt(fetch_limit * rows / candidate_cost).
        rare_cap = max(
            tuning.min_candidate_cap, math.isqrt(fetch_limit * rows_estimate // tuning.candidate_cost)
        )
        candidates = search.trigram_candidates(rare_cap)
        if candidates is not None:
            return search.candidate_rows(candidates), "trigram"
    if session_ok:
        return search.session_rows(), "session"  # a session's rows are few next to the table's
    if ordered_ok:
        stop = search.boundary(budget)
        if first_window:
            rows += search.ordered_rows(stop, start=walked, limit=fetch_limit - len(rows))
        else:
            rows = search.ordered_rows(stop)
        if stop is None or len(rows) >= fetch_limit:
            return rows, "ordered"  # the whole range was walked, or its first matches were found
        if rows and fetch_limit - len(rows) <= len(rows) * tuning.walk_extension:
            # At the density found so far the walk ends within ``walk_extension`` more budgets: go
            # on from where it stopped rather than throw its rows away (bounded again).
            extended = search.boundary(budget * (1 + tuning.walk_extension))
            rows += search.ordered_rows(extended, start=stop, limit=fetch_limit - len(rows))
            if extended is None or len(rows) >= fetch_limit:
                return rows, "ordered"
        if search.dated and search.boundary(rows_estimate // tuning.narrow_range_fraction) is None:
            return search.ordered_rows(), "ordered"
    if trigram_ok:
        common_cap = max(tuning.min_candidate_cap, rows_estimate // tuning.selective_fraction)
        candidates = search.trigram_candidates(common_cap) if common_cap > rare_cap else None
        if candidates is not None:
            return search.candidate_rows(candidates), "trigram"
    return search.scan_rows(), "scan"


def search_table(
    search: TableSearch, strategy: SearchStrategy, names: Collection[str], tuning: PlanTuning
) -> tuple[list[HitRow], UsedStrategy]:
    """One table's rows by ``strategy``; a plan whose index is missing (or cannot apply) becomes the scan.

    ``names`` are the database's table and index names.
    """
    trigram_ok = strategy in ("auto", "trigram") and can_prefilter(search.spec.query, search.names, names)
    ordered_ok = strategy in ("auto", "ordered") and search.names.order_index in names
    session_ok = strategy in ("auto", "session") and search.scoped and search.names.session_index in names
    if strategy == "auto":
        return choose_and_fetch(search, trigram_ok, ordered_ok, tuning, session_ok)
    if trigram_ok:
        return search.trigram_rows(), "trigram"
    if ordered_ok:
        return search.ordered_rows(), "ordered"
    if session_ok:
        return search.session_rows(), "session"
    return search.scan_rows(), "scan"
