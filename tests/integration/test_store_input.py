"""On the real runtime: a memory folder removed under it, and events files that are missing or
hold another session's lines (issue 40 items 9 and 10).

Deleting ``.hatfield/`` used to leave the StoreActor writing the unlinked database: later observes
"succeeded" and nothing was found until the runtime restarted. A foreign events file ended as
``worker_crashed`` (an error from the StoreActor whose wrapped class name broke the failure value)
and a missing one as ``transient_runtime``.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from cluster.client import OmrayClient
from cluster.commands.demo_session import demo_session, event_line
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.naming import RuntimeNames
from persistence.reads.memory_reader import MemoryReader
from protocol.outcomes import JOB_FAILED_EVENT_TYPE, last_failure
from tests.integration.conftest import assert_eventually
from tests.integration.test_observer import _write_and_commit

pytestmark = pytest.mark.integration


def _settings(db: Path) -> dict[str, Any]:
    return {
        "model": "builtin/extractive",
        "storage": {"database": str(db)},
        "observer": {"observe_after_tokens": 0},
        "semantic": None,
    }


def test_a_memory_folder_removed_under_the_runtime_is_recreated(names: RuntimeNames, tmp_path: Path) -> None:
    db = tmp_path / ".hatfield" / "om.sqlite"
    ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    client = OmrayClient(names, settings=_settings(db), cwd=tmp_path)
    first = demo_session("s-before")[:2]
    _write_and_commit(client, "s-before", client.events_path("s-before"), first)
    assert client.wait_idle(timeout_s=120)
    assert MemoryReader(db).contiguous_covered_end("s-before", "1", "1") == first[-1][-1]["seq"]

    shutil.rmtree(tmp_path / ".hatfield")  # the user deletes the project's memory folder

    second = demo_session("s-after")[:2]
    _write_and_commit(client, "s-after", client.events_path("s-after"), second)
    assert client.wait_idle(timeout_s=120)
    reader = MemoryReader(db)
    # What the runtime reports as observed is in the file readers open, not in an unlinked one.
    assert db.is_file()
    assert reader.contiguous_covered_end("s-after", "1", "1") == second[-1][-1]["seq"]
    assert reader.all_observations("s-after")
    assert client.job_counts().get("failed", 0) == 0


def _gave_up_for(client: OmrayClient, session_id: str) -> dict[str, Any]:
    """The payload of the session's job_failed event, once there is one."""

    def payload() -> dict[str, Any] | None:
        events = client.runtime_events(session_id)
        failed = [e for e in events if e["event_type"] == JOB_FAILED_EVENT_TYPE]
        return dict(failed[-1]["payload"]) if failed else None

    found: dict[str, Any] = assert_eventually(payload, timeout_s=90, interval_s=0.2)
    return found


def test_a_missing_or_foreign_events_file_fails_as_what_it_is(names: RuntimeNames, tmp_path: Path) -> None:
    db = tmp_path / "om.sqlite"
    ensure_runtime(names, queue_db=str(tmp_path / "queue.sqlite"), handler_paths=DEFAULT_HANDLERS)
    client = OmrayClient(names, settings=_settings(db), cwd=tmp_path)
    foreign = [e for turn in demo_session("someone-else")[:2] for e in turn]
    wrong = tmp_path / "wrong" / "events.jsonl"
    wrong.parent.mkdir()
    wrong.write_text("".join(event_line(e) for e in foreign), encoding="utf-8")
    client.observe("s-mine", int(foreign[-1]["seq"]), events_path=wrong)
    client.observe("s-gone", 5, events_path=tmp_path / "absent" / "events.jsonl")
    mismatch = _gave_up_for(client, "s-mine")
    assert last_failure(mismatch) == "events_mismatch"
    assert (mismatch["events_location"]["path"], mismatch["events_location"]["line_no"]) == (str(wrong), 1)
    missing = _gave_up_for(client, "s-gone")
    assert last_failure(missing) == "events_missing"
    assert missing["events_location"]["path"] == str(tmp_path / "absent" / "events.jsonl")
    assert MemoryReader(db).contiguous_covered_end("s-mine", "1", "1") in (0, None)
