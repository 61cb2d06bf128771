"""The per-node disk guard: a path on another node's disk is refused by every opener that checks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from persistence.files.events_log import EventLog
from persistence.files.events_reader import read_event_window
from persistence.files.node_disk import CLUSTER_DISKS_ENV, NODE_DISK_ENV, ForeignDiskError, check_on_this_node
from persistence.writers.store import Store


@pytest.fixture
def node_a(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CLUSTER_DISKS_ENV, str(tmp_path / "disks"))
    monkeypatch.setenv(NODE_DISK_ENV, str(tmp_path / "disks" / "a"))
    return tmp_path / "disks"


def test_this_nodes_disk_and_paths_outside_every_disk_pass(node_a: Path, tmp_path: Path) -> None:
    check_on_this_node(node_a / "a" / "p" / "om.sqlite")
    check_on_this_node(tmp_path / "elsewhere" / "om.sqlite")
    Store(node_a / "a" / "p" / "om.sqlite").close()


def test_another_nodes_database_events_and_log_are_refused(node_a: Path) -> None:
    foreign = node_a / "b" / "p"
    with pytest.raises(ForeignDiskError):
        Store(foreign / "om.sqlite")
    with pytest.raises(ForeignDiskError):
        read_event_window(foreign / "events.jsonl", 1, 2, session_id="s1")
    with pytest.raises(ForeignDiskError):
        EventLog(foreign / "om.sqlite.events").tail("s1")
    with pytest.raises(ForeignDiskError):  # a sibling whose name starts like this node's folder
        check_on_this_node(node_a / "ab" / "om.sqlite")
    assert not foreign.exists()


def test_without_the_variables_nothing_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CLUSTER_DISKS_ENV, raising=False)
    monkeypatch.setenv(NODE_DISK_ENV, str(tmp_path / "a"))
    check_on_this_node(tmp_path / "b" / "om.sqlite")
