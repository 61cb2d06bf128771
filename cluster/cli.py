"""The ``omray`` command line."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="omray",
    help="Observational memory for LLM agents, on a local Ray cluster.",
    no_args_is_help=True,
    add_completion=False,
)


@app.command()
def demo() -> None:
    """Run the offline demo (needs the Observer pipeline, not built yet)."""
    typer.echo(
        "omray demo: not built yet. The demo needs the Observer pipeline; "
        "the foundation (protocol, store, events reader, token counting) is in place: run `make test`.",
        err=True,
    )
    raise typer.Exit(code=2)


if __name__ == "__main__":
    app()
