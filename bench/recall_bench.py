"""``omray bench recall``: memory search recall on the LongMemEval development set.

Each LongMemEval history is turned into omray events (one omray session per LongMemEval session:
a user turn is an ``agent_command_applied`` event, an assistant turn an ``llm_step_completed``
event, seq = turn position + 1, then an ``agent_end``; every event carries the session's date).
It then goes through omray's own pipeline, in this process and without Ray: the Observer
(``actors.observer.pipeline.observe_through`` with ``builtin/extractive``) commits observations
through a :class:`persistence.store.Store`; :class:`persistence.semantic.SemanticIndex`, given the
events root, indexes memories and the cited events (source chunks) with the offline MiniLM
embedder until complete; every question is asked through ``actors.read.service.memory_search``
with the hybrid hook of ``actors.read.hybrid.hybrid_search_for`` (what ``OmrayClient`` calls),
``limit`` 50.

Scoring (questions with the ``_abs`` suffix are skipped, as upstream does):

* **turn level**: each hit stands for the turns it covers (its source excerpt's seq range, else
  the observation's source refs); turns ranked by first appearance; gold = ``has_answer`` turns.
* **session level**: sessions ranked by first appearance among the hits; gold =
  ``answer_session_ids``.

``recall_any@k`` = some gold item in the first k, ``recall_all@k`` = every gold item in the first k,
overall and by question type. The same-run baseline is plain ``bm25s`` over the raw turns of the
same store (omray's keyword tokenizer, one document per turn); ``omray_rrf`` is the same index
searched with the reference's rank-only fusion (RRF, k 60) instead of the default score-aware
fusion. ``search_p50_ms`` times the whole ``memory_search`` call (default fusion), query embedding
included.

``longmemeval-s``: each question has its own store (its 43-55 sessions incl. distractors).
``longmemeval-oracle``: the sessions of every selected question are pooled into one store (ids
that recur with another date become separate sessions), so each question competes with all of
them. The data is read from ``../shared/data/longmemeval`` (``--data-dir``); it is never copied.
Figures are printed, never asserted.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import sqlite3
import statistics
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel

from actors.models.embeddings import default_offline_embedder
from actors.models.registry import model_for
from actors.models.tokens import token_counter
from actors.observer.pipeline import ObserverPorts, observe_through
from actors.read.hybrid import hybrid_search_for
from actors.read.service import memory_search
from bench.shared_data import shared_data_dir
from persistence.events_reader import read_event_window
from persistence.queries import MemoryReader
from persistence.semantic import JOB_BATCHES, SemanticIndex
from persistence.semantic.keyword import KeywordIndex, query_tokens
from persistence.store import Store
from protocol.jobs import ObserveBoundaryJob
from protocol.semantic import Embedder
from protocol.settings import settings_from_mapping

Dataset = Literal["longmemeval-s", "longmemeval-oracle"]
DATA_DIR: Final[Path] = shared_data_dir() / "longmemeval"
FILES: Final[dict[str, str]] = {
    "longmemeval-s": "longmemeval_s_subset26.json.gz",
    "longmemeval-oracle": "longmemeval_oracle.json.gz",
}
DEFAULT_QUESTIONS: Final[dict[str, int]] = {"longmemeval-s": 6, "longmemeval-oracle": 60}
"""Questions of a default run (a few minutes on 2 cores); ``--questions 0`` takes all."""
KS: Final[tuple[int, ...]] = (1, 5, 10, 20)
SEARCH_LIMIT: Final[int] = 50
SETTINGS: Final[dict[str, Any]] = {
    "model": "builtin/extractive",
    "semantic": {"embedding_api": {"model_id": "builtin/all-minilm-l6-v2"}},
}


class DataMissingError(FileNotFoundError):
    """The development set is not where the benchmark looks for it."""


@dataclass(frozen=True)
class Turn:
    session: str
    seq: int
    role: str
    content: str


@dataclass
class Question:
    question_id: str
    question_type: str
    question: str
    gold_sessions: set[str] = field(default_factory=set)
    gold_turns: set[tuple[str, int]] = field(default_factory=set)
    sessions: list[str] = field(default_factory=list)


@dataclass
class Corpus:
    """Sessions (omray session id -> date, turns) and the questions asked of them."""

    dates: dict[str, str] = field(default_factory=dict)
    turns: dict[str, list[Turn]] = field(default_factory=dict)
    questions: list[Question] = field(default_factory=list)


def load_records(dataset: Dataset, data_dir: Path = DATA_DIR) -> list[dict[str, Any]]:
    path = data_dir / FILES[dataset]
    if not path.is_file():
        raise DataMissingError(f"LongMemEval file {path.name!r} not found in {str(data_dir)!r}")
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


def build_corpus(records: Iterable[Mapping[str, Any]]) -> Corpus:
    """Sessions keyed by an omray session id that is unique per (LongMemEval id, date)."""
    corpus = Corpus()
    keys: dict[tuple[str, str], str] = {}
    for record in records:
        question = Question(str(record["question_id"]), str(record["question_type"]), str(record["question"]))
        gold = set(record["answer_session_ids"])
        for sid, date, session in zip(
            record["haystack_session_ids"], record["haystack_dates"], record["haystack_sessions"], strict=True
        ):
            key = keys.get((sid, date))
            if key is None:
                key = (
                    sid
                    if sid not in corpus.turns
                    else f"{sid}_{hashlib.sha256(date.encode()).hexdigest()[:6]}"
                )
                keys[(sid, date)] = key
                corpus.dates[key] = lme_timestamp(date)
                corpus.turns[key] = [
                    Turn(key, index + 1, str(turn["role"]), str(turn["content"]))
                    for index, turn in enumerate(session)
                ]
            question.sessions.append(key)
            if sid in gold:
                question.gold_sessions.add(key)
                question.gold_turns.update(
                    (key, index + 1) for index, turn in enumerate(session) if turn.get("has_answer")
                )
        corpus.questions.append(question)
    return corpus


def _event(session: str, seq: int, kind: str, payload: dict[str, Any], ts: str) -> str:
    line = {"schema_version": "1.0", "run_id": session, "seq": seq, "turn_no": 1, "type": kind}
    return json.dumps({**line, "payload": payload, "ts": ts}, ensure_ascii=False) + "\n"


def write_events(root: Path, session: str, turns: Sequence[Turn], ts: str) -> Path:
    path = root / session / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for turn in turns:
        if turn.role == "user":
            lines.append(_event(session, turn.seq, "agent_command_applied", {"text": turn.content}, ts))
        else:
            message = {"role": "assistant", "content": turn.content}
            lines.append(_event(session, turn.seq, "llm_step_completed", {"assistant_message": message}, ts))
    lines.append(_event(session, len(turns) + 1, "agent_end", {"reason": "completed"}, ts))
    path.write_text("".join(lines), encoding="utf-8")
    return path


class CachedEmbedder:
    """An embedder that remembers vectors by text digest (optionally in a ``.npz`` file between runs)."""

    def __init__(self, inner: Embedder, path: Path | None) -> None:
        self.inner = inner
        self.path = path
        self.vectors: dict[str, list[float]] = {}
        self.computed = 0
        if path is not None and path.is_file():
            with np.load(path) as data:
                self.vectors = dict(zip(data["keys"].tolist(), data["vectors"].tolist(), strict=True))

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        keys = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
        missing = [(key, text) for key, text in zip(keys, texts, strict=True) if key not in self.vectors]
        if missing:
            vectors = self.inner.embed([text for _, text in missing])
            self.computed += len(missing)
            self.vectors.update((key, vector) for (key, _), vector in zip(missing, vectors, strict=True))
        return [self.vectors[key] for key in keys]

    def save(self) -> None:
        if self.path is None or not self.computed:
            return
        keys = list(self.vectors)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(
            self.path, keys=np.asarray(keys), vectors=np.asarray([self.vectors[k] for k in keys], np.float32)
        )
        self.computed = 0


@dataclass
class StoreRun:
    """One store built through the pipeline, and what it took."""

    db_path: str
    refs: dict[str, list[tuple[str, int]]]
    observations: int
    chunks: int
    observe_s: float
    index_s: float


def build_store(work: Path, corpus: Corpus, sessions: Sequence[str], embedder: Embedder) -> StoreRun:
    """Events -> Observer (builtin model) -> Store -> SemanticIndex (with source chunks), complete."""
    root = work / "sessions"
    db_path = str(work / "om.sqlite")
    block = {**SETTINGS, "storage": {"database": db_path}}
    settings = settings_from_mapping(block)
    assert settings.semantic is not None
    count = token_counter(settings.token_encoding).count
    store = Store(db_path)
    started = time.monotonic()
    for session in sessions:
        events_path = write_events(root, session, corpus.turns[session], corpus.dates[session])
        ports = ObserverPorts(
            memory=MemoryReader(db_path),
            store=store,
            read_events=functools.partial(read_event_window, events_path),
            resolve_model=lambda model: model_for(settings, model),
            count_tokens=count,
            now_utc=lambda: "2024-01-01T00:00:00+00:00",
            now_local=lambda: "2024-01-01 00:00",
        )
        job = ObserveBoundaryJob(
            run_id=session,
            terminal_end_seq=len(corpus.turns[session]) + 1,
            terminal_status="completed",
            renderer_version=settings.renderer_version,
            observer_schema_version=settings.observer_schema_version,
            db_path=db_path,
            events_path=str(events_path),
            settings=block,
            # A finished session: observed through its end whatever its size (the default turn-end
            # signal defers below ``observe_after_tokens`` of new source, and would observe nothing).
            signal="session_end",
        )
        observe_through(job, f"bench-{session}", settings, ports)
    observe_s = time.monotonic() - started
    started = time.monotonic()
    index = SemanticIndex(db_path, settings.semantic, store)
    while not index.synchronize(embedder, batches=JOB_BATCHES).complete:
        pass
    index_s = time.monotonic() - started
    refs: dict[str, list[tuple[str, int]]] = {}
    with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True) as conn:
        for memory_id, run_id, raw in conn.execute(
            "SELECT observation_id, run_id, source_refs_json FROM om_observation"
        ):
            refs[memory_id] = [
                (run_id, int(ref["seq"])) for ref in json.loads(raw) if ref.get("run_id") == run_id
            ]
    with sqlite3.connect(f"file:{index.directory / 'manifest.sqlite'}?mode=ro", uri=True) as conn:
        chunks = int(conn.execute("SELECT count(*) FROM chunk").fetchone()[0])
    store.close()
    if sessions and not refs:
        # Recall over an empty store would read as a ranking result of zero; it is a broken run.
        raise RuntimeError(f"the observer wrote no observations for {len(sessions)} session(s)")
    return StoreRun(db_path, refs, len(refs), chunks, observe_s, index_s)


def _dedup(items: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(items))


def rank_hits(
    results: Sequence[Mapping[str, Any]], refs: Mapping[str, list[tuple[str, int]]]
) -> tuple[list[Any], list[str]]:
    """(turns, sessions) in first-appearance order of the hits."""
    turns: list[tuple[str, int]] = []
    for item in results:
        source = item.get("source")
        if isinstance(source, Mapping):
            turns.extend(
                (str(item["session_id"]), seq)
                for seq in range(int(source["seq_start"]), int(source["seq_end"]) + 1)
            )
        else:
            turns.extend(refs.get(str(item["id"]), []))
    return _dedup(turns), _dedup(str(item["session_id"]) for item in results)


class RecallFigures(BaseModel):
    """Recall at each k, overall; ``any``: some gold item in the first k, ``all``: every gold item."""

    questions: int
    turn_any: dict[str, float]
    turn_all: dict[str, float]
    session_any: dict[str, float]
    session_all: dict[str, float]


def figures(rows: Sequence[tuple[Question, list[Any], list[str]]]) -> RecallFigures:
    def share(hit: Callable[[Question, list[Any], list[str], int], bool], k: int) -> float:
        usable = [row for row in rows if row[0].gold_turns or (hit is not _turn_any and hit is not _turn_all)]
        return round(sum(hit(q, t, s, k) for q, t, s in usable) / max(1, len(usable)), 3)

    return RecallFigures(
        questions=len(rows),
        turn_any={f"@{k}": share(_turn_any, k) for k in KS},
        turn_all={f"@{k}": share(_turn_all, k) for k in KS},
        session_any={f"@{k}": share(_session_any, k) for k in KS},
        session_all={f"@{k}": share(_session_all, k) for k in KS},
    )


def _turn_any(q: Question, turns: list[Any], _s: list[str], k: int) -> bool:
    return bool(q.gold_turns & set(turns[:k]))


def _turn_all(q: Question, turns: list[Any], _s: list[str], k: int) -> bool:
    return q.gold_turns <= set(turns[:k])


def _session_any(q: Question, _t: list[Any], sessions: list[str], k: int) -> bool:
    return bool(q.gold_sessions & set(sessions[:k]))


def _session_all(q: Question, _t: list[Any], sessions: list[str], k: int) -> bool:
    return q.gold_sessions <= set(sessions[:k])


class RecallBenchResult(BaseModel):
    """Figures of one ``omray bench recall`` run."""

    dataset: str
    questions: int
    sessions: int
    turns: int
    observations: int
    chunks: int
    stores: int
    observe_s: float
    index_s: float
    search_p50_ms: float
    search_p99_ms: float
    omray: RecallFigures
    omray_rrf: RecallFigures
    baseline_bm25_turns: RecallFigures
    omray_by_type: dict[str, RecallFigures]
    baseline_by_type: dict[str, RecallFigures]
    embedder: str
    seconds: float


def _by_type(rows: Sequence[tuple[Question, list[Any], list[str]]]) -> dict[str, RecallFigures]:
    groups: dict[str, list[tuple[Question, list[Any], list[str]]]] = defaultdict(list)
    for row in rows:
        groups[row[0].question_type].append(row)
    return {kind: figures(group) for kind, group in sorted(groups.items())}


def baseline_ranking(
    corpus: Corpus, sessions: Sequence[str], query: str, keyword: KeywordIndex, labels: list[tuple[str, int]]
) -> tuple[list[Any], list[str]]:
    found = keyword.query(query_tokens(query), SEARCH_LIMIT)
    turns = [labels[label] for label in found]
    return turns, _dedup(session for session, _ in turns)


def run_recall_bench(
    dataset: Dataset,
    questions: int | None = None,
    data_dir: Path = DATA_DIR,
    embedding_cache: Path | None = None,
) -> RecallBenchResult:
    started = time.monotonic()
    chosen = select(
        load_records(dataset, data_dir), DEFAULT_QUESTIONS[dataset] if questions is None else questions
    )
    corpus = build_corpus(chosen)
    embedder = CachedEmbedder(default_offline_embedder(), embedding_cache)
    if dataset == "longmemeval-oracle":
        groups = [(list(corpus.turns), corpus.questions)]
    else:
        groups = [(question.sessions, [question]) for question in corpus.questions]
    omray_rows: list[tuple[Question, list[Any], list[str]]] = []
    base_rows: list[tuple[Question, list[Any], list[str]]] = []
    rrf_rows: list[tuple[Question, list[Any], list[str]]] = []
    latencies: list[float] = []
    observations = chunks = 0
    observe_s = index_s = 0.0
    semantic = settings_from_mapping(SETTINGS).semantic
    assert semantic is not None
    for sessions, asked in groups:
        with tempfile.TemporaryDirectory(prefix="omray-bench-recall-") as tmp:
            run = build_store(Path(tmp), corpus, sessions, embedder)
            embedder.save()  # after each store, so an interrupted run keeps its vectors
            observations += run.observations
            chunks += run.chunks
            observe_s += run.observe_s
            index_s += run.index_s
            search = hybrid_search_for(run.db_path, semantic)
            search_rrf = hybrid_search_for(run.db_path, semantic, fusion="rrf")
            labels = [(turn.session, turn.seq) for session in sessions for turn in corpus.turns[session]]
            keyword = KeywordIndex.build(
                [(i, turn.content) for i, turn in enumerate(t for s in sessions for t in corpus.turns[s])]
            )
            for question in asked:
                begin = time.perf_counter()
                answer = memory_search(
                    run.db_path, {"query": question.question, "limit": SEARCH_LIMIT}, hybrid_search=search
                )
                latencies.append((time.perf_counter() - begin) * 1000)
                if answer.get("ok") is not True:
                    raise RuntimeError(f"memory_search failed: {answer.get('error')!r}")
                results = answer["results"]
                assert isinstance(results, list)
                omray_rows.append((question, *rank_hits(results, run.refs)))
                rrf = memory_search(
                    run.db_path, {"query": question.question, "limit": SEARCH_LIMIT}, hybrid_search=search_rrf
                )
                rrf_results = rrf.get("results")
                assert isinstance(rrf_results, list)
                rrf_rows.append((question, *rank_hits(rrf_results, run.refs)))
                base_rows.append(
                    (question, *baseline_ranking(corpus, sessions, question.question, keyword, labels))
                )
    embedder.save()
    return RecallBenchResult(
        dataset=dataset,
        questions=len(corpus.questions),
        sessions=len(corpus.turns),
        turns=sum(len(turns) for turns in corpus.turns.values()),
        observations=observations,
        chunks=chunks,
        stores=len(groups),
        observe_s=round(observe_s, 1),
        index_s=round(index_s, 1),
        search_p50_ms=round(statistics.median(latencies), 1),
        search_p99_ms=round(float(np.percentile(latencies, 99)), 1),
        omray=figures(omray_rows),
        omray_rrf=figures(rrf_rows),
        baseline_bm25_turns=figures(base_rows),
        omray_by_type=_by_type(omray_rows),
        baseline_by_type=_by_type(base_rows),
        embedder="builtin/all-minilm-l6-v2 (int8 ONNX)"
        + (f", cache {embedding_cache.name}" if embedding_cache else ""),
        seconds=round(time.monotonic() - started, 1),
    )
