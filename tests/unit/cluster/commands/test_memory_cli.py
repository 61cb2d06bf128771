"""``omray memory ...`` through typer's CliRunner (no Ray)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.commands.memory_cli import memory_app
from persistence.writers.store import Store
from tests.unit.actors.read.factories import observation
from tests.unit.actors.read.helpers import commit

runner = CliRunner()


@pytest.fixture
def memory(store: Store, tmp_path: Path) -> Store:
    commit(store, [observation("a1", "Build 2510 failed", session_id="s1", refs=(("s1", 1),))])
    events = tmp_path / "events" / "s1" / "events.jsonl"
    events.parent.mkdir(parents=True)
    events.write_text(
        json.dumps(
            {
                "schema_version": "1.0",
                "run_id": "s1",
                "seq": 1,
                "turn_no": 1,
                "type": "message",
                "payload": {"text": "hi"},
                "ts": "2026-07-26T12:00:00+00:00",
            }
        )
        + "\n",
        encoding="utf-8",
    )
    return store


def test_status_view_project_text_and_json(
    memory: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # no settings file: defaults
    db = ["--db", memory.db_path]
    status = runner.invoke(memory_app, ["status", "--session", "s1", *db])
    assert status.exit_code == 0 and "1 recorded" in status.stdout
    status_data = json.loads(runner.invoke(memory_app, ["status", "--session", "s1", *db, "--json"]).stdout)
    assert status_data["recorded_observations"] == 1
    view = runner.invoke(memory_app, ["view", "--session", "s1", *db])
    assert "`[a10000000000]`" in view.stdout
    assert json.loads(runner.invoke(memory_app, ["view", "--session", "s1", *db, "--json"]).stdout)[
        "observations"
    ]
    project = runner.invoke(memory_app, ["project", "--session", "s1", *db])
    assert "[a10000000000]" in project.stdout
    data = json.loads(runner.invoke(memory_app, ["project", "--session", "s1", *db, "--json"]).stdout)
    assert data["empty"] is False and data["summary_text"] == project.stdout.rstrip("\n")


def test_search_and_recall_print_json(memory: Store, tmp_path: Path) -> None:
    search = runner.invoke(
        memory_app, ["search", "2510", "--db", memory.db_path, "--limit", "5", "--mode", "exact"]
    )
    assert search.exit_code == 0
    assert json.loads(search.stdout)["count"] == 1
    recall = runner.invoke(
        memory_app,
        [
            "recall",
            "a10000000000",
            "--session",
            "s1",
            "--db",
            memory.db_path,
            "--events-dir",
            str(tmp_path / "events"),
        ],
    )
    assert recall.exit_code == 0, recall.stderr
    answer = json.loads(recall.stdout)
    assert answer["kind"] == "observation" and [e["seq"] for e in answer["events"]] == [1]


def test_search_session_and_mode_options(
    memory: Store, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    commit(memory, [observation("c1", "Build 2510 again", session_id="s2", refs=(("s2", 1),))])
    db = ["--db", memory.db_path]
    # No settings file: hybrid search by default; while nothing is indexed, auto answers exactly and
    # says so, and an explicit hybrid search answers the error.
    building = runner.invoke(memory_app, ["search", "2510", *db])
    answer = json.loads(building.stdout)
    assert answer["mode"] == "exact" and answer["hybrid_unavailable"] == "index_building"
    assert sorted(item["session_id"] for item in answer["results"]) == ["s1", "s2"]
    strict = runner.invoke(memory_app, ["search", "2510", *db, "--mode", "hybrid"])
    assert strict.exit_code == 2 and "index_building" in strict.stderr
    (tmp_path / "omray.yaml").write_text("semantic: null\n", encoding="utf-8")  # exact search only

    def sessions(arguments: list[str]) -> list[str]:
        result = runner.invoke(memory_app, ["search", "2510", *db, *arguments])
        assert result.exit_code == 0, result.stderr
        return [item["session_id"] for item in json.loads(result.stdout)["results"]]

    assert sorted(sessions([])) == ["s1", "s2"]
    assert sessions(["--session", "s2"]) == ["s2"]
    assert sorted(sessions(["--session", "s1", "--session", "s2", "--mode", "exact"])) == ["s1", "s2"]
    hybrid = runner.invoke(memory_app, ["search", "2510", *db, "--mode", "hybrid"])
    assert hybrid.exit_code == 2 and "hybrid_unavailable" in hybrid.stderr
    assert runner.invoke(memory_app, ["search", "2510", *db, "--mode", "fuzzy"]).exit_code == 2


def test_bad_arguments_exit_2_with_one_line(memory: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMRAY_SESSION", raising=False)
    cases = [
        ["search", "x", "--after", "yesterday", "--db", memory.db_path],
        ["search", "x", "--limit", "0", "--db", memory.db_path],
        ["search", "x", "--session", " ", "--db", memory.db_path],
        ["recall", "short", "--session", "s1", "--db", memory.db_path],
        ["recall", "ffffffffffff", "--session", "s1", "--db", memory.db_path],
        ["status", "--db", memory.db_path],
    ]
    for arguments in cases:
        result = runner.invoke(memory_app, arguments)
        assert result.exit_code == 2, arguments
        assert result.stdout == ""
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("omray memory: ")
        assert "Traceback" not in result.stderr


def test_bad_settings_file_is_a_clean_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "omray.yaml").write_text("observational_memory: [not, a, mapping\n", encoding="utf-8")
    result = runner.invoke(memory_app, ["view", "--session", "s1"])
    assert result.exit_code == 2 and "not valid YAML" in result.stderr
