"""Transcript importers: other agents' session files -> omray ``events.jsonl`` (reference §2.3, §7.4).

Use :func:`import_transcript`; the formats are ``pi``, ``claude-code`` and ``codex``.
"""

from __future__ import annotations

from pathlib import Path

from persistence.importers.claude_code import ClaudeCodeConverter
from persistence.importers.codex import CodexConverter
from persistence.importers.common import (
    SCHEMA_VERSION,
    ImportFormatError,
    ImportStats,
    ImportSummary,
    ImportTargetError,
    InvalidImportSessionIdError,
    ProgressCallback,
    RecordConverter,
    TranscriptFormat,
    TranscriptImportError,
    TranscriptSourceError,
    convert_file,
    validate_session_id,
)
from persistence.importers.pi import PiConverter

CONVERTERS: dict[TranscriptFormat, type[RecordConverter]] = {
    "pi": PiConverter,
    "claude-code": ClaudeCodeConverter,
    "codex": CodexConverter,
}
"""The converter of each supported format."""

FORMATS: tuple[TranscriptFormat, ...] = tuple(CONVERTERS)
"""Supported format names, in CLI order."""


def default_events_path(session_id: str, base_dir: str | Path = ".") -> Path:
    """Where an import writes when no output path is given: ``.hatfield/sessions/<id>/events.jsonl``
    (the layout ``OmrayClient.events_path`` reads)."""
    return Path(base_dir) / ".hatfield" / "sessions" / validate_session_id(session_id) / "events.jsonl"


def import_transcript(
    transcript_format: TranscriptFormat,
    source: str | Path,
    session_id: str,
    out: str | Path,
    *,
    overwrite: bool = False,
    progress: ProgressCallback | None = None,
) -> ImportSummary:
    """Convert the transcript at ``source`` into the events file ``out`` (written atomically).

    Raises :class:`ImportFormatError` (file and line, no content) for a malformed line,
    :class:`TranscriptSourceError` when the source cannot be read and :class:`ImportTargetError`
    when ``out`` exists and ``overwrite`` is false; nothing is left at ``out`` on failure.
    """
    converter = CONVERTERS[transcript_format]
    return convert_file(
        converter, Path(source), session_id, Path(out), overwrite=overwrite, progress=progress
    )


__all__ = [
    "CONVERTERS",
    "FORMATS",
    "SCHEMA_VERSION",
    "ImportFormatError",
    "ImportStats",
    "ImportSummary",
    "ImportTargetError",
    "InvalidImportSessionIdError",
    "ProgressCallback",
    "TranscriptFormat",
    "TranscriptImportError",
    "TranscriptSourceError",
    "default_events_path",
    "import_transcript",
    "validate_session_id",
]
