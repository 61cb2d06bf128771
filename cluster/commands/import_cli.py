"""``omray import``: convert a pi, Claude Code or Codex transcript into a session's ``events.jsonl``.

The conversion itself lives in :mod:`persistence.importers`; this module adds the progress bar,
the summary and the optional observation after the import. It never starts Ray: the command line
that mounts the command hands :func:`import_command_for` how to observe.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import Progress, TextColumn, TimeElapsedColumn

from persistence.importers import (
    ImportStats,
    ImportSummary,
    TranscriptImportError,
    default_events_path,
    import_transcript,
    validate_session_id,
)

ObserveHook = Callable[[str, Path, int], None]
"""``observe_after_import(session_id, events_path, last_seq)``: observe the imported session."""

_POSTFIX_EVERY = 256


class FormatChoice(StrEnum):
    """Transcript formats accepted by ``--format``."""

    pi = "pi"
    claude_code = "claude-code"
    codex = "codex"


class _ProgressBar:
    """A live count on stderr (rich, as ``omray watch``): records read, events written, records
    skipped; cleared when the import ends."""

    def __init__(self, enabled: bool) -> None:
        self._progress = Progress(
            TextColumn("import"),
            TextColumn(
                "{task.completed:,} records, {task.fields[events]:,} events, {task.fields[skipped]:,} skipped"
            ),
            TimeElapsedColumn(),
            console=Console(file=sys.stderr),
            transient=True,
            disable=not enabled,
        )
        self._task = self._progress.add_task("import", total=None, events=0, skipped=0)
        self._progress.start()

    def __call__(self, stats: ImportStats) -> None:
        if stats.records % _POSTFIX_EVERY == 0:
            skipped = sum(stats.skipped.values())
            self._progress.update(self._task, completed=stats.records, events=stats.events, skipped=skipped)
        else:
            self._progress.update(self._task, completed=stats.records)

    def close(self) -> None:
        self._progress.stop()


def summary_line(summary: ImportSummary, transcript_format: str) -> str:
    """The one-line human summary of an import (type names and counts only, never content)."""
    skipped = ", ".join(f"{name}={count}" for name, count in summary.skipped.items()) or "none"
    return (
        f"imported {summary.events} events ({summary.turns} turns, last seq {summary.last_seq}) "
        f"from {transcript_format} transcript into {summary.events_path}; unknown records skipped: {skipped}"
    )


def import_command_for(observe: ObserveHook | None) -> Callable[..., None]:
    """The ``omray import`` command; ``observe`` observes the imported session (``None``: the command
    only converts, and says so)."""

    def import_command(
        file: Annotated[Path, typer.Argument(help="Transcript file (JSONL) to convert.", show_default=False)],
        transcript_format: Annotated[
            FormatChoice, typer.Option("--format", help="Transcript format.", case_sensitive=False)
        ],
        session: Annotated[
            str, typer.Option("--session", help="Session id written as run_id on every event.")
        ],
        out: Annotated[
            Path | None,
            typer.Option(
                "--out", help="Events file to write (default: .hatfield/sessions/SESSION/events.jsonl)."
            ),
        ] = None,
        no_observe: Annotated[
            bool, typer.Option("--no-observe", help="Only convert; do not observe.")
        ] = False,
        force: Annotated[bool, typer.Option("--force", help="Replace an existing events file.")] = False,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
        json_output: Annotated[
            bool, typer.Option("--json", help="Print the summary as one JSON object.")
        ] = False,
    ) -> None:
        """Convert a pi, Claude Code or Codex transcript into omray's events.jsonl, then observe it."""
        try:
            validate_session_id(session)
            events_path = out if out is not None else default_events_path(session)
            bar = _ProgressBar(enabled=not quiet and sys.stderr.isatty())
            try:
                summary = import_transcript(
                    transcript_format.value, file, session, events_path, overwrite=force, progress=bar
                )
            finally:
                bar.close()
        except TranscriptImportError as exc:
            typer.echo(f"omray import: {exc}", err=True)
            raise typer.Exit(code=1) from None

        if json_output:
            typer.echo(json.dumps(summary.model_dump(), sort_keys=False))
        else:
            typer.echo(summary_line(summary, transcript_format.value))

        if no_observe or summary.last_seq == 0:
            return
        if observe is None:
            typer.echo("omray import: observation is not available in this build; converted only.", err=True)
            return
        observe(summary.session_id, Path(summary.events_path), summary.last_seq)

    return import_command
