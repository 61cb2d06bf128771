"""``omray bench recall``: memory search recall on LongMemEval and BEAM, through the real runtime.

Every history goes through the product path with default settings: a private Ray cluster runs
omray's queue and worker pools (:func:`cluster.named_actors.ensure_runtime`, default pool sizes), and one
:class:`cluster.client.OmrayClient` per history (its own project directory and memory database, the
settings a project with no settings file gets) appends the history to ``events.jsonl`` and calls
``after_turn_commit`` as an agent would: the QueueActor runs the ObserverActor (``builtin/extractive``,
the default trigger policy) and the IndexerActor (the offline embedder), and every question is asked
through ``client.memory_search`` (``limit`` 50, ``query_date`` the question's date). A LongMemEval
question has a history of its own; BEAM asks several questions of each of its 54 histories, and
each history is played once.

Datasets (``--dataset``): ``longmemeval-s-dev100`` (``../shared/data/longmemeval``, MIT) and
``beam-dev`` (``../shared/data/beam``: BEAM by Tavakoli et al., arXiv:2510.27246, CC BY-SA 4.0, read
in place and never copied), in the same record shape.

Layouts (``--layout``):

* ``one-session``: a history is ONE agent session, one turn per history session in date order (its
  messages, then ``agent_end``), the last turn with ``session_end``: an agent that runs for weeks.
* ``per-session``: each history session is its own agent session (one turn, ``session_end``).

Observers (``--observer``): ``builtin`` (the default offline model, which copies each message) or
``condensing``: a scripted model behind the real ``openai`` client that writes one short
observation per ten messages, as a real model condenses. Everything the Observer was shown must
stay findable either way (the transcript index).

Scoring (``_abs`` questions are skipped, as upstream does). A hit stands for the turns it covers:
its ``source`` seq range (the matching events), else the events its observation cites (an event
result is its own seq). ``turn`` R@k: some ``has_answer`` turn among the first k turns, in
first-appearance order; ``session`` R@k the same over answer sessions. Baseline from the same run:
plain ``bm25s`` over the raw turns of the same history (one document per turn, omray's keyword
tokenizer, every word of the question, as omray's keyword side reads it). ``findable``: the share of
history turns of eight words or more that an exact ``memory_search`` of a quote of eight
consecutive words finds (``findable_short``: the shorter turns, searched whole). ``no_match_rate``:
each question asked of another history's store (one holding none of its evidence sessions), the
share answered ``no_match``; ``real_no_match_rate`` the share of real questions wrongly answered so.
``variants``: the same stores searched with other rankings (:data:`VARIANTS`). Figures are
printed, never asserted.

Stores are built in waves of :data:`WAVE` histories, and a wave is scored while the runtime builds
the next one (search times are then taken beside that work); each wave's StoreActors are stopped
once it is scored, so a run never holds more than two waves' worth of actors.

Length: one benchmark, end to end (data, playing, scoring, figures), read top to bottom.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import random
import re
import sqlite3
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel

from actors.read.hybrid import hybrid_search_for
from actors.read.ranking import RankingWeights
from actors.read.service import memory_search
from bench.measure import percentile
from bench.shared_data import shared_data_dir
from persistence.semantic.keyword import KeywordIndex, query_tokens
from protocol.events import AfterTurnCommit, EventSummary
from protocol.semantic import FusionMode

Dataset = Literal["longmemeval-s-dev100", "longmemeval-s", "longmemeval-oracle", "beam-dev"]
Layout = Literal["one-session", "per-session"]
ObserverKind = Literal["builtin", "condensing"]
DATA_DIR: Final[Path] = shared_data_dir()
FILES: Final[dict[str, str]] = {
    "longmemeval-s-dev100": "longmemeval/longmemeval_s_dev100.json.gz",
    "longmemeval-s": "longmemeval/longmemeval_s_subset26.json.gz",
    "longmemeval-oracle": "longmemeval/longmemeval_oracle.json.gz",
    "beam-dev": "beam/beam_dev.json.gz",
}
"""Each dataset's file under the shared data folder (``--data-dir``)."""
DEFAULT_QUESTIONS: Final[dict[str, int]] = {
    "longmemeval-s-dev100": 0,
    "longmemeval-s": 0,
    "longmemeval-oracle": 60,
    "beam-dev": 0,
}
"""Questions of a default run (``0``: all); ``--questions N`` for quick runs."""
KS: Final[tuple[int, ...]] = (1, 5, 10, 20)
SEARCH_LIMIT: Final[int] = 50
QUOTE_WORDS: Final[int] = 8
WAVE: Final[int] = 8
"""Histories whose stores are built and scored together."""
IDLE_TIMEOUT_S: Final[float] = 3600.0
_OFF: Final[dict[str, Any]] = {"no_match": False}
VARIANTS: Final[dict[str, tuple[FusionMode, dict[str, Any], RankingWeights]]] = {
    "no_floor": ("zscore", _OFF, RankingWeights()),
    "zscore_fusion_only": ("zscore", _OFF, RankingWeights(neighbour_share=0, speaker_bonus=0, time_bonus=0)),
    "without_neighbours": ("zscore", _OFF, RankingWeights(neighbour_share=0)),
    "without_speaker": ("zscore", _OFF, RankingWeights(speaker_bonus=0)),
    "without_time": ("zscore", _OFF, RankingWeights(time_bonus=0)),
    "vector_weight_0.5": ("zscore", _OFF, RankingWeights(vector_weight=0.5)),
    "vector_weight_0.7": ("zscore", _OFF, RankingWeights(vector_weight=0.7)),
    "convex": ("convex", {}, RankingWeights()),
    "rrf": ("rrf", {}, RankingWeights()),
    "keyword": ("keyword", {}, RankingWeights()),
}
"""Other rankings asked of the same stores: name -> (fusion, semantic settings changed, weights).
Every ``zscore`` variant runs without the floor, so it compares with ``no_floor``."""
CONDENSE_EVERY: Final[int] = 10
"""Messages per observation of the condensing scripted observer."""


class DataMissingError(FileNotFoundError):
    """The development set is not where the benchmark looks for it."""


@dataclass(frozen=True)
class Turn:
    """One LongMemEval message."""

    session: str
    """LongMemEval session key (unique per question history)."""
    position: int
    """Position in its session, from 1."""
    role: str
    content: str
    has_answer: bool = False


@dataclass
class Question:
    """One question and its history, in date order."""

    question_id: str
    question_type: str
    question: str
    asked: str = ""
    """When the question is asked (``YYYY-MM-DD HH:MM``): the ``query_date`` of its search."""
    sessions: list[tuple[str, str, list[Turn]]] = field(default_factory=list)
    """``(session key, ISO date, turns)`` in date order."""
    gold_sessions: set[str] = field(default_factory=set)

    @property
    def gold_turns(self) -> set[tuple[str, int]]:
        return {
            (key, turn.position)
            for key, _, turns in self.sessions
            if key in self.gold_sessions
            for turn in turns
            if turn.has_answer
        }


def load_records(dataset: Dataset, data_dir: Path = DATA_DIR) -> list[dict[str, Any]]:
    path = data_dir / FILES[dataset]
    if not path.is_file():
        raise DataMissingError(f"dataset file {FILES[dataset]!r} not found in {str(data_dir)!r}")
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        records: list[dict[str, Any]] = json.load(handle)
    return records


def select(records: Sequence[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    """``count`` questions (0: all), round-robin over question types in id order: every type is present."""
    scored = sorted(
        (r for r in records if not str(r["question_id"]).endswith("_abs")), key=lambda r: r["question_id"]
    )
    if count <= 0 or count >= len(scored):
        return list(scored)
    by_type: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in scored:
        by_type[str(record["question_type"])].append(record)
    chosen: list[Mapping[str, Any]] = []
    position = 0
    while len(chosen) < count:
        for kind in sorted(by_type):
            group = by_type[kind]
            if position < len(group) and len(chosen) < count:
                # spread over the group rather than taking its first ids
                chosen.append(
                    group[(position * 7919) % len(group)] if len(group) > count else group[position]
                )
        position += 1
    return chosen


def lme_timestamp(value: str) -> str:
    """``"2023/05/30 (Tue) 23:40"`` -> ``"2023-05-30T23:40:00+00:00"``."""
    day, _, rest = value.partition(" ")
    clock = rest.split(")")[-1].strip() or "00:00"
    return f"{day.replace('/', '-')}T{clock}:00+00:00"


def build_question(record: Mapping[str, Any]) -> Question:
    """One question with its history sorted by date (a repeated session id gets its own key)."""
    asked = (
        lme_timestamp(str(record["question_date"]))[:16].replace("T", " ")
        if "question_date" in record
        else ""
    )
    question = Question(
        str(record["question_id"]), str(record["question_type"]), str(record["question"]), asked
    )
    gold = set(record["answer_session_ids"])
    seen: dict[str, int] = defaultdict(int)
    rows = []
    for sid, date, session in zip(
        record["haystack_session_ids"], record["haystack_dates"], record["haystack_sessions"], strict=True
    ):
        seen[sid] += 1
        key = sid if seen[sid] == 1 else f"{sid}~{seen[sid]}"
        turns = [
            Turn(key, index + 1, str(turn["role"]), str(turn["content"]), bool(turn.get("has_answer")))
            for index, turn in enumerate(session)
        ]
        rows.append((lme_timestamp(date), key, turns))
        if sid in gold:
            question.gold_sessions.add(key)
    for date, key, turns in sorted(rows, key=lambda row: row[0]):  # stable: same-date order kept
        question.sessions.append((key, date, turns))
    return question


# --------------------------------------------------------------------------------- the history


def _event(
    session_id: str, seq: int, turn_no: int, kind: str, payload: dict[str, Any], ts: str
) -> dict[str, Any]:
    return {
        "schema_version": "1.0",
        "run_id": session_id,
        "seq": seq,
        "turn_no": turn_no,
        "type": kind,
        "payload": payload,
        "ts": ts,
    }


def turn_events(
    session_id: str, first_seq: int, turn_no: int, turns: Sequence[Turn], ts: str
) -> list[dict[str, Any]]:
    """One agent turn holding one LongMemEval session: its messages, then ``agent_end``."""
    events = []
    for offset, turn in enumerate(turns):
        payload: dict[str, Any]
        if turn.role == "user":
            kind, payload = "agent_command_applied", {"text": turn.content}
        else:
            kind, payload = (
                "llm_step_completed",
                {"assistant_message": {"role": "assistant", "content": turn.content}},
            )
        events.append(_event(session_id, first_seq + offset, turn_no, kind, payload, ts))
    events.append(
        _event(session_id, first_seq + len(turns), turn_no, "agent_end", {"reason": "completed"}, ts)
    )
    return events


@dataclass
class History:
    """Where each LongMemEval turn went: ``(omray session, seq) -> (LongMemEval session, position)``."""

    place: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)
    seq_of: dict[tuple[str, int], tuple[str, int]] = field(default_factory=dict)


def play_history(client: Any, question: Question, layout: Layout) -> History:
    """Append the history to ``events.jsonl`` turn by turn and call ``after_turn_commit`` after each."""
    history = History()
    one = f"q-{question.question_id}"
    seq = {one: 1}
    for number, (key, date, turns) in enumerate(question.sessions, start=1):
        session_id = one if layout == "one-session" else f"s-{key}"
        first = seq.setdefault(session_id, 1)
        turn_no = number if layout == "one-session" else 1
        events = turn_events(session_id, first, turn_no, turns, date)
        path = client.events_path(session_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(event, ensure_ascii=False) + "\n" for event in events))
        for offset, turn in enumerate(turns):
            history.place[(session_id, first + offset)] = (key, turn.position)
            history.seq_of[(key, turn.position)] = (session_id, first + offset)
        seq[session_id] = first + len(events)
        last = layout == "per-session" or number == len(question.sessions)
        client.after_turn_commit(
            AfterTurnCommit(
                session_id=session_id,
                turn_no=turn_no,
                status="completed",
                events=tuple(
                    EventSummary(seq=e["seq"], type=e["type"], payload=e["payload"]) for e in events
                ),
                session_end=last,
            )
        )
    return history


# ----------------------------------------------------------------------------------- scoring


def cited_refs(db_path: Path) -> dict[str, list[int]]:
    """Observation id -> the seqs of its own session it cites."""
    refs: dict[str, list[int]] = {}
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        for memory_id, session_id, raw in conn.execute(
            "SELECT observation_id, run_id, source_refs_json FROM om_observation"
        ):
            refs[memory_id] = [int(ref["seq"]) for ref in json.loads(raw) if ref.get("run_id") == session_id]
    return refs


def ranked_turns(
    results: Iterable[Mapping[str, Any]], refs: Mapping[str, list[int]], history: History
) -> tuple[list[tuple[str, int]], list[str]]:
    """(LongMemEval turns, LongMemEval sessions) in first-appearance order of the hits."""
    turns: list[tuple[str, int]] = []
    for item in results:
        session_id = str(item["session_id"])
        source = item.get("source")
        if isinstance(source, Mapping):
            seqs = list(range(int(source["seq_start"]), int(source["seq_end"]) + 1))
        else:
            seqs = list(refs.get(str(item["id"]), []))
        turns.extend(history.place[(session_id, seq)] for seq in seqs if (session_id, seq) in history.place)
    ordered = list(dict.fromkeys(turns))
    return ordered, list(dict.fromkeys(key for key, _ in ordered))


_SINGLE_SPACED = re.compile(r"\S+(?: \S+)*")


def exact_quote(text: str, rng: random.Random, words: int = QUOTE_WORDS) -> str:
    """``words`` consecutive words of ``text`` separated by single spaces (as an agent would paste
    them), from a random place; the longest such run when none is that long."""
    runs: list[list[str]] = [run.split(" ") for run in _SINGLE_SPACED.findall(text)]
    long_enough = [run for run in runs if len(run) >= words]
    if not long_enough or words >= 10_000:
        if not runs:
            return text.strip()
        longest: list[str] = max(long_enough or runs, key=len)
        return " ".join(longest)
    run = rng.choice(long_enough)
    start = rng.randrange(len(run) - words + 1)
    return " ".join(run[start : start + words])


class RecallFigures(BaseModel):
    """Recall at each k: some gold item among the first k."""

    questions: int
    """Questions scored."""
    turn: dict[str, float]
    """``@k`` -> share of the questions with some ``has_answer`` turn among the first k turns."""
    session: dict[str, float]
    """``@k`` -> share of the questions with some answer session among the first k sessions."""


Row = tuple[Question, list[tuple[str, int]], list[str]]


def figures(rows: Sequence[Row]) -> RecallFigures:
    def share(hit: Callable[[Question, list[tuple[str, int]], list[str], int], bool], k: int) -> float:
        return round(sum(hit(q, t, s, k) for q, t, s in rows) / max(1, len(rows)), 3)

    return RecallFigures(
        questions=len(rows),
        turn={f"@{k}": share(lambda q, t, _s, k: bool(q.gold_turns & set(t[:k])), k) for k in KS},
        session={f"@{k}": share(lambda q, _t, s, k: bool(q.gold_sessions & set(s[:k])), k) for k in KS},
    )


def by_type(rows: Sequence[Row]) -> dict[str, RecallFigures]:
    groups: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        groups[row[0].question_type].append(row)
    return {kind: figures(group) for kind, group in sorted(groups.items())}


def baseline_ranking(question: Question) -> tuple[list[tuple[str, int]], list[str]]:
    """Plain bm25s over the raw turns of the history (one document per turn)."""
    turns = [(key, turn) for key, _, session in question.sessions for turn in session]
    keyword = KeywordIndex.build([(i, turn.content) for i, (_, turn) in enumerate(turns)])
    found = [
        (turns[i][0], turns[i][1].position)
        for i in keyword.query(query_tokens(question.question), SEARCH_LIMIT)
    ]
    return found, list(dict.fromkeys(key for key, _ in found))


class RecallBenchResult(BaseModel):
    """Figures of one ``omray bench recall`` run."""

    dataset: str
    """The ``--dataset`` asked."""
    layout: str
    """How a history is played: ``one-session`` or ``per-session`` (see the module)."""
    observer: str
    """``builtin`` or ``condensing``."""
    questions: int
    """Questions asked (``_abs`` ones are skipped)."""
    histories: int
    """Histories played into the runtime (BEAM asks several questions of each)."""
    sessions: int
    """History sessions played, all histories together."""
    turns: int
    """Messages played, all histories together."""
    observations: int
    """Observations in the stores once built, all histories together."""
    omray: RecallFigures
    """Recall of omray's ``memory_search``."""
    baseline_bm25_turns: RecallFigures
    """Recall of plain ``bm25s`` over the raw turns of the same histories (the baseline)."""
    variants: dict[str, RecallFigures]
    """Recall of the same stores searched with each of the other rankings of :data:`VARIANTS`."""
    omray_by_type: dict[str, RecallFigures]
    """``omray``, per LongMemEval/BEAM question type."""
    baseline_by_type: dict[str, RecallFigures]
    """``baseline_bm25_turns``, per question type."""
    no_match_rate: float
    """Share of unrelated queries (each question asked of another history's store, one without its
    evidence) answered ``no_match`` with no results."""
    unrelated_queries: int
    """Unrelated queries asked (``no_match_rate``'s count)."""
    real_no_match_rate: float
    """Share of the real questions answered ``no_match`` (each is a miss)."""
    findable: float
    """Share of the history turns of 8+ words that an exact quote of 8 of their words finds."""
    findable_turns: int
    """Turns of 8+ words quoted (``findable``'s count)."""
    findable_short: float
    """Share of the shorter turns that an exact search of their whole text finds among the first 50
    results (a one-word "No" matches far more than 50 others)."""
    findable_short_turns: int
    """Shorter turns searched (``findable_short``'s count)."""
    search_p50_ms: float
    """p50 of the questions' ``memory_search`` calls, ms (taken while the next wave was built)."""
    search_p99_ms: float
    """p99 of the same."""
    exact_p50_ms: float
    """p50 of the exact searches of ``findable`` and ``findable_short``, ms."""
    build_s: float
    """Seconds until the last wave was observed and indexed (earlier waves are scored meanwhile)."""
    seconds: float
    """Wall time of the whole run."""
    embedder: str
    """The embedding model of the stores' hybrid index."""


# ------------------------------------------------------------------------------------- the run


def _settings(observer: ObserverKind, base_url: str | None) -> dict[str, Any]:
    if observer == "builtin":
        return {}  # a project with no settings file
    assert base_url is not None
    return {
        "model": "scripted/condense",
        "providers": {"scripted": {"base_url": base_url, "context_window": 32768}},
    }


@dataclass
class _Scores:
    omray: list[Row] = field(default_factory=list)
    baseline: list[Row] = field(default_factory=list)
    variants: dict[str, list[Row]] = field(default_factory=lambda: defaultdict(list))
    latencies: list[float] = field(default_factory=list)
    exact_latencies: list[float] = field(default_factory=list)
    findable: list[bool] = field(default_factory=list)
    findable_short: list[bool] = field(default_factory=list)
    real_no_match: list[bool] = field(default_factory=list)
    unrelated_no_match: list[bool] = field(default_factory=list)
    observations: int = 0


def history_key(question: Question) -> tuple[tuple[str, str], ...]:
    """What identifies a question's history: its sessions and their dates (BEAM asks several questions
    of one history; each is played into the runtime once)."""
    return tuple((key, date) for key, date, _ in question.sessions)


def _search(client: Any, question: Question, **extra: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"query": question.question, "limit": SEARCH_LIMIT, **extra}
    if question.asked:
        arguments["query_date"] = question.asked
    answer: dict[str, Any] = client.memory_search(arguments)
    return answer


def _score(client: Any, question: Question, history: History, scores: _Scores) -> None:
    """Ask one question of the store its history was played into."""
    refs = cited_refs(client.db_path)
    begin = time.perf_counter()
    answer = _search(client, question)
    scores.latencies.append((time.perf_counter() - begin) * 1000)
    if answer.get("ok") is not True or answer.get("mode") == "exact":
        raise RuntimeError(
            f"hybrid memory_search failed: {answer.get('error') or answer.get('hybrid_unavailable')!r}"
        )
    scores.omray.append((question, *ranked_turns(answer["results"], refs, history)))
    scores.real_no_match.append(answer.get("no_match") is True)
    scores.baseline.append((question, *baseline_ranking(question)))
    semantic = client.settings.semantic
    for name, (fusion, overrides, weights) in VARIANTS.items():
        hybrid = hybrid_search_for(
            str(client.db_path), semantic.model_copy(update=overrides), fusion=fusion, weights=weights
        )
        arguments: dict[str, Any] = {"query": question.question, "limit": SEARCH_LIMIT}
        if question.asked:
            arguments["query_date"] = question.asked
        variant = memory_search(client.db_path, arguments, hybrid)
        results = variant.get("results")
        scores.variants[name].append(
            (question, *ranked_turns(results if isinstance(results, list) else [], refs, history))
        )


def _unrelated_store(
    wave: Sequence[tuple[Any, list[Question], History]], position: int, question: Question
) -> Any | None:
    """The client of the next history of the wave that holds none of ``question``'s evidence sessions."""
    for step in range(1, len(wave)):
        client, group, _ = wave[(position + step) % len(wave)]
        if not question.gold_sessions & {key for key, _, _ in group[0].sessions}:
            return client
    return None


def _score_unrelated(client: Any, question: Question, scores: _Scores) -> None:
    """Ask a question of ANOTHER history's store (one that holds none of its evidence sessions):
    nothing there answers it, so the right answer is ``no_match``."""
    answer = _search(client, question)
    if answer.get("ok") is not True:
        raise RuntimeError(f"hybrid memory_search failed: {answer.get('error')!r}")
    scores.unrelated_no_match.append(answer.get("no_match") is True and answer.get("count") == 0)


def _score_findable(
    client: Any, question: Question, history: History, scores: _Scores, rng: random.Random
) -> None:
    """Whether every turn of a history is found by an exact quote of it."""
    refs = cited_refs(client.db_path)
    scores.observations += len(refs)
    for _, _, turns in question.sessions:
        for turn in turns:
            if not turn.content.strip():
                continue
            found = _findable(client, turn, refs, history, scores, rng)
            if len(turn.content.split()) >= QUOTE_WORDS:
                scores.findable.append(found)
            else:
                scores.findable_short.append(found)


def _findable(
    client: Any,
    turn: Turn,
    refs: Mapping[str, list[int]],
    history: History,
    scores: _Scores,
    rng: random.Random,
) -> bool:
    """Whether an exact quote of the turn finds it; a quote so common that the first results are all
    elsewhere is lengthened (to the whole single-spaced run it comes from) once."""
    for words in (QUOTE_WORDS, 10_000):
        begin = time.perf_counter()
        found = client.memory_search(
            {"query": exact_quote(turn.content, rng, words), "mode": "exact", "limit": SEARCH_LIMIT}
        )
        scores.exact_latencies.append((time.perf_counter() - begin) * 1000)
        hits = found.get("results", []) if found.get("ok") is True else []
        if (turn.session, turn.position) in set(ranked_turns(hits, refs, history)[0]):
            return True
        if not found.get("truncated"):
            return False
    return False


def run_recall_bench(
    dataset: Dataset,
    questions: int | None = None,
    data_dir: Path = DATA_DIR,
    *,
    layout: Layout = "one-session",
    observer: ObserverKind = "builtin",
) -> RecallBenchResult:
    """Build every question's memory through the runtime (needs ``ray.init``), ask, score."""
    import ray

    from cluster.client import OmrayClient
    from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime, remove_runtime
    from cluster.naming import RuntimeNames

    if not ray.is_initialized():
        raise RuntimeError("not connected to Ray: use `omray bench recall`, or call ray.init() first")
    started = time.monotonic()
    records = select(
        load_records(dataset, data_dir), DEFAULT_QUESTIONS[dataset] if questions is None else questions
    )
    chosen = [build_question(record) for record in records]
    histories: dict[tuple[tuple[str, str], ...], list[Question]] = defaultdict(list)
    for question in chosen:
        histories[history_key(question)].append(question)
    groups = list(histories.values())
    names = RuntimeNames(prefix=f"recall{uuid.uuid4().hex[:8]}")
    scores = _Scores()
    rng = random.Random(29)
    build_s = 0.0
    with (
        tempfile.TemporaryDirectory(prefix="omray-bench-recall-") as tmp,
        _observer_server(observer) as base_url,
    ):
        work = Path(tmp)
        ensure_runtime(names, queue_db=str(work / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
        try:

            def start(wave: int) -> list[tuple[Any, list[Question], History]]:
                started_wave = []
                for group in groups[wave : wave + WAVE]:
                    project = work / f"q-{group[0].question_id}"
                    project.mkdir()
                    client = OmrayClient(names, settings=_settings(observer, base_url), cwd=project)
                    started_wave.append((client, group, play_history(client, group[0], layout)))
                return started_wave

            begin = time.monotonic()
            ready = start(0)
            for wave in range(0, len(groups), WAVE):
                if not ready[0][0].wait_idle(timeout_s=IDLE_TIMEOUT_S):
                    raise RuntimeError("the runtime did not finish observing and indexing in time")
                build_s = time.monotonic() - begin
                scoring, ready = ready, start(wave + WAVE) if wave + WAVE < len(groups) else []
                for position, (client, group, history) in enumerate(scoring):
                    for question in group:
                        _score(client, question, history, scores)
                        other = _unrelated_store(scoring, position, question)
                        if other is not None:
                            _score_unrelated(other, question, scores)
                    _score_findable(client, group[0], history, scores, rng)
                for client, _, _ in scoring:
                    _stop_store(names, client.db_path)
                    client.close()
        finally:
            remove_runtime(names)
    return RecallBenchResult(
        dataset=dataset,
        layout=layout,
        observer=observer,
        questions=len(chosen),
        histories=len(groups),
        sessions=sum(len(group[0].sessions) for group in groups),
        turns=sum(len(turns) for group in groups for _, _, turns in group[0].sessions),
        observations=scores.observations,
        omray=figures(scores.omray),
        baseline_bm25_turns=figures(scores.baseline),
        variants={name: figures(rows) for name, rows in sorted(scores.variants.items())},
        omray_by_type=by_type(scores.omray),
        baseline_by_type=by_type(scores.baseline),
        no_match_rate=_share(scores.unrelated_no_match, 3),
        unrelated_queries=len(scores.unrelated_no_match),
        real_no_match_rate=_share(scores.real_no_match, 3),
        findable=_share(scores.findable, 4),
        findable_turns=len(scores.findable),
        findable_short=_share(scores.findable_short, 4),
        findable_short_turns=len(scores.findable_short),
        search_p50_ms=round(percentile(scores.latencies, 0.5), 1),
        search_p99_ms=round(percentile(scores.latencies, 0.99), 1),
        exact_p50_ms=round(percentile(scores.exact_latencies, 0.5), 2),
        build_s=round(build_s, 1),
        seconds=round(time.monotonic() - started, 1),
        embedder="builtin/all-minilm-l6-v2 (int8 ONNX)",
    )


def _share(outcomes: Sequence[bool], digits: int) -> float:
    """The share of ``outcomes`` that are true, rounded to ``digits`` (0.0 when there are none)."""
    return round(sum(outcomes) / max(1, len(outcomes)), digits)


def _stop_store(names: Any, db_path: Path) -> None:
    """Stop a scored question's StoreActor (nothing writes its database any more)."""
    import ray

    with contextlib.suppress(ValueError):
        ray.kill(
            ray.get_actor(names.store(str(db_path.resolve())), namespace=names.namespace), no_restart=True
        )


class _observer_server:
    """The condensing observer's scripted OpenAI-compatible server (nothing for the builtin model)."""

    def __init__(self, observer: ObserverKind) -> None:
        self._observer = observer
        self._process: Any = None

    def __enter__(self) -> str | None:
        if self._observer == "builtin":
            return None
        from testkit.scripted_models import CondensingMemoryModel
        from testkit.scripted_server import ScriptedServerProcess

        self._process = ScriptedServerProcess(CondensingMemoryModel, CONDENSE_EVERY)
        return str(self._process.__enter__().base_url)

    def __exit__(self, *exc: object) -> None:
        if self._process is not None:
            self._process.__exit__(*exc)
