"""A database's ReaderActor answers ``memory_search`` and ``recall`` as a client on its node would.

No Ray: the actor class is plain Python; the answers must be the read service's own, computed over
the same files, with recall's events taken from the session's shipped log on the database's node.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.read import service
from actors.store.events_log import append_shipped
from actors.store.reader import ReaderActor
from persistence.files.events_log import EventLog
from persistence.writers.store import Store
from protocol.errors import InvalidPayloadError
from protocol.redact import redactor_for
from protocol.shipping import shipped_events_root
from tests.unit.actors.read.factories import observation
from tests.unit.actors.read.helpers import commit

SETTINGS: dict[str, object] = {"semantic": None}


def _event(seq: int, text: str) -> dict[str, object]:
    return {
        "schema_version": "1.0",
        "run_id": "5",
        "seq": seq,
        "turn_no": 1,
        "type": "agent_command_applied",
        "payload": {"text": text},
        "ts": "2026-07-26T12:00:00+00:00",
    }


@pytest.fixture
def reader(tmp_path: Path) -> ReaderActor:
    db = tmp_path / "node-a" / "om.sqlite"
    store = Store(db)
    commit(store, [observation("a1", "The billing tests pass after the date fix", refs=(("5", 1),))])
    commit(store, [observation("b2", "Deploys wait for the release branch", refs=(("5", 2),))])
    append_shipped(
        EventLog(shipped_events_root(str(db))),
        "5",
        [_event(1, "fix the billing tests"), _event(2, "deploy after the release")],
    )
    return ReaderActor(db, store)


def test_search_answers_as_the_read_service_does_on_the_node(reader: ReaderActor) -> None:
    arguments = {"query": "billing tests", "mode": "exact", "limit": 5}
    answer = reader.read_tool(
        "memory_search", {"arguments": arguments, "session_id": "5", "settings_block": SETTINGS}
    )
    assert answer == service.memory_search(reader.db_path, arguments, session_id="5")
    assert answer["count"] == 1


def test_recall_reads_the_shipped_log_of_the_session(reader: ReaderActor) -> None:
    arguments = {"id": "a1" + "0" * 10}
    answer = reader.read_tool(
        "recall",
        {"session_id": "5", "arguments": arguments, "settings_block": SETTINGS, "events_root": "/elsewhere"},
    )
    log = Path(shipped_events_root(reader.db_path))
    local = service.recall(
        reader.db_path,
        lambda session: log / session / "events.jsonl",
        "5",
        arguments,
        redactor=redactor_for(()),
    )
    assert answer == local and answer["ok"] is True
    assert "fix the billing tests" in str(answer)


def test_an_unknown_tool_is_refused(reader: ReaderActor) -> None:
    with pytest.raises(InvalidPayloadError):
        reader.read_tool("forget", {})
