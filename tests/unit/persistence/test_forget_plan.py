"""Planning a forget (client, CLI and MCP tool): ids resolved read-only, one job per session, typed
errors for malformed requests, and the MCP tool listed only when the server allows it."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.read.database_views import DatabaseViews
from cluster.forget import forget_report, wait_for_results
from cluster.servers.mcp_server import forget_tool, tool_specs
from persistence.reads.forgotten import ForgetReader
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.errors import InvalidPayloadError
from protocol.forget import ForgetArgumentsError, ForgetRequest, forget_arguments
from protocol.jobs import ForgetJob
from tests.unit.persistence.test_forget_store import commit_turn


def test_ids_are_resolved_per_session_and_unknown_forgotten_and_ambiguous_ones_need_no_job(
    tmp_path: Path,
) -> None:
    db = tmp_path / "om.sqlite"
    store = Store(db)
    a1, a2 = commit_turn(store, "a", 1, "alpha"), commit_turn(store, "a", 2, "bravo")
    b1 = commit_turn(store, "b", 1, "charlie")
    gone = commit_turn(store, "b", 2, "delta")
    store.forget(ForgetRequest(session_id="b", memory_ids=(gone,)), "earlier", "2026-07-23T11:00:00+00:00")
    reader = ForgetReader(db)
    envelopes, report = DatabaseViews(db, settings_from_mapping({})).forget_plan(
        forget_arguments({"ids": [a1[:12], a2.upper(), b1, gone, "0" * 12]}), str(db), {}
    )
    jobs = {env.payload.session_id: env.payload for env in envelopes}
    assert all(isinstance(job, ForgetJob) for job in jobs.values())
    assert set(jobs["a"].memory_ids) == {a1, a2} and jobs["b"].memory_ids == (b1,)  # type: ignore[union-attr]
    assert report == {"already_forgotten": [gone], "unknown": ["0" * 12], "ambiguous": []}
    for envelope in envelopes:  # what the forget job does in the worker
        job = envelope.payload
        assert isinstance(job, ForgetJob)
        store.forget(
            ForgetRequest(session_id=job.session_id, memory_ids=job.memory_ids),
            envelope.job_id,
            "2026-07-23T12:00:00+00:00",
        )
    results = wait_for_results(reader, [env.job_id for env in envelopes], 1.0)
    answer = forget_report(report, [env.job_id for env in envelopes], results)
    assert answer["complete"] is True and set(answer["forgotten"]["observations"]) == {a1, a2, b1}


@pytest.mark.parametrize(
    ("ids", "session", "ranges"),
    [
        ([], None, []),
        (["xyz"], None, []),
        (["abc"], None, []),  # shorter than a display id
        ("abcdefabcdef", None, []),  # one string, not a list
        (["abcdefabcdef"], "s1", []),
        ([], None, [(1, 2)]),
        ([], "s1", [(3, 2)]),
        ([], "s1", [(0, 2)]),
        ([], "s1", [("a", 2)]),
    ],
)
def test_a_malformed_request_is_a_typed_error_and_sends_nothing(
    tmp_path: Path, ids: list[str], session: str | None, ranges: list[tuple[object, int]]
) -> None:
    with pytest.raises(ForgetArgumentsError) as raised:
        forget_arguments({"ids": ids, "session_id": session, "event_ranges": ranges})
    assert isinstance(raised.value, InvalidPayloadError)
    assert not (tmp_path / "om.sqlite").exists()


def test_a_session_forget_is_one_job_of_that_session(tmp_path: Path) -> None:
    arguments = forget_arguments({"session_id": "s1", "event_ranges": [(2, 4)]})
    views = DatabaseViews(tmp_path / "om.sqlite", settings_from_mapping({}))
    envelopes, _ = views.forget_plan(arguments, str(tmp_path / "om.sqlite"), {})
    (envelope,) = envelopes
    assert isinstance(envelope.payload, ForgetJob)
    assert envelope.payload.event_ranges == ((2, 4),) and envelope.payload.whole_session is False
    whole, _ = views.forget_plan(forget_arguments({"session_id": "s1"}), str(tmp_path / "om.sqlite"), {})
    assert whole[0].payload.whole_session is True  # type: ignore[union-attr]


def test_the_mcp_forget_tool_is_listed_only_when_allowed_and_checks_its_arguments(tmp_path: Path) -> None:
    assert "forget" not in [spec["function"]["name"] for spec in tool_specs(hybrid=True)]
    assert "forget" in [spec["function"]["name"] for spec in tool_specs(hybrid=True, allow_forget=True)]
    answer = forget_tool(tmp_path, {"ids": ["abcdefabcdef"], "session": "s1"})
    assert answer["ok"] is False and answer["error"] == "invalid_arguments"
    answer = forget_tool(tmp_path, {"ids": "abcdefabcdef"})
    assert answer["ok"] is False and answer["error"] == "invalid_arguments"
