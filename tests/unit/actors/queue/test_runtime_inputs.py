"""Bad runtime input (pool sizes, scaling, handler paths, ports, addresses) is a one-line typed error
raised before anything starts: no Ray head, no actor, no record. Ray itself is never reached here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from typer.testing import CliRunner

from actors.queue.scaling import PoolLimits, ScalingError, ScalingPolicy
from cluster import up_down
from cluster.commands.cli import app
from cluster.named_actors import DEFAULT_HANDLERS, ensure_runtime
from cluster.pools import PoolSizes
from cluster.up_down import BootstrapError, RuntimeRecord, _write_record
from protocol.errors import SettingsError
from protocol.jobs import OBSERVE_BOUNDARY_HANDLER


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ({"observers": 5, "max_observers": 3}, "max_observers (3) must be at least observers (5)"),
        ({"max_observers": 1}, "max_observers (1) must be at least observers (2)"),
        ({"observers": 0}, "observers must be an integer from 1 to 64"),
        ({"observers": True}, "observers must be an integer from 1 to 64"),
        ({"indexer_slots": 65}, "indexer_slots must be an integer from 1 to 64"),
    ],
)
def test_pool_sizes_out_of_range_are_settings_errors(sizes: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        PoolSizes(**sizes)


def test_pool_sizes_from_the_environment_name_the_variables() -> None:
    with pytest.raises(SettingsError, match="OMRAY_OBSERVERS must be an integer, got 'abc'"):
        PoolSizes.from_env({"OMRAY_OBSERVERS": "abc"})
    with pytest.raises(SettingsError, match="from OMRAY_MAX_OBSERVERS and the defaults"):
        PoolSizes.from_env({"OMRAY_MAX_OBSERVERS": "1"})
    assert PoolSizes.from_env({"OMRAY_OBSERVERS": " 3 "}).observers == 3


@pytest.mark.parametrize(
    "policy",
    [
        {"grow_after_s": math.nan},
        {"shrink_after_s": math.inf},
        {"cooldown_s": -1.0},
        {"grow_after_s": "1"},
        {"grow_after_s": True},
    ],
)
def test_scaling_policies_that_cannot_work_are_refused(policy: dict[str, Any]) -> None:
    with pytest.raises(ScalingError):
        ScalingPolicy(**policy)


@pytest.mark.parametrize("limits", [(1.5, 2, 1), (None, 2, 1), (1, 2, True), (3, 2, 1), (1, 2, 0)])
def test_pool_limits_that_cannot_work_are_refused(limits: tuple[Any, Any, Any]) -> None:
    with pytest.raises(ScalingError):
        PoolLimits(*limits)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"handler_paths": {**DEFAULT_HANDLERS, "bogus.handler": "x:y"}}, "no worker role serves"),
        ({"handler_paths": {OBSERVE_BOUNDARY_HANDLER: "no.such.module:run"}}, "cannot be imported"),
        ({"handler_paths": {OBSERVE_BOUNDARY_HANDLER: "testkit.handlers"}}, "must be 'module:function'"),
        ({"max_in_flight": 0}, "max_in_flight must be an integer >= 1"),
        ({"max_in_flight": -1}, "max_in_flight must be an integer >= 1"),
    ],
)
def test_ensure_runtime_refuses_bad_arguments_before_creating_anything(
    arguments: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with (
        mock.patch("cluster.named_actors.worker_pools") as pools,
        mock.patch("cluster.named_actors._remove_queue_store_actor") as cleanup,
        mock.patch("cluster.named_actors.current_node_id", return_value="node"),
        pytest.raises(SettingsError, match=message),
    ):
        ensure_runtime(queue_db=str(tmp_path / "q.sqlite"), **arguments)
    pools.assert_not_called()
    cleanup.assert_not_called()


POOL_VARIABLES = [f"OMRAY_{name.upper()}" for name in PoolSizes.__dataclass_fields__]


@pytest.fixture
def no_pool_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blank every pool variable; ``omray up`` sets some, and monkeypatch restores them after."""
    for variable in POOL_VARIABLES:
        monkeypatch.setenv(variable, "")


def test_up_with_bad_pool_sizes_fails_in_one_line_and_starts_nothing(no_pool_variables: None) -> None:
    with mock.patch("cluster.up_down.up") as up:
        result = CliRunner().invoke(app, ["up", "--observers", "5", "--max-observers", "3"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "max_observers (3) must be at least observers (5)" in result.output
    up.assert_not_called()


@pytest.mark.parametrize("port", ["0", "99999"])
def test_up_refuses_a_port_outside_1_to_65535(port: str) -> None:
    with mock.patch("cluster.up_down.up") as up:
        result = CliRunner().invoke(app, ["up", "--port", port])
    assert result.exit_code == 2
    up.assert_not_called()


def test_up_passes_the_pool_sizes_it_was_given(
    no_pool_variables: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer = {"queue": "omray.queue", "namespace": "omray", "dashboard_url": ""}
    with mock.patch("cluster.up_down.up", return_value=answer) as up:
        assert CliRunner().invoke(app, ["up"]).exit_code == 0
        monkeypatch.setenv("OMRAY_REFLECTORS", "2")  # a variable counts as given, like a flag
        assert CliRunner().invoke(app, ["up", "--observers", "3"]).exit_code == 0
    plain, sized = up.call_args_list
    assert plain.kwargs["pools"] is None and not plain.kwargs["pool_fields"]
    assert sized.kwargs["pools"].observers == 3 and sized.kwargs["pools"].reflectors == 2
    assert sized.kwargs["pool_fields"] == {"observers", "reflectors"}


def test_watch_refuses_an_interval_past_an_hour() -> None:
    result = CliRunner().invoke(app, ["watch", "--interval", "inf"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_status_without_omray_queue_exits_1() -> None:
    empty = {"actors": [], "queue": None}
    with mock.patch("cluster.status.runtime_status", return_value=empty):
        result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 1 and "queue is not running" in result.output


def test_status_and_down_without_a_record_join_no_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with mock.patch("cluster.runtime_connection.ray.init") as ray_init:
        status = CliRunner().invoke(app, ["status"])
        down = CliRunner().invoke(app, ["down"])
    assert status.exit_code == 2 and "no omray runtime is recorded" in status.output
    assert down.exit_code == 0 and "removed 0 actors" in down.output
    ray_init.assert_not_called()


def test_up_refuses_a_second_head_while_the_recorded_one_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OMRAY_HOME", str(tmp_path))
    _write_record(RuntimeRecord("127.0.0.1:6471", True, "", "token"))
    with (
        mock.patch.object(up_down, "_reachable", return_value=True),
        mock.patch.object(up_down, "start_head") as start_head,
        mock.patch.object(up_down, "init_ray") as init_ray,
        pytest.raises(BootstrapError, match=r"already runs its Ray head at 127\.0\.0\.1:6471"),
    ):
        up_down.up(port=6480)
    start_head.assert_not_called()
    init_ray.assert_not_called()
    assert up_down.read_record() == RuntimeRecord("127.0.0.1:6471", True, "", "token")


def test_up_with_other_pool_sizes_than_the_running_runtime_changes_nothing() -> None:
    running = {OBSERVE_BOUNDARY_HANDLER: {"minimum": 4, "maximum": 8, "slots": 4}}  # `up --observers 4`
    names = up_down.RuntimeNames()
    with (
        mock.patch.object(up_down.ray, "get_actor", return_value=mock.Mock()),
        mock.patch.object(up_down.ray, "get", return_value={"pools": running}),
    ):
        # Only what the user gave is compared: the observers left at their default do not count.
        up_down._check_same_pools(names, PoolSizes(max_observers=8), frozenset({"max_observers"}))
        up_down._check_same_pools(names, PoolSizes(observers=4), frozenset({"observers"}))
        with pytest.raises(BootstrapError, match=r"max_observers 8 \(not 6\)"):
            up_down._check_same_pools(
                names, PoolSizes(observers=4, max_observers=6), frozenset({"max_observers"})
            )
        with pytest.raises(BootstrapError, match=r"observers 4 \(not 2\)"):
            up_down._check_same_pools(names, PoolSizes())  # every field, defaults included


def test_each_pool_field_maps_to_the_bound_its_pool_reports() -> None:
    sizes = PoolSizes(observers=3, max_observers=5, indexer_slots=2)
    assert sizes.bound("observers") == (OBSERVE_BOUNDARY_HANDLER, "minimum", 3)
    assert sizes.bound("max_observers") == (OBSERVE_BOUNDARY_HANDLER, "maximum", 5)
    assert sizes.bound("indexer_slots")[1:] == ("slots", 2)
    assert {sizes.bound(name)[0] for name in PoolSizes.__dataclass_fields__} == set(DEFAULT_HANDLERS)


def test_status_with_a_queue_older_than_the_cli_shows_the_actors_and_exits_0() -> None:
    older = {
        "actors": [{"name": "omray.queue", "state": "ALIVE"}],
        "queue": None,
        "queue_older_than_cli": True,
    }
    with mock.patch("cluster.status.runtime_status", return_value=older):
        result = CliRunner().invoke(app, ["status"])
    assert (
        result.exit_code == 0
        and "omray.queue: ALIVE" in result.output
        and "older than this CLI" in result.output
    )
