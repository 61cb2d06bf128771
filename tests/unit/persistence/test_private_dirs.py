"""``make_private_dirs``: every folder it creates is 0700 whatever the umask; existing ones are left alone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from persistence.files.private_dirs import make_private_dirs


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_creates_every_missing_folder_0700_under_a_loose_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        make_private_dirs(tmp_path / "a" / "b" / "c")
    finally:
        os.umask(previous)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "c"):
        assert _mode(folder) == 0o700, folder


def test_leaves_existing_folders_as_they_are(tmp_path: Path) -> None:
    existing = tmp_path / "mine"
    existing.mkdir(mode=0o755)
    existing.chmod(0o755)
    make_private_dirs(existing / "new")
    assert _mode(existing) == 0o755
    assert _mode(existing / "new") == 0o700
    make_private_dirs(existing / "new")  # again: nothing to do, no error
    assert _mode(existing / "new") == 0o700


def test_a_file_in_the_way_is_an_os_error_and_creates_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(OSError):
        make_private_dirs(blocker / "sub")
    assert blocker.is_file()
