"""Exact-search SQL: the trigram fast path returns exactly what the escaped LIKE scan returns."""

from __future__ import annotations

import dataclasses
import itertools
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.read.search import search_in_memory
from actors.read.search_arguments import validate_search_arguments
from actors.read.service import exact_search
from persistence.database.omray_tables import (
    OBSERVATION_TRIGRAM_TABLE,
    REFLECTION_TRIGRAM_TABLE,
    TAIL_INDEXES,
    trigram_supported,
)
from persistence.search.plans import (
    DEFAULT_TUNING,
    PlanTuning,
    SearchStrategy,
)
from persistence.search.reader import (
    ExactSearchRows,
    SearchReader,
)
from persistence.search.request import SearchRequest
from persistence.search.short_queries import Candidates, ascii_case_variants, tail_sql, trigram_fold
from persistence.search.sql import (
    OBSERVATION_SEARCH,
    REFLECTION_SEARCH,
    SearchTable,
    TableSearch,
    trigram_match,
    trigram_phrase,
    uses_trigram,
)
from persistence.writers.store import Store
from protocol.errors import SettingsError
from protocol.records import ObservationRecord, ReflectionRecord
from tests.unit.actors.read.factories import hex_id, observation, reflection
from tests.unit.actors.read.helpers import commit, promote

pytestmark = pytest.mark.skipif(not trigram_supported(), reason="this SQLite has no FTS5 trigram tokenizer")

# Letters whose case folding differs between SQLite LIKE (ASCII only) and the trigram tokenizer
# (Unicode), plus LIKE's own metacharacters and the escape character.
ALPHABET = "aAbBkKzZ \\%_é\u00c9\u00dfİı\u212a\u00e0\u00c0\"'*-:0"
CONTENT = st.text(alphabet=ALPHABET, min_size=1, max_size=14).map(lambda s: s.strip() or "x")
QUERY = st.text(alphabet=ALPHABET, min_size=1, max_size=5)
TIMESTAMPS = ["2026-07-25 09:00", "2026-07-26 12:00", "2026-07-26 23:59", "2026-07-27 00:00"]
CREATED = ["2026-07-25T09:00:00+00:00", "2026-07-26T12:00:30+00:00", "2026-07-27T00:00:00+00:00"]
DATES = st.sampled_from([None, "2026-07-26", "2026-07-26 12:00", "2026-07-25"])
# Tiny budgets and caps, so that growing hypothesis corpora reach every branch of the auto plan.
TUNINGS = st.builds(
    PlanTuning,
    candidate_cost=st.integers(1, 40),
    min_candidate_cap=st.integers(1, 6),
    walk_budget_min=st.integers(1, 8),
    walk_budget_fraction=st.integers(1, 64),
    narrow_range_fraction=st.integers(1, 4),
    walk_extension=st.integers(1, 3),
    probe_skip_matches=st.integers(1, 4),
    probe_skip_budgets=st.integers(1, 4),
    first_window=st.integers(1, 8),
    first_window_fraction=st.integers(1, 64),
    selective_fraction=st.integers(1, 8),
)


class Corpus:
    """A database plus the same rows in memory, grown by each hypothesis example."""

    def __init__(self, db_path: Path) -> None:
        self.store = Store(db_path)
        self.db_path = db_path
        self.observations: list[ObservationRecord] = []
        self.reflections: list[ReflectionRecord] = []
        self.counter = itertools.count(1)

    def add(self, observation_texts: list[str], reflection_texts: list[str], stamp: int) -> None:
        number = next(self.counter)
        session_id = f"run-{number}"
        rows = [
            observation(
                f"{number:06x}{index:04x}",
                text,
                timestamp=TIMESTAMPS[(stamp + index) % 4],
                session_id=session_id,
            )
            for index, text in enumerate(observation_texts)
        ]
        commit(self.store, rows, session_id)
        self.observations.extend(rows)
        if reflection_texts:
            created = CREATED[stamp % 3]
            refs = [
                reflection(f"f{number:06x}{index:04x}", text, created_at=created, session_id=session_id)
                for index, text in enumerate(reflection_texts)
            ]
            promote(
                self.store,
                session_id,
                refs,
                [],
                1,
                completed_at=created,
                generation_id=hex_id(f"d{number:06x}"),
            )
            self.reflections.extend(refs)


@pytest.fixture
def corpus(tmp_path: Path) -> Corpus:
    return Corpus(tmp_path / "om.sqlite")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    observation_texts=st.lists(CONTENT, min_size=1, max_size=4),
    reflection_texts=st.lists(CONTENT, max_size=2),
    stamp=st.integers(0, 11),
    query=QUERY,
    after=DATES,
    before=DATES,
    limit=st.integers(1, 4),
    tuning=TUNINGS,
    scope=st.sampled_from([None, "session", ["run-1"], ["run-2", "run-3", "no-such-run"]]),
)
def test_fast_path_equals_scan_and_in_memory_model(
    corpus: Corpus,
    observation_texts: list[str],
    reflection_texts: list[str],
    stamp: int,
    query: str,
    after: str | None,
    before: str | None,
    limit: int,
    tuning: PlanTuning,
    scope: str | list[str] | None,
) -> None:
    corpus.add(observation_texts, reflection_texts, stamp)
    arguments = {"query": query, "after": after, "before": before, "limit": limit, "scope": scope}
    request = validate_search_arguments(arguments, current_session_id="run-1")
    if not isinstance(request, SearchRequest):
        return  # blank query or inverted range: nothing reaches SQL
    reader = SearchReader(corpus.db_path)
    strategies: tuple[SearchStrategy, ...] = ("scan", "trigram", "ordered", "session", "auto")
    results: dict[str, ExactSearchRows] = {
        strategy: reader.exact_search(request, strategy) for strategy in strategies
    }
    results["tuned"] = reader.exact_search(request, "auto", tuning)
    scan = results["scan"]
    assert scan.strategy == "scan"
    assert results["trigram"].strategy == ("trigram" if uses_trigram(request.query) else "scan")
    assert results["ordered"].strategy == "ordered"
    assert results["session"].strategy == ("scan" if request.sessions is None else "session")
    for strategy in ("trigram", "ordered", "session", "auto", "tuned"):
        assert results[strategy].observations == scan.observations
        assert results[strategy].reflections == scan.reflections
    expected = search_in_memory(request, corpus.observations, corpus.reflections)
    if request.sessions is not None:  # a scoped search never returns another session's memory
        found = [*scan.observations, *scan.reflections]
        assert all(row.session_id in request.sessions for row in found)
    assert exact_search(corpus.db_path, request) == expected
    assert exact_search(corpus.db_path, request, "scan") == expected


def _search(db_path: Path, query: str, strategy: SearchStrategy) -> list[str]:
    request = validate_search_arguments({"query": query})
    assert isinstance(request, SearchRequest)
    rows = SearchReader(db_path).exact_search(request, strategy)
    assert rows.strategy == ("scan" if strategy == "scan" else "trigram")
    return [row.observation_id for row in rows.observations] + [row.reflection_id for row in rows.reflections]


def test_index_rows_follow_inserts_made_after_migration(corpus: Corpus) -> None:
    corpus.add(["alphatool was renamed", "unrelated"], ["alphatool is durable"], 1)
    connection = sqlite3.connect(corpus.db_path)
    try:
        assert connection.execute(f"SELECT count(*) FROM {OBSERVATION_TRIGRAM_TABLE}").fetchone() == (2,)
        assert connection.execute(f"SELECT count(*) FROM {REFLECTION_TRIGRAM_TABLE}").fetchone() == (1,)
    finally:
        connection.close()
    found = _search(corpus.db_path, "ALPHATOOL", "trigram")
    assert len(found) == 2
    assert found == _search(corpus.db_path, "ALPHATOOL", "scan")


def test_update_and_delete_triggers_keep_the_index_in_sync(corpus: Corpus) -> None:
    corpus.add(["first alphatool note", "second betatool note"], [], 1)
    connection = sqlite3.connect(corpus.db_path)
    try:
        with connection:
            connection.execute(
                "UPDATE om_observation SET content = 'renamed gammatool' WHERE content LIKE 'first%'"
            )
            connection.execute("DELETE FROM om_observation WHERE content LIKE 'second%'")
    finally:
        connection.close()
    for query in ("alphatool", "betatool", "gammatool"):
        assert _search(corpus.db_path, query, "trigram") == _search(corpus.db_path, query, "scan")
    assert len(_search(corpus.db_path, "gammatool", "trigram")) == 1
    assert _search(corpus.db_path, "alphatool", "trigram") == []


def test_migration_backfills_rows_written_before_it(tmp_path: Path) -> None:
    db_path = tmp_path / "om.sqlite"
    corpus = Corpus(db_path)
    corpus.add(["written before the index existed"], ["reflection before the index"], 2)
    corpus.store.close()
    connection = sqlite3.connect(db_path)
    try:
        with connection:
            for table in (OBSERVATION_TRIGRAM_TABLE, REFLECTION_TRIGRAM_TABLE):
                for suffix in ("ai", "ad", "au"):
                    connection.execute(f"DROP TRIGGER {table}_{suffix}")
                connection.execute(f"DROP TABLE {table}")
            connection.execute(
                "DELETE FROM om_schema_version WHERE version = 'omray_002_exact_search_trigram'"
            )
    finally:
        connection.close()
    assert not SearchReader(db_path).trigram_index_present()
    assert len(_search(db_path, "before the index", "scan")) == 2
    Store(db_path).close()  # re-runs the migration, which backfills
    assert SearchReader(db_path).trigram_index_present()
    assert len(_search(db_path, "before the index", "trigram")) == 2


def test_short_queries_without_tail_indexes_fall_back_to_the_scan(corpus: Corpus) -> None:
    corpus.add(["ab cd"], [], 0)
    request = validate_search_arguments({"query": "ab"})
    assert isinstance(request, SearchRequest)
    assert SearchReader(corpus.db_path).exact_search(request, "trigram").strategy == "trigram"
    connection = sqlite3.connect(corpus.db_path)
    with connection:
        connection.execute(f"DROP INDEX {TAIL_INDEXES['om_observation'][1]}")
    connection.close()
    rows = SearchReader(corpus.db_path).exact_search(request, "trigram")
    assert rows.observation_strategy == "scan" and len(rows.observations) == 1
    assert not uses_trigram("a\0bc") and uses_trigram("abc") and uses_trigram("a")
    assert trigram_phrase('say "hi"') == '"say ""hi"""'


@given(st.text(min_size=3, max_size=40))
def test_trigram_match_covers_every_character_of_the_query(query: str) -> None:
    terms = trigram_match(query).split(" AND ")
    if len(query) == 3:
        assert terms == [trigram_phrase(query)]
        return
    starts = [start for start in range(len(query) - 2) if trigram_phrase(query[start : start + 3]) in terms]
    covered = {start + offset for start in starts for offset in range(3)}
    assert covered == set(range(len(query)))
    assert len(terms) == len(set(terms)) <= len(query) // 3 + 1


def test_trigram_match_quotes_each_term() -> None:
    assert trigram_match('a "quoted" word') == '"a """ AND "quo" AND "ted" AND """ w" AND "ord"'


@pytest.mark.parametrize(
    ("text", "folded"), [("aB", "ab"), ("É", "é"), ("x_", "x_"), ("%", "%"), ("\u212a", "k")]
)
def test_trigram_fold_is_the_tokenizers(text: str, folded: str) -> None:
    assert trigram_fold(text) == folded


def test_ascii_case_variants_are_what_like_treats_as_equal() -> None:
    assert ascii_case_variants("x_") == ["X_", "x_"]
    assert ascii_case_variants("ab") == ["AB", "Ab", "aB", "ab"]
    assert ascii_case_variants("é") == ["é"]


@pytest.mark.parametrize("query", ["é", "x_", "%", "_", "d!", "q"])
def test_short_rare_queries_find_rows_holding_them_anywhere(corpus: Corpus, query: str) -> None:
    texts = [
        f"{query}",
        f"{query} at the start",
        f"in the {query} middle",
        f"ends with {query}",
        f"tail{query}",
    ]
    texts += [f"{query.upper()}{query.upper()}", "nothing here"]
    corpus.add(texts, [f"reflection ending {query}"], 0)
    request = validate_search_arguments({"query": query, "limit": 50})
    assert isinstance(request, SearchRequest)
    reader = SearchReader(corpus.db_path)
    forced = reader.exact_search(request, "trigram")
    scan = reader.exact_search(request, "scan")
    assert forced.strategy == "trigram"
    assert forced.observations == scan.observations and forced.reflections == scan.reflections
    assert len(scan.observations) >= 5 and len(scan.reflections) == 1


def test_missing_database_gives_empty_answers(tmp_path: Path) -> None:
    reader = SearchReader(tmp_path / "absent.sqlite")
    request = validate_search_arguments({"query": "anything"})
    assert isinstance(request, SearchRequest)
    rows = reader.exact_search(request)
    assert rows.observations == () and rows.reflections == ()
    assert reader.find_observations("s", "a" * 12) == []
    assert reader.observation_ids_in_session("s") == set()
    assert reader.active_memory("s").reflections == ()
    assert not (tmp_path / "absent.sqlite").exists()


def test_recall_lookups_by_full_id_and_prefix_within_one_session(corpus: Corpus) -> None:
    shared = "abcdef012345"
    rows = [
        observation(shared + "0a", "one", session_id="s1"),
        observation(shared + "0b", "two", session_id="s1"),
        observation(shared + "1", "three", session_id="s1"),
        observation(shared + "2", "four", session_id="s1"),
    ]
    commit(corpus.store, rows, "s1")
    commit(corpus.store, [observation("9" * 12, "foreign", session_id="s2")], "s2")
    reader = SearchReader(corpus.db_path)
    assert len(reader.find_observations("s1", shared)) == 3  # LIMIT 3
    assert [o.content for o in reader.find_observations("s1", shared + "0b")] == ["two"]
    assert [o.content for o in reader.find_observations("s1", hex_id(shared + "1"))] == ["three"]
    assert reader.find_observations("s1", "9" * 12) == []
    assert reader.find_observations("s2", "9" * 12)[0].content == "foreign"
    assert reader.existing_observation_ids("s1", [hex_id(shared + "1"), hex_id("9" * 12)]) == {
        hex_id(shared + "1")
    }
    assert reader.observation_ids_in_session("s2") == {hex_id("9" * 12)}


# ------------------------------------------------------------------------- auto plan choice and plans

BRANCH_TUNING = PlanTuning(
    min_candidate_cap=4, walk_budget_min=10, walk_budget_fraction=1000, narrow_range_fraction=2
)
"""On the 120-row corpus below: rare cap 7 (limit 5), walk budget 10 rows, narrow range < 60 rows."""


def _minute(index: int) -> str:
    return f"2026-07-{1 + index // 1440:02d} {index % 1440 // 60:02d}:{index % 60:02d}"


@pytest.fixture
def branch_db(tmp_path: Path) -> Path:
    """120 observations a minute apart: 'zeta' and 'a' everywhere, 'needle' twice, 'oldword' in the
    oldest 40, 'q!' in the oldest 12, 'quad' in every fourth of the newest 60; one reflection."""
    db_path = tmp_path / "om.sqlite"
    rows = []
    for index in range(120):
        words = ["zeta a"]
        if index in (50, 90):
            words.append("needle")
        if index < 40:
            words.append("oldword")
        if index < 12:
            words.append("q!")
        if index >= 60 and index % 4 == 0:
            words.append("quad")
        rows.append(observation(f"{index:04x}", " ".join(words), timestamp=_minute(index), session_id="s"))
    with Store(db_path) as store:
        commit(store, rows, "s")
        promote(store, "s", [reflection("f1", "zeta needle reflection", session_id="s")], [], 1)
    return db_path


@pytest.mark.parametrize(
    ("arguments", "tuning", "expected"),
    [
        ({"query": "needle"}, BRANCH_TUNING, "trigram"),  # 2 candidates < rare cap
        ({"query": "zeta"}, BRANCH_TUNING, "ordered"),  # common: the bounded walk finds 6 matches
        ({"query": "a"}, BRANCH_TUNING, "ordered"),  # short and common
        ({"query": "q!"}, BRANCH_TUNING, "scan"),  # 12 candidates, all old: the walk fails, no dates
        ({"query": "q!"}, dataclasses.replace(BRANCH_TUNING, min_candidate_cap=13), "trigram"),  # rare cap 13
        ({"query": "oldword"}, dataclasses.replace(BRANCH_TUNING, selective_fraction=2), "trigram"),
        ({"query": "oldword"}, dataclasses.replace(BRANCH_TUNING, selective_fraction=4), "scan"),
        ({"query": "q!", "before": _minute(29)}, BRANCH_TUNING, "ordered"),  # narrow range: walked whole
        ({"query": "q!", "before": _minute(8)}, BRANCH_TUNING, "ordered"),  # range within the budget
        ({"query": "q!", "before": _minute(99)}, BRANCH_TUNING, "scan"),  # wide range
        # The walk's 10 rows hold 2 of the 6 needed: at that density 2 more budgets finish it.
        ({"query": "quad"}, BRANCH_TUNING, "ordered"),
        ({"query": "quad"}, dataclasses.replace(BRANCH_TUNING, walk_extension=1), "scan"),  # one would not
        # A first window of 4 rows holds 1 'quad'; the budget walk goes on from it.
        ({"query": "quad"}, dataclasses.replace(BRANCH_TUNING, first_window=4, walk_extension=2), "ordered"),
        ({"query": "zeta"}, dataclasses.replace(BRANCH_TUNING, first_window=6), "ordered"),
    ],
)
def test_auto_picks_the_plan_the_probes_point_to_and_answers_like_the_scan(
    branch_db: Path, arguments: dict[str, object], tuning: PlanTuning, expected: str
) -> None:
    request = validate_search_arguments({**arguments, "limit": 5})
    assert isinstance(request, SearchRequest)
    reader = SearchReader(branch_db)
    auto = reader.exact_search(request, "auto", tuning)
    scan = reader.exact_search(request, "scan")
    assert auto.observation_strategy == expected
    assert auto.observations == scan.observations and auto.reflections == scan.reflections
    assert 0 < len(scan.observations) <= 6


def test_default_tuning_walks_common_queries_and_prefilters_rare_ones(branch_db: Path) -> None:
    reader = SearchReader(branch_db)
    assert reader.order_index_present()
    # The default first window (512 rows) holds the whole 120-row table: one walk answers anything.
    for query in ("needle", "zeta", "a"):
        request = validate_search_arguments({"query": query})
        assert isinstance(request, SearchRequest)
        assert reader.exact_search(request).observation_strategy == "ordered"
    small_window = dataclasses.replace(DEFAULT_TUNING, first_window=8)
    for query, expected in [("needle", "trigram"), ("zeta", "ordered"), ("a", "ordered")]:
        request = validate_search_arguments({"query": query})
        assert isinstance(request, SearchRequest)
        rows = reader.exact_search(request, "auto", small_window)
        assert rows.observation_strategy == expected
        assert rows.observations == reader.exact_search(request, "scan").observations


def test_missing_order_index_keeps_auto_correct(branch_db: Path) -> None:
    connection = sqlite3.connect(branch_db)
    try:
        with connection:
            connection.execute(f"DROP INDEX {OBSERVATION_SEARCH.order_index}")
    finally:
        connection.close()
    reader = SearchReader(branch_db)
    assert not reader.order_index_present()
    for query in ("zeta", "a", "q!"):
        request = validate_search_arguments({"query": query, "limit": 5})
        assert isinstance(request, SearchRequest)
        auto = reader.exact_search(request, "auto", BRANCH_TUNING)
        assert auto.observation_strategy in ("trigram", "scan")
        assert reader.exact_search(request, "ordered").observation_strategy == "scan"
        assert auto.observations == reader.exact_search(request, "scan").observations


def test_plan_tuning_rejects_values_below_one() -> None:
    with pytest.raises(SettingsError, match="walk_budget_fraction"):
        PlanTuning(walk_budget_fraction=0)


def _plan(db_path: Path, sql: str, params: dict[str, object]) -> str:
    connection = sqlite3.connect(db_path)
    try:
        return " | ".join(row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    finally:
        connection.close()


def _table_search(names: SearchTable, after: str | None = None, before: str | None = None) -> TableSearch:
    request = validate_search_arguments({"query": "needle", "limit": 5})
    assert isinstance(request, SearchRequest)
    return TableSearch(None, names, request, (after, before))  # type: ignore[arg-type]


@pytest.mark.parametrize("names", [OBSERVATION_SEARCH, REFLECTION_SEARCH])
def test_result_order_queries_walk_the_covering_index_without_sorting(
    branch_db: Path, names: SearchTable
) -> None:
    plain = (
        f"SELECT * FROM {names.table} WHERE content LIKE :pattern ESCAPE '\\'"
        f" ORDER BY {names.time_column} DESC, {names.id_column} ASC LIMIT :fetch_limit"
    )
    plan = _plan(branch_db, plain, {"pattern": "%x%", "fetch_limit": 6})
    assert names.order_index in plan and "TEMP B-TREE" not in plan
    for search in (_table_search(names), _table_search(names, "2026-07-01", "2026-07-01 01:00")):
        for sql, params in (search.ordered_sql(None), search.ordered_sql(("2026-07-01 00:30", "0" * 64))):
            plan = _plan(branch_db, sql, params)
            # Covering (omray_009): the walk reads the index alone, never the table.
            assert f"USING COVERING INDEX {names.order_index}" in plan and "TEMP B-TREE" not in plan
        sql, params = search.boundary_sql(10)
        assert f"USING COVERING INDEX {names.order_index}" in _plan(branch_db, sql, params)


@pytest.mark.parametrize("names", [OBSERVATION_SEARCH, REFLECTION_SEARCH])
def test_trigram_and_scan_plans_stay_off_the_order_index(branch_db: Path, names: SearchTable) -> None:
    for search in (_table_search(names), _table_search(names, "2026-07-01", "2026-07-01 01:00")):
        probed = (Candidates((1, 2)), Candidates((1,), ("a" * 64,)))
        for sql, params in (search.trigram_sql(), *(search.trigram_sql(c) for c in probed)):
            plan = _plan(branch_db, sql, params)
            assert f"({names.id_column}=?)" in plan and names.order_index not in plan
            assert f"SCAN {names.trigram_table} VIRTUAL TABLE" in plan
        sql, params = search.scan_sql()
        plan = _plan(branch_db, sql, params)
        assert plan.startswith(f"SCAN {names.table}") and "INDEX" not in plan.split(" | ")[0]
        assert "TEMP B-TREE FOR ORDER BY" in plan


@pytest.mark.parametrize("names", [OBSERVATION_SEARCH, REFLECTION_SEARCH])
@pytest.mark.parametrize("query", ["a", "é!"])
def test_tail_probes_read_the_tail_indexes(branch_db: Path, names: SearchTable, query: str) -> None:
    plan = _plan(branch_db, *tail_sql(names.table, names.id_column, query, 10))
    tail1, tail2 = TAIL_INDEXES[names.table]
    assert "SCAN" not in plan.replace("SCAN 1 CONSTANT ROW", "")
    assert tail2 in plan and (tail1 in plan) == (len(query) == 1)


@pytest.mark.parametrize("names", [OBSERVATION_SEARCH, REFLECTION_SEARCH])
def test_session_plan_reads_only_the_scoped_sessions_by_their_index(
    branch_db: Path, names: SearchTable
) -> None:
    request = validate_search_arguments({"query": "needle", "limit": 5, "scope": ["s", "t"]})
    assert isinstance(request, SearchRequest)
    search = TableSearch(None, names, request, (None, None))  # type: ignore[arg-type]
    sql, params = search.session_sql()
    assert params["session_0"] == "s" and params["session_1"] == "t"
    plan = _plan(branch_db, sql, params)
    assert f"USING INDEX {names.session_index} (run_id=?)" in plan


def test_auto_takes_the_session_plan_for_scoped_common_queries(branch_db: Path) -> None:
    reader = SearchReader(branch_db)
    for scope, expected in ((["s"], 6), (["other"], 0)):
        request = validate_search_arguments({"query": "zeta", "limit": 5, "scope": scope})
        assert isinstance(request, SearchRequest)
        rows = reader.exact_search(request)
        assert rows.observation_strategy == "session" and len(rows.observations) == expected
        assert rows.observations == reader.exact_search(request, "scan").observations
