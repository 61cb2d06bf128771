"""Reading settings files under bad input (issue 16: D4 YAML, D6, D15)."""

from __future__ import annotations

from pathlib import Path

import pytest

import persistence.settings.file as settings_file
from persistence.settings.file import SETTINGS_ENV, load_settings, read_settings_document
from protocol.errors import SettingsError

VALID = "observational_memory:\n  model: builtin/extractive\n  observer:\n    context_window_ratio: 0.5\n"


@pytest.mark.parametrize(
    ("encoding", "text"),
    [
        ("latin-1", "observational_memory:\n  model: builtin/extractive  # café\n"),
        ("utf-16", VALID),
    ],
)
def test_a_settings_file_that_is_not_utf8_is_a_settings_error(
    tmp_path: Path, encoding: str, text: str
) -> None:
    path = tmp_path / "omray.yaml"
    path.write_bytes(text.encode(encoding))
    with pytest.raises(SettingsError, match="not UTF-8") as raised:
        load_settings(path)
    assert str(path) in str(raised.value)


def test_an_endless_settings_file_is_read_bounded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(SETTINGS_ENV, "/dev/zero")
    with pytest.raises(SettingsError, match="larger than"):
        load_settings(cwd=tmp_path)


def test_a_file_over_the_limit_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(settings_file, "MAX_SETTINGS_BYTES", len(VALID) - 1)
    path = tmp_path / "omray.yaml"
    path.write_text(VALID, encoding="utf-8")
    with pytest.raises(SettingsError, match="larger than"):
        load_settings(path)
    monkeypatch.setattr(settings_file, "MAX_SETTINGS_BYTES", len(VALID))
    assert load_settings(path).model == "builtin/extractive"


@pytest.mark.parametrize(
    "text",
    ["[" * 50_000 + "]" * 50_000 + "\n", "a:\n" + "".join(" " * (i + 1) + "a:\n" for i in range(5_000))],
)
def test_deeply_nested_yaml_is_a_settings_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "omray.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SettingsError):
        read_settings_document(path)


def test_duplicate_keys_are_rejected_with_the_key_and_line(tmp_path: Path) -> None:
    path = tmp_path / "omray.yaml"
    path.write_text(
        "observational_memory:\n  model: builtin/extractive\n  observer: {}\n  model: local/other\n",
        encoding="utf-8",
    )
    with pytest.raises(SettingsError, match=r"repeats key 'model' at line 4 \(first set at line 2\)"):
        load_settings(path)


def test_duplicate_keys_in_a_flow_mapping_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "omray.yaml"
    path.write_text("observational_memory: {model: builtin/extractive, model: x/y}\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="repeats key 'model' at line 1"):
        read_settings_document(path)


def test_same_key_in_different_mappings_and_merge_keys_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "omray.yaml"
    path.write_text(
        "base: &base {ratio: 1}\na: {model: x}\nb: {model: y}\nc:\n  <<: *base\n  other: 2\n",
        encoding="utf-8",
    )
    doc = read_settings_document(path)
    assert doc["c"] == {"ratio": 1, "other": 2}


def test_a_deeply_nested_override_value_is_taken_as_text_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "omray.yaml"
    path.write_text(VALID, encoding="utf-8")
    deep = "[" * 100_000 + "]" * 100_000
    assert load_settings(path, ["storage.database=" + deep]).database == deep
