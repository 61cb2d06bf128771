"""``omray import`` under bad input (issue 16: D4 transcripts, D14)."""

from __future__ import annotations

import json
from itertools import permutations
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import persistence.importers.common as common
from cluster import import_cli
from persistence.importers import (
    ImportFormatError,
    ImportFormatMismatchError,
    ImportTargetError,
    TranscriptFormat,
    detect_format,
    import_transcript,
)
from tests.unit.persistence.importers.helpers import FIXTURES

runner = CliRunner()

SOURCES: dict[TranscriptFormat, Path] = {
    "pi": FIXTURES / "pi-session.jsonl",
    "claude-code": FIXTURES / "claude-code-session.jsonl",
    "codex": FIXTURES / "codex-rollout.jsonl",
}


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("import")(import_cli.import_command_for(None))

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer from collapsing the app into one command
        """Unused."""

    return app


def _leftovers(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir()) if directory.exists() else []


@pytest.mark.parametrize(("actual", "requested"), list(permutations(SOURCES, 2)))
def test_the_wrong_format_is_a_clear_error_and_writes_nothing(
    tmp_path: Path, actual: TranscriptFormat, requested: TranscriptFormat
) -> None:
    out = tmp_path / "s" / "events.jsonl"
    with pytest.raises(ImportFormatMismatchError) as raised:
        import_transcript(requested, SOURCES[actual], "42", out)
    assert raised.value.detected == actual
    assert f"--format {actual}" in str(raised.value)
    assert _leftovers(out.parent) == []  # no events file, no temp file
    # ... so the right import is not blocked afterwards.
    assert import_transcript(actual, SOURCES[actual], "42", out).events > 0


def test_the_wrong_format_through_the_cli_exits_non_zero(tmp_path: Path) -> None:
    out = tmp_path / "events.jsonl"
    args = ["import", "--format", "pi", str(SOURCES["codex"]), "--session", "9", "--out", str(out)]
    result = runner.invoke(_app(), [*args, "--no-observe"])
    assert result.exit_code == 1
    assert "no pi records found" in result.stderr and "--format codex" in result.stderr
    assert not out.exists()


def test_detect_format_names_each_fixture_and_none_for_foreign_json(tmp_path: Path) -> None:
    for name, source in SOURCES.items():
        assert detect_format(source) == name
    foreign = tmp_path / "other.jsonl"
    foreign.write_text('{"kind": "x"}\n{"kind": "y"}\n', encoding="utf-8")
    assert detect_format(foreign) is None
    with pytest.raises(ImportFormatMismatchError, match="check --format"):
        import_transcript("pi", foreign, "42", tmp_path / "events.jsonl")


def test_out_naming_a_directory_is_a_clear_error_even_with_force(tmp_path: Path) -> None:
    target = tmp_path / "dir"
    target.mkdir()
    with pytest.raises(ImportTargetError, match="is a directory"):
        import_transcript("pi", SOURCES["pi"], "42", target, overwrite=True)
    args = ["import", "--format", "pi", str(SOURCES["pi"]), "--session", "9", "--out", str(target)]
    result = runner.invoke(_app(), [*args, "--force", "--no-observe"])
    assert result.exit_code == 1 and result.exception is not None
    assert isinstance(result.exception, SystemExit)
    assert "is a directory" in result.stderr and "Traceback" not in result.output
    assert _leftovers(target) == []


def test_a_source_without_newlines_is_read_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(common, "MAX_LINE_BYTES", 1024)
    source = tmp_path / "endless.jsonl"
    source.write_bytes(b'{"type": "message", "text": "' + b"x" * 10_000)
    out = tmp_path / "s" / "events.jsonl"
    with pytest.raises(ImportFormatError, match=r"line 1 .*longer than 1024 bytes"):
        import_transcript("pi", source, "42", out)
    assert _leftovers(out.parent) == []


def test_lines_up_to_the_limit_still_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    longest = max(len(line) for line in SOURCES["pi"].read_bytes().splitlines(keepends=True))
    monkeypatch.setattr(common, "MAX_LINE_BYTES", longest)
    assert import_transcript("pi", SOURCES["pi"], "42", tmp_path / "events.jsonl").events > 0


def test_a_deeply_nested_transcript_line_is_a_format_error(tmp_path: Path) -> None:
    source = tmp_path / "deep.jsonl"
    lines = SOURCES["pi"].read_text(encoding="utf-8").splitlines()
    source.write_text(
        "\n".join([*lines[:2], "[" * 100_000 + "]" * 100_000, *lines[2:]]) + "\n", encoding="utf-8"
    )
    out = tmp_path / "s" / "events.jsonl"
    with pytest.raises(ImportFormatError, match=r"line 3 .*nested too deeply"):
        import_transcript("pi", source, "42", out)
    assert _leftovers(out.parent) == []


def test_a_deeply_nested_field_the_converter_decodes_is_a_format_error(tmp_path: Path) -> None:
    # Codex tool-call arguments are JSON text inside the record: decoded by the converter itself.
    deep = "[" * 100_000 + "]" * 100_000
    records = [
        {"type": "response_item", "payload": {"type": "message", "role": "user", "content": "hi"}},
        {
            "type": "response_item",
            "payload": {"type": "function_call", "name": "shell", "call_id": "c1", "arguments": deep},
        },
    ]
    source = tmp_path / "deep-codex.jsonl"
    source.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    out = tmp_path / "s" / "events.jsonl"
    with pytest.raises(ImportFormatError, match=r"line 2 .*nested too deeply"):
        import_transcript("codex", source, "42", out)
    assert _leftovers(out.parent) == []


def test_an_output_write_failure_is_a_target_error_and_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(_fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(common.os, "fsync", full_disk)
    out = tmp_path / "s" / "events.jsonl"
    with pytest.raises(ImportTargetError, match="OSError"):
        import_transcript("pi", SOURCES["pi"], "42", out)
    assert _leftovers(out.parent) == []
