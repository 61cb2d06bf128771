"""A memory database removed or replaced under its writer (issue 40 item 10).

The writer used to keep writing the unlinked file: later imports "succeeded" and nothing was
found until the runtime restarted. Now every transaction checks the path still names the file it
writes; a missing file is created again (a replaced one opened), and a write whose file changed
while it ran fails with ``StoreFileReplacedError`` instead of reporting success.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.read.service import memory_search
from actors.store.actor import StoreActor
from persistence.writers.store import Store
from protocol.errors import StoreFileReplacedError
from tests.unit.persistence.test_forget_store import commit_turn


def _found(db: Path, word: str) -> bool:
    answer = memory_search(db, {"query": word, "mode": "exact", "limit": 5})
    assert answer["ok"] is True, answer
    return bool(answer["results"])


def test_a_database_folder_removed_under_the_writer_is_created_again(tmp_path: Path) -> None:
    db = tmp_path / ".hatfield" / "om.sqlite"
    with Store(db) as store:
        commit_turn(store, "s1", 1, "beforeremoval")
        assert _found(db, "beforeremoval")
        shutil.rmtree(db.parent)  # the user deletes the project's memory folder
        commit_turn(store, "s1", 2, "afterremoval")
        assert db.is_file() and _found(db, "afterremoval")  # what was reported written is findable
        assert not _found(db, "beforeremoval")
        assert store.reopened == 1
        assert oct(db.parent.stat().st_mode & 0o777) == "0o700"
        commit_turn(store, "s1", 3, "thirdturn")
        assert store.reopened == 1 and _found(db, "thirdturn")


def test_a_database_replaced_under_the_writer_is_the_one_written(tmp_path: Path) -> None:
    db = tmp_path / "om.sqlite"
    backup = tmp_path / "backup" / "om.sqlite"
    with Store(backup) as other:
        commit_turn(other, "s9", 1, "frombackup")
    with Store(db) as store:
        commit_turn(store, "s1", 1, "original")
        os.replace(backup, db)  # a backup moved into place
        for suffix in ("-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        commit_turn(store, "s1", 2, "intobackup")
        assert _found(db, "frombackup") and _found(db, "intobackup")


def test_a_write_whose_file_was_removed_while_it_ran_is_not_reported_as_done(tmp_path: Path) -> None:
    db = tmp_path / "om.sqlite"
    with Store(db) as store:
        commit_turn(store, "s1", 1, "firstturn")
        with pytest.raises(StoreFileReplacedError), store.atomic():
            commit_turn(store, "s1", 2, "lostturn")
            db.unlink()  # removed between the write's start and its commit
        commit_turn(store, "s1", 2, "lostturn")  # the retried write lands in the file at the path
        assert _found(db, "lostturn")


def test_the_store_actor_ping_creates_a_removed_database_before_a_job_reads(tmp_path: Path) -> None:
    db = tmp_path / "data" / "om.sqlite"
    actor = StoreActor(db)
    try:
        shutil.rmtree(db.parent)
        assert actor.ping()["reopened"] == 1 and db.is_file()
        assert actor.ping()["reopened"] == 1
    finally:
        actor.close()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writers=st.integers(min_value=2, max_value=4), removal_after=st.integers(min_value=0, max_value=6))
def test_writes_racing_a_removal_never_report_success_for_a_lost_write(
    tmp_path_factory: pytest.TempPathFactory, writers: int, removal_after: int
) -> None:
    """Several threads write while the folder is removed once: every write that started after the
    removal and reported success is in the file at the path; one that lost the race raised."""
    db = tmp_path_factory.mktemp("race") / "data" / "om.sqlite"
    started_after: list[str] = []
    removed = threading.Event()
    lock = threading.Lock()

    with Store(db) as store:

        def write(worker: int) -> None:
            for turn in range(8):
                word = f"w{worker}x{turn}"
                after = removed.is_set()
                try:
                    commit_turn(store, f"s{worker}", turn + 1, word)
                except StoreFileReplacedError:
                    commit_turn(store, f"s{worker}", turn + 1, word)  # the job's next attempt
                    after = True
                if after:
                    with lock:
                        started_after.append(word)

        threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
        for thread in threads:
            thread.start()
        time.sleep(removal_after / 1000)
        # Gone from the path in one step (a rename), then deleted: a plain ``rmtree`` can meet a file
        # a writer creates while it runs and fail with "directory not empty", leaving the folder half
        # removed; the old folder's own leftovers (old connections still write there) do not matter.
        gone = db.parent.with_name("removed")
        db.parent.rename(gone)
        removed.set()
        shutil.rmtree(gone, ignore_errors=True)
        for thread in threads:
            thread.join(30)
        assert all(_found(db, word) for word in started_after)
