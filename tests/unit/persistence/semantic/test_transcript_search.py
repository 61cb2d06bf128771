"""The transcript is indexed (issue 29): every covered event's text is findable, exact and hybrid,
under the observation that covers it or, when none does, as the event itself; recall resolves both."""

from __future__ import annotations

import json
from contextlib import closing
from pathlib import Path

from actors.indexer.sync import synchronize
from actors.read.hybrid import hybrid_answer
from actors.read.retrieval import retrieve
from actors.read.service import memory_search, recall
from persistence.semantic import SemanticIndex
from persistence.semantic.manifest import Manifest
from persistence.writers.store import Store
from protocol.events import SessionEvent
from protocol.identities import transcript_event_id
from protocol.records import CoveragePart, ObservationRecord, SourceRef, TranscriptEntry
from protocol.source_text import event_search_text, quoted_in
from tests.unit.persistence.builders import make_observation, make_part
from tests.unit.persistence.semantic.conftest import HashEmbedder, hybrid_tool, sync_all

TS = "2026-09-11 10:00"


def entry(session: str, seq: int, text: str, kind: str = "llm_step_completed") -> TranscriptEntry:
    return TranscriptEntry(session_id=session, seq=seq, event_type=kind, timestamp=TS, content=text)


def observe(
    store: Store,
    session: str,
    start: int,
    end: int,
    observations: list[tuple[str, list[int]]],
    transcript: list[TranscriptEntry],
) -> list[str]:
    """Commit one part of ``start..end`` with observations citing the given seqs; returns their ids."""
    part: CoveragePart = make_part(session, start, end, digest_seed=f"{session}-{start}")
    records: list[ObservationRecord] = [
        make_observation(session, content, seq=seqs[0]).model_copy(
            update={"source_refs": tuple(SourceRef(run_id=session, seq=seq) for seq in seqs)}
        )
        for content, seqs in observations
    ]
    store.commit_observer_part(part, records, transcript)
    return [record.observation_id for record in records]


def write_events(root: Path, session: str, texts: dict[int, str]) -> None:
    path = root / session / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        {
            "schema_version": "1.0",
            "run_id": session,
            "seq": seq,
            "turn_no": 1,
            "type": "agent_command_applied",
            "payload": {"text": text},
            "ts": "2026-09-11T10:00:00+00:00",
        }
        for seq, text in sorted(texts.items())
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_a_detail_only_in_the_transcript_is_found_under_the_covering_observation(
    store: Store, db_path: Path, index: SemanticIndex, embedder: HashEmbedder
) -> None:
    [covering, _other] = observe(
        store,
        "s1",
        1,
        2,
        [("Assistant replied: advice on leaving a key", [2]), ("User asked about roof invoices", [1])],
        [
            entry("s1", 1, "User: Where should I leave the spare key for the plumber?"),
            entry("s1", 2, "Assistant: Leave it under the blue flowerpot by the garage door."),
        ],
    )
    sync_all(index, embedder)

    retrieval = retrieve(index, "blue flowerpot", embedder, limit=5)

    assert retrieval.results[0].memory_id == covering
    excerpt = retrieval.excerpt_of(0)
    assert excerpt is not None and (excerpt.seq_start, excerpt.seq_end) == (2, 2)
    assert "blue flowerpot" in excerpt.text
    results = hybrid_answer("blue flowerpot", 5, retrieval)["results"]
    assert isinstance(results, list)
    assert results[0]["id"] == covering and results[0]["source"]["seq_start"] == 2
    exact = memory_search(db_path, {"query": "blue flowerpot", "mode": "exact"})
    assert isinstance(exact["results"], list)
    [hit] = exact["results"]
    assert (
        hit["id"] == covering and hit["source"]["seq_start"] == 2 and "flowerpot" in hit["source"]["excerpt"]
    )


def test_an_event_no_observation_covers_stands_alone_and_recalls(
    store: Store, db_path: Path, index: SemanticIndex, embedder: HashEmbedder, tmp_path: Path
) -> None:
    # A condensing observer wrote nothing for this part: its events are still findable.
    observe(
        store, "s1", 1, 3, [], [entry("s1", 2, "Assistant: The vault code is kept in the walnut cabinet.")]
    )
    write_events(tmp_path / "sessions", "s1", {1: "hello", 2: "the walnut cabinet", 3: "bye"})
    sync_all(index, embedder)

    hybrid = memory_search(db_path, {"query": "walnut cabinet"}, hybrid_tool(index, embedder))
    exact = memory_search(db_path, {"query": "WALNUT cabinet", "mode": "exact"})
    event_id = transcript_event_id("s1", 2)
    for answer in (hybrid, exact):
        assert isinstance(answer["results"], list)
        [hit] = answer["results"]
        assert hit["kind"] == "event" and hit["id"] == event_id and hit["session_id"] == "s1"
        assert hit["source"]["seq_start"] == hit["source"]["seq_end"] == 2
        assert "walnut cabinet" in hit["content"]

    def events_path(session: str) -> Path:
        return tmp_path / "sessions" / session / "events.jsonl"

    by_id = recall(db_path, events_path, "other-session", {"id": event_id[:14], "session_id": "s1"})
    assert by_id["ok"] is True and by_id["kind"] == "event" and by_id["id"] == event_id
    assert [event["seq"] for event in by_id["events"]] == [2]  # type: ignore[union-attr]
    by_range = recall(db_path, events_path, "s1", {"seq_start": 1, "seq_end": 3})
    assert by_range["ok"] is True and by_range["covered_by"] == []
    assert [event["seq"] for event in by_range["events"]] == [1, 2, 3]  # type: ignore[union-attr]
    bad = recall(db_path, events_path, "s1", {"seq_start": 0})
    assert bad["error"] == "invalid_seq_range"
    too_long = recall(db_path, events_path, "s1", {"seq_start": 1, "seq_end": 500})
    assert too_long["error"] == "invalid_seq_range"


def test_an_excerpt_never_crosses_sessions(
    store: Store, db_path: Path, index: SemanticIndex, embedder: HashEmbedder
) -> None:
    [own] = observe(
        store, "s1", 1, 1, [("Assistant replied: where the code is", [1])],
        [entry("s1", 1, "Assistant: The vault code is stored in the walnut cabinet.")],
    )  # fmt: skip
    # s2's observation also cites s1's seq 1: a foreign ref never brings s1's text into s2.
    records = [
        make_observation("s2", "Assistant listed groceries", seq=1).model_copy(
            update={"source_refs": (SourceRef(run_id="s2", seq=1), SourceRef(run_id="s1", seq=1))}
        )
    ]
    store.commit_observer_part(
        make_part("s2", 1, 1, digest_seed="s2"), records, [entry("s2", 1, "Assistant: oat milk, lentils")]
    )
    sync_all(index, embedder)

    walnut = retrieve(index, "walnut cabinet", embedder, limit=10)
    assert walnut.results[0].memory_id == own
    for position, memory in enumerate(walnut.results):
        excerpt = walnut.excerpt_of(position)
        if excerpt is not None and "walnut" in excerpt.text:
            assert memory.session_id == "s1"


def test_long_events_get_one_vector_and_every_chunk_in_the_keyword_index(
    store: Store, db_path: Path, index: SemanticIndex, embedder: HashEmbedder
) -> None:
    words = " ".join(f"filler{n}" for n in range(600))  # several 1,200-byte chunks
    observe(store, "s1", 1, 1, [], [entry("s1", 1, f"Tool result bash: {words} zanzibar")])
    sync_all(index, embedder)

    with closing(Manifest.open(index.directory / "manifest.sqlite")) as manifest:
        assert manifest.chunk_count() > 3 and manifest.vector_count() == 1
    retrieval = retrieve(index, "zanzibar", embedder, limit=5)  # only in the last chunk: keyword side
    assert retrieval.results[0].kind == "event"
    excerpt = retrieval.excerpt_of(0)
    assert excerpt is not None and "zanzibar" in excerpt.text


def test_an_observation_that_only_quotes_its_event_gets_no_vector_of_its_own(
    store: Store, index: SemanticIndex, embedder: HashEmbedder
) -> None:
    [quote, summary] = observe(
        store,
        "s1",
        1,
        2,
        [("User request: Please book the train to Lyon.", [1]), ("User wants rail travel booked", [2])],
        [
            entry("s1", 1, "User: Please  book the\ntrain to Lyon.", "agent_command_applied"),
            entry("s1", 2, "User: and a hotel near the station", "agent_command_applied"),
        ],
    )
    sync_all(index, embedder)

    with closing(Manifest.open(index.directory / "manifest.sqlite")) as manifest:
        # two events (one vector each), the summary (vector), the quote (keyword only)
        assert manifest.chunk_count() == 4 and manifest.vector_count() == 3
    found = retrieve(index, "train to Lyon", embedder, limit=5)
    assert found.results[0].memory_id == quote
    assert summary in {memory.memory_id for memory in retrieve(index, "rail travel", embedder).results}


def test_event_search_text_covers_messages_tool_calls_and_results() -> None:
    def event(seq: int, event_type: str, payload: dict[str, object]) -> SessionEvent:
        return SessionEvent.model_validate(
            {
                "schema_version": "1.0",
                "run_id": "s",
                "seq": seq,
                "turn_no": 1,
                "type": event_type,
                "payload": payload,
                "ts": "2026-09-11T10:00:00+00:00",
            }
        )

    call = event(
        1,
        "llm_step_completed",
        {
            "assistant_message": {
                "content": "Running the tests.",
                "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": '{"cmd":"pytest"}'}}],
            }
        },
    )
    result = event(
        2,
        "tool_execution_end",
        {"tool_result": {"tool_call_id": "c1", "result": {"tool_name": "bash", "content": "3 passed"}}},
    )
    assert event_search_text(call) == 'Assistant: Running the tests.\nTool call bash: {"cmd":"pytest"}'
    assert event_search_text(result) == "Tool result bash: 3 passed"
    assert event_search_text(event(3, "agent_end", {"reason": "completed"})) == ""
    assert quoted_in("User request: Please book the train.", "User: please  BOOK the\ntrain.")
    assert not quoted_in("User request: Please book the train to Lyon.", "User: Please book the train.")
    assert quoted_in("Assistant replied: Here is a long plan…", "Assistant: Here is a long plan, step one")


def test_a_session_scoped_search_shows_no_excerpt_of_another_session(
    store: Store, db_path: Path, index: SemanticIndex, embedder: HashEmbedder
) -> None:
    [mine] = observe(
        store, "s1", 1, 1, [("Assistant replied: about keys", [1])],
        [entry("s1", 1, "Assistant: Spare keys hang on the hook in the hallway.")],
    )  # fmt: skip
    observe(
        store, "s2", 1, 1, [("Assistant replied: about keys", [1])],
        [entry("s2", 1, "Assistant: The spare key sits in the walnut cabinet.")],
    )  # fmt: skip
    sync_all(index, embedder)

    hybrid = hybrid_tool(index, embedder)
    arguments = {"query": "spare key walnut cabinet", "scope": "session", "limit": 10}
    scoped = memory_search(db_path, arguments, hybrid, session_id="s1")
    results = scoped["results"]
    assert isinstance(results, list) and [item["id"] for item in results] == [mine]
    assert "walnut" not in json.dumps(results)


def test_an_exact_hit_in_an_event_whose_observation_is_already_a_result_widens_its_source(
    store: Store, db_path: Path
) -> None:
    # Two identical answers (seqs 1 and 2): the offline model keeps one observation, citing seq 1.
    text = "Assistant: Step one is to preheat the kiln slowly overnight."
    [kept] = observe(store, "s1", 1, 2, [("Assistant replied: Step one is to preheat the kiln", [1])],
                     [entry("s1", 1, text), entry("s1", 2, text)])  # fmt: skip
    answer = memory_search(db_path, {"query": "preheat the kiln", "mode": "exact"})
    assert isinstance(answer["results"], list)
    [hit] = answer["results"]
    assert hit["id"] == kept and (hit["source"]["seq_start"], hit["source"]["seq_end"]) == (1, 2)


def test_more_matching_events_of_one_listed_observation_come_as_events_naming_it(
    store: Store, index: SemanticIndex, embedder: HashEmbedder
) -> None:
    # A condensing observer: one observation for three events; two of them match.
    [summary] = observe(
        store, "s1", 1, 3, [("Talked about pottery", [1, 2, 3])],
        [entry("s1", 1, "User: the kiln thermocouple broke"), entry("s1", 2, "User: weather is nice"),
         entry("s1", 3, "User: ordered a kiln thermocouple from the supplier")],
    )  # fmt: skip
    sync_all(index, embedder)
    retrieval = retrieve(index, "kiln thermocouple", embedder, limit=5)
    answer = hybrid_answer("kiln thermocouple", 5, retrieval)["results"]
    assert isinstance(answer, list)
    assert answer[0]["id"] == summary and answer[0]["kind"] == "observation"
    events = [item for item in answer if item["kind"] == "event" and "thermocouple" in item["content"]]
    assert [item["covered_by"] for item in events] == [summary]
    assert {answer[0]["source"]["seq_start"], events[0]["source"]["seq_start"]} == {1, 3}


def test_a_project_with_no_database_yet_searches_and_indexes_nothing(tmp_path: Path) -> None:
    from tests.unit.persistence.semantic.conftest import RecordingWriter, semantic_settings

    db = tmp_path / "not-yet" / "om.sqlite"  # its folder does not exist either
    index = SemanticIndex(db, semantic_settings(), RecordingWriter(None))  # type: ignore[arg-type]
    assert retrieve(index, "anything", HashEmbedder()).results == ()
    assert synchronize(index, HashEmbedder()).complete
    assert not (tmp_path / "not-yet").exists()
    assert memory_search(db, {"query": "anything"}, hybrid_tool(index, HashEmbedder()))["count"] == 0


def test_the_manifest_keeps_its_chunk_and_vector_counts_equal_to_its_rows(
    store: Store, index: SemanticIndex, embedder: HashEmbedder
) -> None:
    words = " ".join(f"filler{n}" for n in range(600))
    for turn in range(1, 4):  # three index syncs, each adding long and short events
        seq = 2 * turn - 1
        observe(
            store,
            "s1",
            seq,
            seq + 1,
            [(f"Decided on option {turn}", [seq])],
            [entry("s1", seq, f"Tool result bash: {words}"), entry("s1", seq + 1, f"short {turn}")],
        )
        sync_all(index, embedder)
        with closing(Manifest.open(index.directory / "manifest.sqlite")) as manifest:
            rows = manifest._conn.execute("SELECT count(*), coalesce(sum(embedded), 0) FROM chunk").fetchone()
            assert (manifest.meta("chunk_count"), manifest.meta("vector_count")) == (
                str(rows[0]),
                str(rows[1]),
            )
            assert (manifest.chunk_count(), manifest.vector_count()) == (rows[0], rows[1])
