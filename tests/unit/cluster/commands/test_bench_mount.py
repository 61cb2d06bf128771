"""``omray bench`` is mounted from its entry-point declaration, not imported by name."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest
from typer.testing import CliRunner

from cluster.commands import cli


def _fresh_app(monkeypatch: pytest.MonkeyPatch, points: list[EntryPoint]) -> None:
    import typer

    monkeypatch.setattr(cli, "app", typer.Typer())
    monkeypatch.setattr(
        "importlib.metadata.entry_points",
        lambda group, name: [p for p in points if p.group == group and p.name == name],
    )
    cli._mount_bench()


def test_the_declared_bench_app_is_mounted(monkeypatch: pytest.MonkeyPatch) -> None:
    point = EntryPoint(name="bench", value="bench.cli:bench_app", group="omray.commands")
    _fresh_app(monkeypatch, [point])
    result = CliRunner().invoke(cli.app, ["bench", "--help"])
    assert result.exit_code == 0
    assert "queue" in result.output


@pytest.mark.parametrize(
    "points",
    [
        [],
        [EntryPoint(name="bench", value="omray_no_such_bench.cli:bench_app", group="omray.commands")],
    ],
    ids=["undeclared", "declared-but-absent"],
)
def test_without_the_bench_package_the_command_says_why(
    monkeypatch: pytest.MonkeyPatch, points: list[EntryPoint]
) -> None:
    _fresh_app(monkeypatch, points)
    result = CliRunner().invoke(cli.app, ["bench", "queue"])
    assert result.exit_code == 2
    assert "source checkout" in result.output
