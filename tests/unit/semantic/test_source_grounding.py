"""Source-grounded hybrid search (issue 14): the cited events' text is indexed under the citing memory."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from actors.read.service import memory_search
from persistence.semantic import SemanticIndex
from persistence.semantic.manifest import Manifest
from protocol.events import SessionEvent
from protocol.semantic import hybrid_answer
from protocol.source_text import already_held, event_search_text
from tests.unit.semantic.conftest import (
    HashEmbedder,
    RecordingWriter,
    hybrid_tool,
    semantic_settings,
    sync_all,
)


def _event(session: str, seq: int, event_type: str, payload: dict[str, object]) -> dict[str, object]:
    return {
        "schema_version": "1.0",
        "run_id": session,
        "seq": seq,
        "turn_no": 1,
        "type": event_type,
        "payload": payload,
        "ts": "2026-09-11T10:00:00+00:00",
    }


def _user(session: str, seq: int, text: str) -> dict[str, object]:
    return _event(session, seq, "agent_command_applied", {"text": text})


def _assistant(session: str, seq: int, text: str) -> dict[str, object]:
    return _event(
        session, seq, "llm_step_completed", {"assistant_message": {"role": "assistant", "content": text}}
    )


def write_events(root: Path, session: str, events: list[dict[str, object]]) -> None:
    path = root / session / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(event) + "\n" for event in events), encoding="utf-8")


def add_observation(db_path: Path, session: str, content: str, refs: list[tuple[str, int]]) -> str:
    memory_id = hashlib.sha256(f"{session}\n{content}\n{refs}".encode()).hexdigest()
    refs_json = json.dumps([{"run_id": run_id, "seq": seq} for run_id, seq in refs])
    with sqlite3.connect(db_path, isolation_level=None) as conn:
        conn.execute(
            "INSERT INTO om_observation (observation_id, run_id, boundary_key, source_start_seq,"
            " source_end_seq, source_refs_json, content, content_hash, relevance, timestamp, token_count,"
            " observer_model, observer_schema_version, created_at)"
            " VALUES (?, ?, 'b', 1, 1, ?, ?, ?, 'medium', '2026-09-11 10:00', 1, 'm', '1',"
            " '2026-09-11T10:00:00+00:00')",
            (memory_id, session, refs_json, content, hashlib.sha256(content.encode()).hexdigest()),
        )
    return memory_id


@pytest.fixture
def events_root(tmp_path: Path) -> Path:
    return tmp_path / "sessions"


@pytest.fixture
def grounded(db_path: Path, writer: RecordingWriter, events_root: Path) -> SemanticIndex:
    return SemanticIndex(db_path, semantic_settings(), writer, events_root=events_root)


def test_a_detail_only_in_a_source_event_is_found_under_the_covering_observation(
    store: object, db_path: Path, grounded: SemanticIndex, events_root: Path, embedder: HashEmbedder
) -> None:
    write_events(
        events_root,
        "s1",
        [
            _user("s1", 1, "Where should I leave the spare key for the plumber?"),
            _assistant("s1", 2, "Leave it under the blue flowerpot by the garage door, then text him."),
        ],
    )
    covering = add_observation(db_path, "s1", "Assistant replied: advice on leaving a key", [("s1", 2)])
    add_observation(db_path, "s1", "User asked about invoices for the roof repair", [("s1", 1)])
    sync_all(grounded, embedder)

    retrieval = grounded.search("blue flowerpot", embedder, limit=5)

    assert retrieval.results[0].memory_id == covering
    excerpt = retrieval.excerpt_of(0)
    assert excerpt is not None and (excerpt.seq_start, excerpt.seq_end) == (2, 2)
    assert "blue flowerpot" in excerpt.text
    item = hybrid_answer("blue flowerpot", 5, retrieval)["results"]
    assert isinstance(item, list)
    assert item[0]["id"] == covering
    assert item[0]["source"] == {"seq_start": 2, "seq_end": 2, "excerpt": excerpt.text}


def test_a_source_excerpt_never_crosses_sessions(
    store: object, db_path: Path, grounded: SemanticIndex, events_root: Path, embedder: HashEmbedder
) -> None:
    write_events(events_root, "s1", [_assistant("s1", 1, "The vault code is stored in the walnut cabinet.")])
    write_events(events_root, "s2", [_assistant("s2", 1, "Groceries: oat milk, lentils and basil.")])
    own = add_observation(db_path, "s1", "Assistant replied: where the code is", [("s1", 1)])
    # A foreign ref (s2's observation citing s1's seq 1) must not bring s1's text into s2.
    foreign = add_observation(db_path, "s2", "Assistant listed groceries", [("s2", 1), ("s1", 1)])
    sync_all(grounded, embedder)

    retrieval = grounded.search("walnut cabinet", embedder, limit=10)

    for position, memory in enumerate(retrieval.results):
        excerpt = retrieval.excerpt_of(position)
        if excerpt is not None and "walnut" in excerpt.text:
            assert memory.memory_id == own and memory.session_id == "s1"
    assert retrieval.results[0].memory_id == own
    grocery = grounded.search("oat milk lentils", embedder, limit=10)
    assert grocery.results[0].memory_id == foreign
    first = grocery.excerpt_of(0)
    assert first is not None and "walnut" not in first.text


def test_events_the_memory_holds_verbatim_add_no_chunk(
    store: object, db_path: Path, grounded: SemanticIndex, events_root: Path, embedder: HashEmbedder
) -> None:
    write_events(events_root, "s1", [_user("s1", 1, "Please  book the\ntrain to Lyon.")])
    add_observation(db_path, "s1", "User request: Please book the train to Lyon.", [("s1", 1)])
    sync_all(grounded, embedder)

    with closing(Manifest.open(grounded.directory / "manifest.sqlite")) as manifest:
        assert manifest.chunk_count() == 1
    assert grounded.search("Lyon", embedder).excerpt_of(0) is None


def test_without_an_events_root_only_memory_text_is_indexed(
    store: object, db_path: Path, writer: RecordingWriter, events_root: Path, embedder: HashEmbedder
) -> None:
    write_events(events_root, "s1", [_assistant("s1", 1, "The blue flowerpot hides the key.")])
    add_observation(db_path, "s1", "Assistant replied: advice", [("s1", 1)])
    plain = SemanticIndex(db_path, semantic_settings(), writer)
    sync_all(plain, embedder)
    assert plain.search("flowerpot", embedder).excerpts == (None,)  # found by vectors alone, no excerpt
    # A later job that names the root rebuilds with source chunks; one that names none keeps it.
    grounded = SemanticIndex(db_path, semantic_settings(), writer, events_root=events_root)
    assert grounded.synchronize(embedder).rebuild_reason == "events_root_changed"
    sync_all(plain, embedder)
    excerpt = plain.search("flowerpot", embedder).excerpt_of(0)
    assert excerpt is not None and "flowerpot" in excerpt.text


def test_event_search_text_covers_messages_tool_calls_and_results() -> None:
    call = SessionEvent.model_validate(
        _event(
            "s",
            1,
            "llm_step_completed",
            {
                "assistant_message": {
                    "content": "Running the tests.",
                    "tool_calls": [
                        {"id": "c1", "function": {"name": "bash", "arguments": '{"cmd":"pytest"}'}}
                    ],
                }
            },
        )
    )
    result = SessionEvent.model_validate(
        _event(
            "s",
            2,
            "tool_execution_end",
            {"tool_result": {"tool_call_id": "c1", "result": {"tool_name": "bash", "content": "3 passed"}}},
        )
    )
    outcome = SessionEvent.model_validate(_event("s", 3, "agent_end", {"reason": "completed"}))
    assert event_search_text(call) == 'Assistant: Running the tests.\nTool call bash: {"cmd":"pytest"}'
    assert event_search_text(result) == "Tool result bash: 3 passed"
    assert event_search_text(outcome) == ""
    assert already_held("User request: Please book the train.", "User: please  BOOK the\ntrain.")
    assert not already_held("User request: Please book.", "User: Please book the train.")


def test_session_scoped_hybrid_search_returns_no_excerpt_of_another_session(
    store: object, db_path: Path, grounded: SemanticIndex, events_root: Path, embedder: HashEmbedder
) -> None:
    write_events(events_root, "s1", [_assistant("s1", 1, "Spare keys hang on the hook in the hallway.")])
    write_events(events_root, "s2", [_assistant("s2", 1, "The spare key sits in the walnut cabinet.")])
    mine = add_observation(db_path, "s1", "Assistant replied: about keys", [("s1", 1)])
    theirs = add_observation(db_path, "s2", "Assistant replied: about keys", [("s2", 1)])
    sync_all(grounded, embedder)

    hybrid = hybrid_tool(grounded, embedder)
    wide = memory_search(db_path, {"query": "spare key walnut cabinet", "limit": 10}, hybrid)
    assert isinstance(wide["results"], list) and wide["results"][0]["id"] == theirs  # the detail is s2's
    arguments = {"query": "spare key walnut cabinet", "scope": "session", "limit": 10}
    scoped = memory_search(db_path, arguments, hybrid, session_id="s1")
    results = scoped["results"]
    assert isinstance(results, list) and [item["id"] for item in results] == [mine]
    assert "walnut" not in json.dumps(results)
