"""``omray bench recall``: conversion of LongMemEval records, ranking of hits, recall figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.recall_bench import (
    DATA_DIR,
    FILES,
    build_corpus,
    build_store,
    figures,
    lme_timestamp,
    load_records,
    rank_hits,
    select,
)
from tests.unit.semantic.conftest import HashEmbedder


def _record(
    question_id: str, sessions: list[tuple[str, str, list[dict[str, Any]]]], gold: list[str]
) -> dict[str, Any]:
    return {
        "question_id": question_id,
        "question_type": "single-session-user",
        "question": "Where did I park?",
        "answer_session_ids": gold,
        "haystack_session_ids": [sid for sid, _, _ in sessions],
        "haystack_dates": [date for _, date, _ in sessions],
        "haystack_sessions": [turns for _, _, turns in sessions],
    }


def _turn(role: str, content: str, has_answer: bool = False) -> dict[str, Any]:
    return {"role": role, "content": content, "has_answer": has_answer}


def test_dates_become_iso_timestamps() -> None:
    assert lme_timestamp("2023/05/30 (Tue) 23:40") == "2023-05-30T23:40:00+00:00"


def test_corpus_keys_sessions_by_id_and_date_and_marks_gold_turns() -> None:
    day1, day2 = "2023/05/01 (Mon) 10:00", "2023/06/01 (Thu) 10:00"
    first = _record(
        "q1",
        [
            ("a", day1, [_turn("user", "I parked on level 3", True), _turn("assistant", "Noted")]),
            ("b", day1, []),
        ],
        ["a"],
    )
    # The same LongMemEval id with another date is another session (the pooled oracle has such ids).
    second = _record("q2", [("a", day2, [_turn("user", "hello"), _turn("assistant", "hi", True)])], ["a"])
    corpus = build_corpus([first, second])
    assert set(corpus.turns) == {"a", "b", next(key for key in corpus.turns if key.startswith("a_"))}
    q1, q2 = corpus.questions
    assert q1.gold_sessions == {"a"} and q1.gold_turns == {("a", 1)}
    (other,) = q2.gold_sessions
    assert other != "a" and q2.gold_turns == {(other, 2)}
    assert corpus.dates[other] == "2023-06-01T10:00:00+00:00"


def test_short_finished_sessions_are_observed_and_indexed(tmp_path: Path) -> None:
    # Sessions far below the observer's token threshold: a benchmark history is finished, so each
    # is observed through its end (a run that observed nothing once scored every question 0).
    day = "2023/05/01 (Mon) 10:00"
    record = _record(
        "q1",
        [
            (
                "a",
                day,
                [_turn("user", "I parked on level 3 near the lift", True), _turn("assistant", "Noted")],
            ),
            ("b", day, [_turn("user", "My sister lives in Lyon"), _turn("assistant", "Nice city")]),
        ],
        ["a"],
    )
    corpus = build_corpus([record])
    run = build_store(tmp_path, corpus, sorted(corpus.turns), HashEmbedder())
    assert run.observations > 0 and run.chunks >= run.observations
    assert {session for refs in run.refs.values() for session, _ in refs} == {"a", "b"}


def test_selection_skips_abstention_and_covers_every_type() -> None:
    records = [
        {"question_id": f"{kind}{n}", "question_type": kind} for kind in ("x", "y", "z") for n in range(5)
    ] + [{"question_id": "x9_abs", "question_type": "x"}]
    chosen = select(records, 3)
    assert sorted(str(record["question_type"]) for record in chosen) == ["x", "y", "z"]
    assert all(not str(record["question_id"]).endswith("_abs") for record in select(records, 0))
    assert len(select(records, 0)) == 15


def test_hits_rank_turns_by_source_excerpt_else_by_the_observation_refs() -> None:
    results = [
        {"id": "o1", "session_id": "a", "source": {"seq_start": 4, "seq_end": 5, "excerpt": "..."}},
        {"id": "o2", "session_id": "b"},
        {"id": "o3", "session_id": "a"},
    ]
    refs = {"o2": [("b", 2)], "o3": [("a", 5), ("a", 1)]}
    turns, sessions = rank_hits(results, refs)
    assert turns == [("a", 4), ("a", 5), ("b", 2), ("a", 1)]
    assert sessions == ["a", "b"]


def test_recall_any_and_all_at_k() -> None:
    corpus = build_corpus(
        [
            _record(
                "q",
                [("a", "2023/05/01 (Mon) 10:00", [_turn("user", "x", True), _turn("user", "y", True)])],
                ["a"],
            )
        ]
    )
    (question,) = corpus.questions
    result = figures([(question, [("z", 1), ("a", 1), ("a", 2)], ["z", "a"])])
    assert result.turn_any == {"@1": 0.0, "@5": 1.0, "@10": 1.0, "@20": 1.0}
    assert result.turn_all["@1"] == 0.0 and result.turn_all["@5"] == 1.0
    assert result.session_any["@1"] == 0.0 and result.session_all["@5"] == 1.0


@pytest.mark.skipif(
    not (DATA_DIR / FILES["longmemeval-s"]).is_file(),
    reason="LongMemEval development set not present in ../shared/data/longmemeval",
)
def test_the_s_subset_converts_with_its_documented_counts() -> None:
    corpus = build_corpus(load_records("longmemeval-s"))
    assert len(corpus.questions) == 26
    assert sum(len(turns) for turns in corpus.turns.values()) == 12853
    assert all(question.gold_sessions <= set(question.sessions) for question in corpus.questions)
