"""The hook dispatcher yields the CPU to the agent from its first instant: the hook that starts it
lowers its priority at once (``hook_fast.start_dispatcher``), and a dispatcher started some other
way lowers its own (``agent_hooks.lower_own_priority``), never adding to what it was given."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.commands import hook_fast


def _niceness(pid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, pid)


def _stop(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


def test_the_dispatcher_starts_at_a_lower_priority_than_its_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spawned: list[list[str]] = []
    pids: list[int] = []
    real_spawn = hook_fast.spawn_detached

    def spawn(argv: list[str], *, search_path: bool = False) -> int:
        spawned.append(argv)  # a stand-in that lives long enough to be looked at
        pids.append(real_spawn(["/bin/sleep", "30"]))
        return pids[-1]

    monkeypatch.setattr(hook_fast, "spawn_detached", spawn)
    hook_fast.start_dispatcher(str(tmp_path))
    try:
        assert spawned and spawned[0][-2:] == ["--project", str(tmp_path)]
        assert "cluster.commands.agent_hooks" in spawned[0]
        expected = min(19, _niceness(0) + hook_fast.DISPATCHER_NICENESS)
        assert _niceness(pids[0]) == expected
    finally:
        _stop(pids[0])


def test_a_child_already_gone_is_no_error() -> None:
    pid = hook_fast.spawn_detached(["/bin/true"])
    os.waitpid(pid, 0)
    before = _niceness(0)
    hook_fast.lower_child_priority(pid, hook_fast.DISPATCHER_NICENESS)  # reaped: nothing to lower
    assert _niceness(0) == before  # and this process is left as it was


def test_a_dispatcher_lowers_its_own_priority_only_up_to_what_it_needs() -> None:
    own = _niceness(0)
    wanted = min(19, own + 3)
    script = (
        "import os, sys\n"
        "from cluster.commands.agent_hooks import lower_own_priority\n"
        "wanted = int(sys.argv[1])\n"
        "print(lower_own_priority(wanted), lower_own_priority(wanted), lower_own_priority(wanted - 1),"
        " os.getpriority(os.PRIO_PROCESS, 0))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(wanted)], capture_output=True, text=True, check=True, timeout=60
    )
    first, again, lower, niceness = done.stdout.split()
    assert (first, again, lower) == (str(wanted > own), "False", "False")
    assert int(niceness) == wanted
    # Started already lower than asked (as the hook starts it): left as it is.
    done = subprocess.run(
        ["nice", "-n", "5", sys.executable, "-c", script, str(min(19, own + 2))],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    first, _, _, niceness = done.stdout.split()
    assert first == "False" and int(niceness) == min(19, own + 5)
