"""Nothing observed is forgotten (issue 29): every covered message stays findable, whatever the Observer
wrote down, and the offline model records every message of a long session."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.indexer.sync import synchronize
from actors.models.builtin import BuiltinExtractiveModel
from actors.models.chat import ChatRequest, ChatResponse, ToolCall
from actors.models.tokens import token_counter
from actors.observer.pipeline import ObserverPorts, observe_through
from actors.read.retrieval import retrieve
from actors.read.service import memory_search
from persistence.files.events_reader import read_event_window
from persistence.reads.memory_reader import MemoryReader
from persistence.semantic import SemanticIndex
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.jobs import ObserveBoundaryJob
from protocol.settings import OmSettings
from tests.unit.persistence.semantic.conftest import HashEmbedder, RecordingWriter, semantic_settings

SESSION = "long-1"
WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lagoon",
    "meadow",
    "nectar",
    "orchid",
    "pepper",
    "quartz",
    "raven",
    "saffron",
    "timber",
    "umber",
    "velvet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
    "anchor",
    "beacon",
    "canyon",
    "dune",
    "estuary",
    "falcon",
    "glacier",
    "heron",
    "island",
    "jasper",
    "kettle",
    "lantern",
    "marble",
    "nutmeg",
    "oyster",
]


def message(rng: random.Random, number: int) -> str:
    """A distinct message: a numbered marker and 12-30 words."""
    return f"note{number} " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30)))


def write_session(path: Path, texts: Sequence[str], session: str = SESSION) -> None:
    """Alternating user and assistant messages (seq = position + 1), then the session's end."""
    lines = []
    for index, text in enumerate(texts):
        seq = index + 1
        if index % 2 == 0:
            kind, payload = "agent_command_applied", {"text": text}
        else:
            kind, payload = (
                "llm_step_completed",
                {"assistant_message": {"role": "assistant", "content": text}},
            )
        lines.append({"type": kind, "payload": payload, "seq": seq})
    lines.append({"type": "agent_end", "payload": {"reason": "completed"}, "seq": len(texts) + 1})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            json.dumps(
                {
                    "schema_version": "1.0",
                    "run_id": session,
                    "turn_no": 1,
                    "ts": "2026-11-30T10:00:00+00:00",
                    **line,
                }
            )
            + "\n"
            for line in lines
        ),
        encoding="utf-8",
    )


def ports(db: Path, events: Path, model: Any) -> ObserverPorts:
    return ObserverPorts(
        memory=MemoryReader(db),
        store=Store(db),
        read_events=lambda start, end: read_event_window(events, start, end),
        resolve_model=lambda name: (model, 32768),
        count_tokens=token_counter("o200k_base").count,
        now_utc=lambda: "2026-11-30T10:00:00+00:00",
        now_local=lambda: "2026-11-30 10:00",
    )


def job(
    db: Path, events: Path, end: int, signal: str = "session_end", session: str = SESSION
) -> ObserveBoundaryJob:
    return ObserveBoundaryJob.model_validate(
        {
            "run_id": session,
            "terminal_end_seq": end,
            "terminal_status": "completed",
            "renderer_version": "1",
            "observer_schema_version": "1",
            "db_path": str(db),
            "events_path": str(events),
            "settings": {},
            "signal": signal,
        }
    )


def quote(text: str, rng: random.Random) -> str:
    """Eight consecutive words of ``text`` (the whole text when shorter)."""
    words = text.split()
    start = rng.randrange(max(1, len(words) - 7))
    return " ".join(words[start : start + 8])


def found_seqs(answer: dict[str, object], cited: dict[str, set[int]]) -> set[int]:
    """The seqs a search answer leads to: each hit's source excerpt, else the events its memory cites."""
    seqs: set[int] = set()
    results = answer.get("results")
    assert isinstance(results, list), answer
    for item in results:
        source = item.get("source")
        if isinstance(source, dict):
            seqs.update(range(int(source["seq_start"]), int(source["seq_end"]) + 1))
        else:
            seqs.update(cited.get(str(item["id"]), set()))
    return seqs


def cited_by_observation(db: Path, session: str = SESSION) -> dict[str, set[int]]:
    return {
        observation.observation_id: {ref.seq for ref in observation.source_refs}
        for observation in MemoryReader(db).all_observations(session)
    }


def test_a_long_session_with_default_settings_keeps_every_message_in_memory(tmp_path: Path) -> None:
    """1,200 messages observed with the default settings (offline model, default trigger policy): no
    message is dropped by the model, coverage reaches the end, and an exact quote of each message
    finds it."""
    rng = random.Random(7)
    texts = [message(rng, number) for number in range(1200)]
    db, events = tmp_path / "om.sqlite", tmp_path / "sessions" / SESSION / "events.jsonl"
    write_session(events, texts)
    defaults: OmSettings = settings_from_mapping(None)
    assert defaults.model == "builtin/extractive"

    result = observe_through(
        job(db, events, len(texts) + 1), "j1", defaults, ports(db, events, BuiltinExtractiveModel())
    )

    assert result.status == "inserted"
    assert MemoryReader(db).contiguous_covered_end(SESSION, "1", "1") == len(texts) + 1
    cited = cited_by_observation(db)
    every_cited = set().union(*cited.values())
    assert every_cited >= set(range(1, len(texts) + 1))  # every message has its observation
    for index, text in enumerate(texts):
        answer = memory_search(db, {"query": quote(text, rng), "mode": "exact", "limit": 50})
        assert index + 1 in found_seqs(answer, cited), (index + 1, answer)


class CondensingModel:
    """A model that condenses as real ones do: one short observation per ten messages, citing them all."""

    def complete(self, request: ChatRequest) -> Any:
        messages = request.messages
        if any(message.get("role") == "assistant" and message.get("tool_calls") for message in messages):
            return ChatResponse(text="done")
        text = str(messages[-1]["content"])
        labels = [
            line.split(": ", 1)[1].rstrip("]") for line in text.splitlines() if "Source entry id:" in line
        ]
        refs = [label.rpartition(":") for label in labels]
        groups = [refs[start : start + 10] for start in range(0, len(refs), 10)]
        observations = [
            {
                "timestamp": "2026-11-30 10:00",
                "content": f"The user and assistant talked about {len(group)} things.",
                "relevance": "medium",
                "source_refs": [{"run_id": session_id, "seq": int(seq)} for session_id, _, seq in group],
            }
            for group in groups
        ]
        if not observations:
            return ChatResponse(text="nothing")
        call = ToolCall(
            call_id="c1", name="record_observations", arguments=json.dumps({"observations": observations})
        )
        return ChatResponse(tool_calls=(call,))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    messages=st.integers(min_value=1, max_value=40),
    steps=st.lists(
        st.tuples(st.sampled_from(["observe", "index"]), st.integers(1, 41)), min_size=1, max_size=12
    ),
    seed=st.integers(0, 1000),
)
def test_every_covered_message_is_found_by_an_exact_quote_after_any_interleaving(
    tmp_path_factory: Any, messages: int, steps: list[tuple[str, int]], seed: int
) -> None:
    """Observe jobs (a condensing model, any terminal seqs) and index jobs in any order: every message
    inside the coverage is found by an exact quote, and, once the index caught up, by hybrid search."""
    rng = random.Random(seed)
    tmp_path = tmp_path_factory.mktemp("interleave")
    texts = [message(rng, number) for number in range(messages)]
    db, events = tmp_path / "om.sqlite", tmp_path / "sessions" / SESSION / "events.jsonl"
    write_session(events, texts)
    block = {"observer": {"observe_after_tokens": 0}}
    observer_settings = settings_from_mapping(block)
    observer_ports = ports(db, events, CondensingModel())
    index = SemanticIndex(db, semantic_settings(), RecordingWriter(Store(db)))
    embedder = HashEmbedder()
    for number, (kind, end) in enumerate([*steps, ("observe", messages + 1), ("index", 0)]):
        if kind == "observe":
            terminal = min(end, messages + 1)
            observe_through(
                job(db, events, terminal, signal="turn_end").model_copy(update={"settings": block}),
                f"j{number}",
                observer_settings,
                observer_ports,
            )
        else:
            while not synchronize(index, embedder).complete:
                pass
        covered = MemoryReader(db).contiguous_covered_end(SESSION, "1", "1") or 0
        cited = cited_by_observation(db)
        for position in range(min(covered, messages)):
            text = texts[position]
            answer = memory_search(db, {"query": quote(text, rng), "mode": "exact", "limit": 50})
            assert position + 1 in found_seqs(answer, cited)
    retrieval = retrieve(index, texts[-1], embedder, limit=50)
    found = {excerpt.seq_start for excerpt in retrieval.excerpts if excerpt is not None}
    assert messages in found or any(
        messages in cited_by_observation(db)[m.memory_id] for m in retrieval.results
    )
