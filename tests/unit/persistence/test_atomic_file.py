"""``persistence.files.atomic_file.replace_file``: the whole new file or the old one, never a part."""

from __future__ import annotations

import os
from pathlib import Path
from unittest import mock

import pytest

from persistence.files.atomic_file import replace_file


def test_the_new_bytes_replace_the_file_with_the_mode_asked_for(tmp_path: Path) -> None:
    target = tmp_path / "cursor.json"
    target.write_bytes(b"old")
    os.chmod(target, 0o644)
    replace_file(target, b"new", 0o600)
    assert target.read_bytes() == b"new"
    assert target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cursor.json"]


def test_a_failed_replace_leaves_the_old_file_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "settings.json"
    target.write_bytes(b"old")
    with mock.patch("os.replace", side_effect=OSError("disk full")), pytest.raises(OSError):
        replace_file(target, b"new", 0o600)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]
