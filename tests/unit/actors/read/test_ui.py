"""The memory viewer's reads and HTTP surface over real SQLite files (no Ray, no browser)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from actors.read.service import project as projection
from actors.read.ui_views import active_ids, retired_by
from cluster.servers.ui_server import UiBackend, UiProject, UiRequestError, build_app, guarded_app
from cluster.servers.web_auth import LinkTickets
from persistence.reads.memory_reader import MemoryReader
from persistence.reads.viewer import UiReader
from persistence.settings.parse import settings_from_mapping
from persistence.writers.store import Store
from protocol.identities import observation_set_hash, threshold_generation_id
from protocol.records import TokenUsageRecord, TranscriptEntry
from tests.unit.persistence.builders import (
    COVERED_AT,
    MODEL,
    OBSERVER_SCHEMA,
    REFLECTOR_SCHEMA,
    RENDERER,
    make_observation,
    make_part,
    make_reflection,
)

SESSION = "s-one"
OTHER = "s-two"
SECRET = "the-canary-phrase-7781"
TOKEN = "k" * 43
HOST = "127.0.0.1"
PORT = 8767


def _transcript(session_id: str, seq: int, text: str) -> TranscriptEntry:
    return TranscriptEntry(
        session_id=session_id,
        seq=seq,
        event_type="agent_command_applied",
        timestamp="2026-07-23 10:00",
        content=text,
    )


def _build(db: Path, retain: int = 1) -> list[str]:
    """Two sessions; the first with three parts, a generation over the first two that keeps ``retain``
    of their observations, and a reflection; token usage of both."""
    with Store(db) as store:
        ids = []
        for start in (1, 3, 5):
            obs = make_observation(SESSION, f"Observation of events {start} with {SECRET}", seq=start)
            store.commit_observer_part(
                make_part(SESSION, start, start + 1),
                [obs],
                [_transcript(SESSION, start, f"User: fix parse_date now {start}")],
            )
            ids.append(obs.observation_id)
        store.commit_observer_part(
            make_part(OTHER, 1, 2), [make_observation(OTHER, "Another session's note")], []
        )
        set_hash = observation_set_hash(SESSION, sorted(ids[:2]))
        generation = threshold_generation_id(SESSION, None, set_hash, MODEL, REFLECTOR_SCHEMA)
        store.claim_generation(generation, SESSION, set_hash, MODEL, REFLECTOR_SCHEMA, 1, 4, COVERED_AT)
        reflection = make_reflection(SESSION, "A durable fact", tuple(ids[:2]))
        store.promote_generation(generation, SESSION, [reflection], ids[:retain], COVERED_AT)
        for session_id, hour in ((SESSION, "10"), (OTHER, "11")):
            store.record_token_usage(
                TokenUsageRecord(
                    usage_id=f"u-{session_id}",
                    session_id=session_id,
                    job_kind="observe",
                    model=MODEL,
                    requests=2,
                    prompt_tokens=1000,
                    cached_prompt_tokens=200,
                    completion_tokens=100,
                    recorded_at=f"2026-07-23T{hour}:05:00+00:00",
                )
            )
    return ids


def _settings(db: Path, prices: bool = True) -> Any:
    block: dict[str, Any] = {
        "storage": {"database": str(db)},
        "semantic": None,
        "observer": {"renderer_version": RENDERER, "schema_version": OBSERVER_SCHEMA},
    }
    if prices:
        block["prices"] = {"models": {MODEL: {"prompt": 1.0, "cached_prompt": 0.5, "completion": 2.0}}}
    return settings_from_mapping(block)


@pytest.fixture
def backend(tmp_path: Path) -> UiBackend:
    db = tmp_path / "om.sqlite"
    _build(db)
    project = UiProject("demo", tmp_path, _settings(db), db, tmp_path / "sessions")
    return UiBackend({"demo": project})


def test_sessions_list_both_sessions_with_counts_and_coverage(backend: UiBackend) -> None:
    sessions = {s["session_id"]: s for s in backend.projects_json()["projects"][0]["sessions"]}
    assert set(sessions) == {SESSION, OTHER}
    assert sessions[SESSION]["observations"] == 3
    assert sessions[SESSION]["reflections"] == 1
    assert sessions[SESSION]["coverage_end"] == 6
    assert sessions[OTHER]["coverage_end"] == 2
    assert sessions[SESSION]["prompt_tokens"] == 1000
    assert sessions[SESSION]["jobs"] is None  # no runtime: job state unknown, not "idle"


def test_timeline_places_observations_in_their_parts_and_names_what_a_generation_retired(
    backend: UiBackend,
) -> None:
    timeline = backend.session_json("demo", SESSION)
    assert [(p["seq_start"], p["seq_end"]) for p in timeline["parts"]] == [(1, 2), (3, 4), (5, 6)]
    assert all(len(p["observations"]) == 1 for p in timeline["parts"])
    assert [e["seq"] for e in timeline["parts"][1]["events"]] == [3]
    first, second, third = (p["observations"][0] for p in timeline["parts"])
    generation = timeline["generations"][0]
    assert generation["active"] and generation["retired"] == [second["id"]]
    assert (first["active"], second["active"], third["active"]) == (True, False, True)
    assert second["retired_by"] == generation["id"]
    assert generation["reflections"][0]["content"] == "A durable fact"
    assert timeline["projection"] == projection(backend.project("demo").db_path, SESSION).strip()
    assert SECRET in timeline["projection"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(retain=st.integers(min_value=0, max_value=2))
def test_active_and_retired_agree_with_the_projection_pool(tmp_path_factory: Any, retain: int) -> None:
    db = tmp_path_factory.mktemp("pool") / "om.sqlite"
    ids = _build(db, retain)
    rows = UiReader(db).timeline(SESSION)
    active = active_ids(rows.observations, rows.generations, rows.active_generation_id)
    expected = set(MemoryReader(db).active_candidate_set(SESSION).observation_ids)
    assert active == expected
    assert set(retired_by(rows.observations, rows.generations)) == set(ids) - expected


def test_unknown_project_or_session_is_a_typed_error(backend: UiBackend) -> None:
    with pytest.raises(UiRequestError) as project:
        backend.session_json("nope", SESSION)
    assert project.value.status == 404 and project.value.error == "unknown_project"
    with pytest.raises(UiRequestError) as session:
        backend.session_json("demo", "no-such-session")
    assert session.value.error == "unknown_session"


def test_search_hits_carry_a_source_excerpt(backend: UiBackend) -> None:
    answer = backend.search({"query": "parse_date", "mode": "exact"})
    assert answer["ok"] is True and answer["count"] >= 1
    assert all("parse_date" in r["source"]["excerpt"] for r in answer["results"])
    hit = backend.search({"query": "Observation of events 3", "mode": "exact"})["results"][0]
    assert hit["source"] == {"seq_start": 3, "seq_end": 3, "excerpt": "User: fix parse_date now 3"}
    assert backend.search({"query": "x", "mode": "hybrid"})["error"] == "hybrid_unavailable"


def test_cost_by_session_model_and_hour_with_money(backend: UiBackend) -> None:
    cost = backend.cost_json("demo", None)
    assert [(p["bucket"], p["session_id"]) for p in cost["points"]] == [
        ("2026-07-23T10", SESSION),
        ("2026-07-23T11", OTHER),
    ]
    # 800 uncached * 1.0 + 200 cached * 0.5 + 100 * 2.0 per million tokens
    assert cost["points"][0]["cost"] == pytest.approx(0.0011)
    assert cost["currency"] == "USD"
    assert backend.cost_json("demo", OTHER)["by_session_and_model"][0]["tokens"] == 1100


def test_actions_need_a_runtime_and_a_safe_session_id(backend: UiBackend) -> None:
    with pytest.raises(UiRequestError) as unsafe:
        backend.observe({"session_id": "../etc", "end_seq": 2})
    assert unsafe.value.status == 400
    with pytest.raises(UiRequestError) as offline:
        backend.observe({"session_id": SESSION, "end_seq": 2})
    assert offline.value.status == 503 and offline.value.error == "runtime_not_running"


# ------------------------------------------------------------------------------------------- HTTP


def _client(backend: UiBackend, links: LinkTickets | None = None) -> TestClient:
    return TestClient(guarded_app(backend, HOST, PORT, TOKEN, links), base_url=f"http://{HOST}:{PORT}")


def test_http_refuses_missing_token_foreign_origin_and_foreign_host(backend: UiBackend) -> None:
    client = _client(backend)
    assert client.get("/api/projects").status_code == 401
    assert client.get("/").status_code == 401
    bearer = {"authorization": f"Bearer {TOKEN}"}
    assert client.get("/api/projects", headers=bearer).status_code == 200
    refused = client.post(
        "/api/search", headers={**bearer, "origin": "http://localhost:9999"}, json={"query": "x"}
    )
    assert refused.status_code == 403
    assert client.get("/api/projects", headers={**bearer, "host": "evil.example"}).status_code == 421


def test_the_token_url_becomes_a_strict_cookie_and_a_clean_redirect(backend: UiBackend) -> None:
    links = LinkTickets()
    ticket = links.issue()
    client = _client(backend, links)
    landing = client.get(f"/?token={ticket}", follow_redirects=False)
    assert landing.status_code == 303 and landing.headers["location"] == "/"
    assert _client(backend, links).get(f"/?token={ticket}", follow_redirects=False).status_code == 410
    cookie = landing.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    page = client.get("/")
    assert page.status_code == 200 and "app.js" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/static/..%2Fui_server.py").status_code == 404


def test_bad_bodies_get_typed_answers_and_no_request_text_reaches_a_log(
    backend: UiBackend, caplog: pytest.LogCaptureFixture
) -> None:
    client = TestClient(build_app(backend))
    caplog.set_level(logging.DEBUG)
    assert client.post("/api/search", content=b"query=x").status_code == 415
    bad = client.post("/api/search", content=b"[1]", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"] == "invalid_json"
    assert client.post("/api/recall", json={"id": "abc"}).json()["error"] == "invalid_session_id"
    answer = client.post("/api/search", json={"query": SECRET, "mode": "exact"}).json()
    assert answer["count"] == 3
    assert client.get(f"/api/session?project=demo&session={SESSION}").status_code == 200
    assert all(
        SECRET not in record.getMessage() and SECRET not in str(record.__dict__) for record in caplog.records
    )


def test_forget_needs_a_runtime_and_refuses_bad_requests(backend: UiBackend) -> None:
    with pytest.raises(UiRequestError) as offline:
        backend.forget({"session_id": SESSION, "ids": ["a" * 64]})
    assert offline.value.status == 503
    with pytest.raises(UiRequestError) as unsafe:
        backend.forget({"session_id": "..", "whole_session": True})
    assert unsafe.value.status == 400 and unsafe.value.error == "invalid_session_id"


def test_a_damaged_database_or_a_crash_answers_with_a_class_never_text(
    tmp_path: Path, backend: UiBackend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "dir.sqlite").mkdir()
    damaged = UiProject(
        "bad", tmp_path, _settings(tmp_path / "dir.sqlite"), tmp_path / "dir.sqlite", tmp_path
    )
    answer = TestClient(build_app(UiBackend({"bad": damaged}))).get("/api/projects")
    assert answer.status_code == 503 and answer.json()["message"] == "StorageError"

    def crash() -> dict[str, Any]:
        raise ValueError(f"while reading {SECRET}")

    monkeypatch.setattr(backend, "projects_json", crash)
    caplog.set_level(logging.DEBUG)
    crashed = TestClient(build_app(backend), raise_server_exceptions=False).get("/api/projects")
    assert crashed.status_code == 500 and crashed.json() == {
        "ok": False,
        "error": "internal_error",
        "message": "ValueError",
    }
    assert caplog.records and all(SECRET not in str(record.__dict__) for record in caplog.records)


def test_the_viewers_recall_applies_the_projects_redact_patterns(tmp_path: Path) -> None:
    """The event an observation cites is read through the project's ``privacy.redact_patterns``, as
    ``omray memory recall`` reads it."""
    db = tmp_path / "om.sqlite"
    ids = _build(db)
    events = tmp_path / "s" / SESSION / "events.jsonl"
    events.parent.mkdir(parents=True)
    line = {"schema_version": "1.0", "run_id": SESSION, "seq": 1, "turn_no": 1, "ts": "2026-07-23T10:00:00Z"}
    events.write_text(
        json.dumps({**line, "type": "agent_command_applied", "payload": {"text": "my pin is zq-4417-pin"}})
        + "\n"
    )
    block = {
        "storage": {"database": str(db)},
        "semantic": None,
        "privacy": {"redact_patterns": [r"zq-\d+-pin"]},
    }
    masked = UiBackend(
        {"demo": UiProject("demo", tmp_path, settings_from_mapping(block), db, tmp_path / "s")}
    )
    plain = UiBackend({"demo": UiProject("demo", tmp_path, _settings(db), db, tmp_path / "s")})
    body = {"id": ids[0], "session_id": SESSION}
    assert "zq-4417-pin" in str(plain.recall(body))
    answer = masked.recall(body)
    assert (
        answer.get("ok") is True and "zq-4417-pin" not in str(answer) and "[redacted:custom]" in str(answer)
    )
