"""``omray up`` keeps its record in $OMRAY_HOME with private modes (DESIGN.md invariant 8)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cluster.up_down import RuntimeRecord, _write_record, read_record


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_runtime_record_is_0600_in_0700_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "parent" / "omray-home"
    monkeypatch.setenv("OMRAY_HOME", str(home))
    old_umask = os.umask(0o022)
    try:
        record = RuntimeRecord("127.0.0.1:6380", True, "http://127.0.0.1:8265", "token")
        _write_record(record)
        _write_record(record)  # rewriting keeps the modes
    finally:
        os.umask(old_umask)
    assert read_record() == record
    assert _mode(home / "runtime.json") == 0o600
    assert _mode(home) == 0o700 and _mode(home.parent) == 0o700
