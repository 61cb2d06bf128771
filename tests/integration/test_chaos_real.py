"""``omray bench chaos --real`` on the session cluster: one seed and one whole-cluster stop, small input.

Real observe, reflect and index jobs (the scripted model through the real ``openai`` client,
scripted embeddings) run while the queue, each worker and the memory StoreActor are SIGKILLed;
then a run in a subprocess stops its own ``omray up`` head mid-run and starts it again. Both must
end with the memory of the uninterrupted run.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from bench.cli import bench_app

pytestmark = pytest.mark.integration


def test_memory_after_kills_and_a_cluster_stop_is_the_uninterrupted_memory(ray_cluster: object) -> None:
    args = ["chaos", "--real", "--seeds", "1", "--seed", "3", "--sessions", "1", "--turns", "3", "--json"]
    result = CliRunner().invoke(bench_app, args)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.stdout.strip().splitlines()[-1])

    assert (figures["lost"], figures["duplicated"], figures["memory_identical"]) == (0, 0, True)
    assert figures["baseline"]["memory"]["observations"] > 0
    assert figures["baseline"]["memory"]["reflections"] > 0
    assert figures["baseline"]["memory"]["index_chunks"] > 0
    [seed] = figures["seeds"]
    assert seed["seed"] == 3 and seed["settled"] and seed["failed_jobs"] == 0
    kills = seed["kills"]
    assert kills["observer"] == 1 and kills["queue"] == 1 and kills["store"] == 1, seed  # shows missed_kills
    assert sum(seed["kills"].values()) >= 4  # the reflector and indexer too, when their requests came
    stop = figures["cluster_stop"]
    assert stop["stopped_processes"] > 0 and stop["restarted"] and stop["memory_identical"]
    assert figures["kills"]["cluster"] == 1
