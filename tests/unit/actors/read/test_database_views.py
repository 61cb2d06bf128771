"""The database's pages as a client on another node gets them (issue 43): every view's JSON answer,
through a JSON round trip as on the client's link, is the answer a client on the data node computes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actors.read.database_views import VIEWS, DatabaseViews, view_answer
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.errors import InvalidPayloadError
from protocol.events import BeforeCompactionContext, CompactionDecision
from protocol.forget import forget_arguments
from protocol.jobs import JobEnvelope
from tests.unit.persistence.test_forget_store import commit_turn

NOW = 1_790_000_000.0


def _wire(views: DatabaseViews, operation: str, **arguments: Any) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(json.dumps(view_answer(views, operation, arguments)))
    return answer


@pytest.fixture
def views(tmp_path: Path) -> tuple[DatabaseViews, list[str]]:
    db = tmp_path / "om.sqlite"
    store = Store(db)
    ids = [commit_turn(store, "a", 1, "alpha"), commit_turn(store, "a", 2, "bravo")]
    ids.append(commit_turn(store, "b", 1, "charlie"))
    return DatabaseViews(db, settings_from_mapping({})), ids


def test_each_page_crosses_the_wire_as_the_local_answer(views: tuple[DatabaseViews, list[str]]) -> None:
    local, _ = views
    assert "alpha" in local.project("a")
    assert _wire(local, "project", session_id="a") == {"text": local.project("a")}
    reflections, observations = local.projection_lines("a")
    assert observations and all(line in local.project("a") for line in observations)
    assert _wire(local, "projection_lines", session_id="a") == {
        "reflections": reflections,
        "observations": observations,
    }
    for page in ("memory_view", "memory_status"):
        text, data = getattr(local, page)("a")
        assert _wire(local, page, session_id="a") == {"text": text, "json": json.loads(json.dumps(data))}
    assert _wire(local, "token_usage", session_id=None) == json.loads(json.dumps(local.token_usage(None)))
    assert _wire(local, "budget", now=NOW) == json.loads(json.dumps(local.budget(NOW)))
    days = local.usage_by_day("a", NOW)
    assert _wire(local, "usage_by_day", session_id="a", now=NOW) == {"days": json.loads(json.dumps(days))}


def test_compaction_over_the_wire_replaces_the_summary_and_fails_closed_alike(
    views: tuple[DatabaseViews, list[str]],
) -> None:
    local, _ = views
    for session, action in (("a", "replace_summary"), ("nobody", "continue")):
        context = BeforeCompactionContext(session_id=session, turn_no=3, trigger="compact_run")
        answer = CompactionDecision.model_validate(
            _wire(local, "before_compaction", context=context.model_dump(mode="json"))
        )
        assert answer == local.before_compaction(context) and answer.action == action
    # The range the host replaces is not observed yet: cancel, on either side.
    ahead = BeforeCompactionContext(session_id="a", turn_no=3, trigger="compact_run", required_end_seq=9)
    remote = _wire(local, "before_compaction", context=ahead.model_dump(mode="json"))
    assert remote["action"] == "cancel" == local.before_compaction(ahead).action


def test_a_forget_planned_over_the_wire_names_the_same_jobs_and_reads_their_results(
    views: tuple[DatabaseViews, list[str]],
) -> None:
    local, ids = views
    checked = forget_arguments({"ids": [ids[0][:12], ids[2], "0" * 12]})
    envelopes, report = local.forget_plan(checked, str(local.db_path), {"k": 1})
    plan = _wire(local, "forget_plan", arguments=checked.model_dump(mode="json"), settings_block={"k": 1})
    remote = [JobEnvelope.model_validate(envelope) for envelope in plan["envelopes"]]
    assert plan["report"] == report == {"already_forgotten": [], "unknown": ["0" * 12], "ambiguous": []}
    # The same jobs (job ids are fresh per plan), carrying the caller's settings block.
    assert [e.payload for e in remote] == [e.payload for e in envelopes]
    assert all(e.payload.settings == {"k": 1} for e in remote)  # type: ignore[union-attr]
    assert _wire(local, "forget_result", job_id=remote[0].job_id) == {"result": None}  # not run yet


def test_an_unknown_page_or_malformed_arguments_are_typed_errors(
    views: tuple[DatabaseViews, list[str]],
) -> None:
    local, _ = views
    assert "memory_search" not in VIEWS
    with pytest.raises(InvalidPayloadError):
        view_answer(local, "drop_everything", {})
    with pytest.raises(ValueError):  # pydantic's ValidationError is a ValueError
        view_answer(local, "forget_plan", {"arguments": {"ids": ["not hex"]}})
