"""Hostile ids: a trailing newline never passes an id check, a short Codex thread id never picks
another thread's rollout, and ``omray import`` makes its session folders private (0700)."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from cluster.commands import hook_fast, import_cli
from persistence.importers import InvalidImportSessionIdError, default_events_path, validate_session_id
from persistence.settings.parse import settings_from_mapping
from protocol.errors import SettingsError
from tests.unit.persistence.importers.helpers import FIXTURES


@pytest.mark.parametrize("session_id", ["abc\n", "s1\n", "a.b-c_d\n", "x" * 128 + "\n"])
def test_a_session_id_with_a_trailing_newline_is_refused(session_id: str) -> None:
    with pytest.raises(InvalidImportSessionIdError):
        validate_session_id(session_id)
    with pytest.raises(InvalidImportSessionIdError):
        default_events_path(session_id)
    assert hook_fast.valid_session_id(session_id) is None
    assert hook_fast.valid_session_id(session_id.rstrip("\n")) == session_id.rstrip("\n")


def test_a_hook_call_for_a_session_id_with_a_newline_makes_no_folder(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"type":"user"}\n')
    event = {"session_id": "abc\n", "hook_event_name": "Stop", "transcript_path": str(transcript)}
    raw = json.dumps({**event, "cwd": str(tmp_path)})
    assert hook_fast.claude_code(raw, str(tmp_path)) is None
    assert not (tmp_path / ".hatfield").exists()


@pytest.mark.parametrize(
    "block",
    [
        {"providers": {"local\n": {"base_url": "http://127.0.0.1:1/v1", "context_window": 10}}},
        {
            "providers": {
                "local": {"base_url": "http://127.0.0.1:1/v1", "context_window": 10, "api_key_env": "KEY\n"}
            }
        },
    ],
)
def test_provider_names_and_key_variables_with_a_trailing_newline_are_refused(
    block: dict[str, object],
) -> None:
    with pytest.raises(SettingsError):
        settings_from_mapping(block)


def _rollout(sessions: Path, day: str, thread: str) -> Path:
    folder = sessions / day
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rollout-{day.replace('/', '-')}T10-00-00-{thread}.jsonl"
    path.write_text("{}\n")
    return path


def test_a_short_thread_id_matches_only_its_own_rollout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = tmp_path / "codex" / "sessions"
    other = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
    _rollout(sessions, "2026/03/04", other)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    for suffix in ("4a5b", "0c1d2e3f4a5b", "8a9b-0c1d2e3f4a5b", "b"):
        assert hook_fast.codex_rollout(suffix) is None, suffix
    assert hook_fast.codex_rollout(other) is not None
    own = _rollout(sessions, "2026/03/04", "4a5b")
    assert hook_fast.codex_rollout("4a5b") == str(own)


def test_rollout_names_are_parsed_exactly() -> None:
    assert hook_fast.rollout_thread("rollout-2026-03-04T10-00-00-abc.jsonl") == "abc"
    assert hook_fast.rollout_thread("rollout-2026-03-04T10-00-00-abc.jsonl.bak") is None
    assert hook_fast.rollout_thread("rollout-x-abc.jsonl") is None
    assert hook_fast.rollout_thread("rollout-2026-03-04T10-00-00-abc.jsonl\n") is None


def test_omray_import_makes_session_folders_0700(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    old_umask = os.umask(0o022)
    try:
        app = typer.Typer()
        app.command("import")(import_cli.import_command_for(None))
        app.command("noop")(lambda: None)
        args = ["import", "--format", "codex", str(FIXTURES / "codex-rollout.jsonl"), "--session", "s9"]
        result = CliRunner().invoke(app, [*args, "--quiet", "--no-observe"])
    finally:
        os.umask(old_umask)
    assert result.exit_code == 0, result.output
    for folder in (
        tmp_path / ".hatfield",
        tmp_path / ".hatfield" / "sessions",
        tmp_path / ".hatfield" / "sessions" / "s9",
    ):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    events = tmp_path / ".hatfield" / "sessions" / "s9" / "events.jsonl"
    assert stat.S_IMODE(events.stat().st_mode) == 0o600


def test_omray_import_leaves_an_existing_folder_mode_alone(tmp_path: Path) -> None:
    existing = tmp_path / "shared"
    existing.mkdir(mode=0o755)
    os.chmod(existing, 0o755)
    from persistence.importers import import_transcript

    import_transcript("codex", FIXTURES / "codex-rollout.jsonl", "s9", existing / "new" / "events.jsonl")
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755
    assert stat.S_IMODE((existing / "new").stat().st_mode) == 0o700


@given(
    st.one_of(
        st.text(alphabet=st.characters(codec="utf-8"), max_size=140),
        st.text(alphabet="Aa0._-\n/é", min_size=0, max_size=130),
        st.text(alphabet="Zz9._-", min_size=126, max_size=130),
    )
)
def test_the_hot_path_accepts_exactly_the_session_ids_of_its_pattern(value: str) -> None:
    # hook_fast checks ids without `re` (a hook call saves its import); the pattern is the rule.
    expected = value if re.match(hook_fast.SESSION_ID_PATTERN, value) else None
    assert hook_fast.valid_session_id(value) == expected
