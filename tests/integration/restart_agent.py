"""An agent process for ``test_restart.py``: one client, kept across a whole-cluster restart.

``python -m tests.integration.restart_agent ADDRESS PROJECT HOOK_TIMEOUT_S`` connects, then reads
commands from stdin, one per line: ``turn N`` appends turn N of the sample session to its events
file and calls ``after_turn_commit``; ``drain`` waits until every hook job was accepted; ``quit``.
It answers each command with one JSON line on stdout (the hook's job id and how long it took).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from cluster.client import connect
from cluster.commands.demo_session import commit_turn, demo_session

SESSION = "restart-session"
SETTINGS = {"model": "builtin/extractive", "observer": {"observe_after_tokens": 0}}


def main() -> None:
    address, project, hook_timeout = sys.argv[1], Path(sys.argv[2]), float(sys.argv[3])
    client = connect(
        address,
        settings={**SETTINGS, "storage": {"database": str(project / "om.sqlite")}},
        cwd=project,
        hook_timeout_s=hook_timeout,
        call_timeout_s=10.0,
    )
    turns = demo_session(SESSION)
    events_path = client.events_path(SESSION)
    events_path.parent.mkdir(parents=True, exist_ok=True)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "turn":
            turn = turns[int(command[1]) - 1]
            context = commit_turn(events_path, turn)
            started = time.monotonic()
            job_id = client.after_turn_commit(context, events_path=events_path)
            answer = {"job_id": job_id, "seconds": time.monotonic() - started, "end_seq": turn[-1]["seq"]}
            print(json.dumps(answer), flush=True)
        elif command[0] == "drain":
            print(json.dumps({"drained": client.outbox.wait_empty(float(command[1]))}), flush=True)
        else:
            break
    client.close()


if __name__ == "__main__":
    main()
