"""How ``omray bench`` prints a result: headline figures first, every figure once."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest
from pydantic import BaseModel

from bench.cli import emit
from bench.output import emit_lines


class _Result(BaseModel):
    HEADLINE: ClassVar[tuple[str, ...]] = ("c_ms", "a")
    a: int = 1
    b: int = 2
    c_ms: float = 3.5


@pytest.mark.parametrize("as_json", [True, False])
def test_headline_figures_come_first_and_nothing_is_repeated(
    as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    emit(_Result(), as_json)
    out = capsys.readouterr().out
    if as_json:
        assert list(json.loads(out).items()) == [("c_ms", 3.5), ("a", 1), ("b", 2)]
    else:
        assert out.splitlines() == ["c_ms: 3.5", "a: 1", "b: 2"]


@pytest.mark.parametrize("as_json", [True, False])
def test_emit_lines_prints_the_figures_or_their_summary_never_both(
    as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    figures = {"b": {"x": 1}, "a": 2}
    emit_lines(figures, as_json, (f"{name}!" for name in figures))
    out = capsys.readouterr().out
    if as_json:
        assert out == '{"a": 2, "b": {"x": 1}}\n'  # one object, keys sorted
    else:
        assert out.splitlines() == ["b!", "a!"]
