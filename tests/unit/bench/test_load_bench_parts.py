"""Parts of the load benchmark: its model server in a process of its own, and the agents' phases."""

from __future__ import annotations

import json
import os
import urllib.request

from testkit.scripted_models import ScriptedMemoryModel
from testkit.scripted_server import ScriptedServerProcess


def test_the_server_process_answers_counts_requests_and_stops() -> None:
    body = {"model": "m", "messages": [{"role": "tool", "content": "ok", "tool_call_id": "c"}]}
    with ScriptedServerProcess(ScriptedMemoryModel, 0.0) as server:
        request = urllib.request.Request(
            server.base_url + "/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        assert answer["choices"][0]["message"]["content"] == "Done."
        assert server.chat_request_count() == 1
        child = server._process
        assert child.pid != os.getpid()
    assert not child.is_alive()


def test_staggered_agents_spread_over_one_interval_and_synchronized_ones_start_together() -> None:
    from bench.load_bench import _phase

    staggered = [_phase(i, 32, 0.5, "staggered") for i in range(32)]
    assert staggered[0] == 0.0 and staggered == sorted(staggered) and staggered[-1] < 0.5
    assert len(set(staggered)) == 32
    assert {_phase(i, 32, 0.5, "synchronized") for i in range(32)} == {0.0}


def test_the_load_models_answer_takes_longer_for_a_longer_prompt() -> None:
    from testkit.scripted_models import prompt_tokens

    def body(chars: int) -> dict[str, object]:
        return {"model": "m", "messages": [{"role": "tool", "content": "x" * chars, "tool_call_id": "c"}]}

    # 1 s, plus 1 ms per 100 prompt tokens (the load bench's default).
    model = ScriptedMemoryModel(1.0, 0.001 / 100)
    assert prompt_tokens(body(40_000)) == 10_000
    assert model(body(0)).delay_s == 1.0
    assert abs(model(body(40_000)).delay_s - 1.1) < 1e-9
    assert ScriptedMemoryModel(1.0)(body(40_000)).delay_s == 1.0  # no per-token part unless asked


def test_speedup_vs_serial_is_over_the_coalescing_worker_and_the_no_coalescing_run_has_its_own() -> None:
    from bench.load_bench import _serial_figures

    parallel = {"makespan_s": 10.0}
    run = {
        "makespan_s": 36.0,
        "observed_s": 30.0,
        "visible_lag_p95_s": 3.0,
        "lost": 0,
        "jobs": 200,
        "model_requests": 200,
    }
    figures = _serial_figures("serial", run, parallel)
    assert figures["speedup_vs_serial"] == 3.6 and figures["serial_model_requests"] == 200
    other = _serial_figures("serial_no_coalescing", {**run, "makespan_s": 530.0}, parallel)
    assert other["speedup_vs_serial_no_coalescing"] == 53.0 and "speedup_vs_serial" not in other


def test_the_lane_ceiling_is_the_single_workers_time_over_the_ideal_and_reached_at_ideal() -> None:
    from bench.load_bench import lane_ceiling

    serial = {"observed_s": 44.0, "makespan_s": 70.0}  # the index catch-up is left out
    at_ideal = lane_ceiling(serial, {"observed_s": 11.0, "ideal_parallel_s": 11.0})
    assert at_ideal == {"lane_ceiling": 4.0, "speedup_observed_vs_serial": 4.0}
    slower = lane_ceiling(serial, {"observed_s": 13.2, "ideal_parallel_s": 11.0})
    assert slower["lane_ceiling"] == 4.0 and slower["speedup_observed_vs_serial"] == 3.33
