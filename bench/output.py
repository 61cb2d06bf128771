"""How benchmark commands print: figures on stdout, everything else on stderr."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import typer
from pydantic import BaseModel

__all__ = ["emit", "emit_lines", "stdout_to_stderr"]


def emit(result: BaseModel, as_json: bool) -> None:
    """Print a result as one JSON object, or as ``name: value`` lines; a result's ``HEADLINE``
    figures (a class attribute naming fields) come first, the rest in field order."""
    figures = result.model_dump(mode="json")
    leading = [name for name in getattr(result, "HEADLINE", ()) if name in figures]
    ordered = {name: figures[name] for name in leading} | figures
    if as_json:
        import json

        typer.echo(json.dumps(ordered, separators=(",", ":")))
        return
    for name, value in ordered.items():
        typer.echo(f"{name}: {value}")


def emit_lines(figures: Mapping[str, Any], as_json: bool, lines: Iterable[str]) -> None:
    """Print plain ``figures`` as one JSON object (keys sorted), or else ``lines``, a summary of them."""
    if as_json:
        import json

        typer.echo(json.dumps(figures, sort_keys=True, default=str))
        return
    for line in lines:
        typer.echo(line)


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send everything written to file descriptor 1 to stderr meanwhile.

    Ray's driver prints cluster notices (a worker died, a task is retried) on stdout even with
    ``log_to_driver=False``; the chaos benchmark causes many, and stdout must carry only figures.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
