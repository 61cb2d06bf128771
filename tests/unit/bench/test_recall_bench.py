"""``omray bench recall``: conversion of LongMemEval records into agent turns, ranking of hits, figures."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from bench.recall_bench import (
    DATA_DIR,
    FILES,
    History,
    build_question,
    exact_quote,
    figures,
    lme_timestamp,
    load_records,
    play_history,
    ranked_turns,
    select,
)
from protocol.events import AfterTurnCommit


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


DAY1, DAY2 = "2023/05/01 (Mon) 10:00", "2023/06/01 (Thu) 10:00"


def test_dates_become_iso_timestamps() -> None:
    assert lme_timestamp("2023/05/30 (Tue) 23:40") == "2023-05-30T23:40:00+00:00"


def test_a_history_is_sorted_by_date_and_a_repeated_session_gets_its_own_key() -> None:
    record = _record(
        "q1",
        [
            ("b", DAY2, [_turn("user", "later")]),
            ("a", DAY1, [_turn("user", "I parked on level 3", True), _turn("assistant", "Noted")]),
            ("a", DAY2, [_turn("user", "again")]),
        ],
        ["a"],
    )
    question = build_question(record)
    assert [key for key, _, _ in question.sessions] == ["a", "b", "a~2"]
    assert question.gold_sessions == {"a", "a~2"} and question.gold_turns == {("a", 1)}


class _FakeClient:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.commits: list[AfterTurnCommit] = []

    def events_path(self, session_id: str) -> Path:
        return self.root / session_id / "events.jsonl"

    def after_turn_commit(self, ctx: AfterTurnCommit) -> str:
        self.commits.append(ctx)
        return "job"


@pytest.mark.parametrize("layout", ["one-session", "per-session"])
def test_the_history_is_played_as_agent_turns(tmp_path: Path, layout: str) -> None:
    record = _record(
        "q1",
        [
            ("a", DAY1, [_turn("user", "I parked on level 3", True), _turn("assistant", "Noted")]),
            ("b", DAY2, [_turn("user", "My sister lives in Lyon")]),
        ],
        ["a"],
    )
    client = _FakeClient(tmp_path)
    history = play_history(client, build_question(record), layout)  # type: ignore[arg-type]
    if layout == "one-session":
        # one session, one turn per LongMemEval session, the last one ends the session
        assert [(c.session_id, c.turn_no, c.session_end) for c in client.commits] == [
            ("q-q1", 1, False),
            ("q-q1", 2, True),
        ]
        lines = [json.loads(line) for line in client.events_path("q-q1").read_text().splitlines()]
        assert [line["seq"] for line in lines] == [1, 2, 3, 4, 5]
        assert [line["type"] for line in lines][-1] == "agent_end" and lines[3]["ts"].startswith("2023-06-01")
        assert history.place[("q-q1", 4)] == ("b", 1)
    else:
        assert [(c.session_id, c.session_end) for c in client.commits] == [("s-a", True), ("s-b", True)]
        assert history.place[("s-b", 1)] == ("b", 1)
    assert set(history.seq_of) == {("a", 1), ("a", 2), ("b", 1)}


def test_selection_skips_abstention_and_covers_every_type() -> None:
    records = [
        {"question_id": f"{kind}{n}", "question_type": kind} for kind in ("x", "y", "z") for n in range(5)
    ] + [{"question_id": "x9_abs", "question_type": "x"}]
    chosen = select(records, 3)
    assert sorted(str(record["question_type"]) for record in chosen) == ["x", "y", "z"]
    assert all(not str(record["question_id"]).endswith("_abs") for record in select(records, 0))
    assert len(select(records, 0)) == 15


def test_hits_rank_turns_by_source_range_else_by_the_observation_refs() -> None:
    history = History(place={("s", seq): ("lme", seq) for seq in range(1, 8)})
    results = [
        {"id": "o1", "session_id": "s", "source": {"seq_start": 4, "seq_end": 5, "excerpt": "..."}},
        {"id": "o2", "session_id": "s"},
        {"id": "o3", "session_id": "s"},
        {"id": "e1", "session_id": "other", "source": {"seq_start": 1, "seq_end": 1, "excerpt": "..."}},
    ]
    turns, sessions = ranked_turns(results, {"o1": [6], "o2": [2], "o3": [5, 1]}, history)
    assert turns == [("lme", 4), ("lme", 5), ("lme", 2), ("lme", 1)]  # o1's cited 6 is not a match
    assert sessions == ["lme"]


def test_an_exact_quote_is_eight_single_spaced_words_of_the_turn() -> None:
    rng = random.Random(1)
    text = "Intro line.\nOne two three four five six seven eight nine ten\n\nshort bit"
    quote = exact_quote(text, rng)
    assert len(quote.split(" ")) == 8 and quote in text
    assert exact_quote("just three words", rng) == "just three words"
    assert exact_quote(text, rng, 10_000) == "One two three four five six seven eight nine ten"


def test_recall_at_k() -> None:
    record = _record("q", [("a", DAY1, [_turn("user", "x", True), _turn("user", "y", True)])], ["a"])
    question = build_question(record)
    result = figures([(question, [("z", 1), ("a", 1), ("a", 2)], ["z", "a"])])
    assert result.turn == {"@1": 0.0, "@5": 1.0, "@10": 1.0, "@20": 1.0}
    assert result.session["@1"] == 0.0 and result.session["@5"] == 1.0


@pytest.mark.skipif(
    not (DATA_DIR / FILES["longmemeval-s-dev100"]).is_file(),
    reason="LongMemEval development set not present in ../shared/data/longmemeval",
)
def test_the_dev_set_converts_with_its_documented_counts() -> None:
    questions = [build_question(record) for record in select(load_records("longmemeval-s-dev100"), 0)]
    assert len(questions) == 100
    assert sum(len(turns) for q in questions for _, _, turns in q.sessions) == 49608
    assert all(q.gold_sessions <= {key for key, _, _ in q.sessions} and q.gold_turns for q in questions)
