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
    ImportFormatMismatchError,
    ImportStats,
    ImportSummary,
    ImportTargetError,
    InvalidImportSessionIdError,
    ProgressCallback,
    RecordConverter,
    TranscriptBuilder,
    TranscriptFormat,
    TranscriptImportError,
    TranscriptSourceError,
    convert_file,
    iter_records,
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
    try:
        return convert_file(
            converter, Path(source), session_id, Path(out), overwrite=overwrite, progress=progress
        )
    except ImportFormatMismatchError as exc:
        raise ImportFormatMismatchError(exc.path, exc.requested, detect_format(Path(source))) from None


DETECT_SAMPLE_RECORDS = 200
"""Records :func:`detect_format` looks at."""


def _recognized_records(converter_class: type[RecordConverter], source: Path) -> int:
    """How many of the first records ``converter_class`` converts or knowingly ignores."""
    builder = TranscriptBuilder("detect", lambda _line: None, "1970-01-01T00:00:00+00:00")
    converter = converter_class(builder, str(source))
    recognized = 0
    try:
        for count, (line_no, record) in enumerate(iter_records(source), start=1):
            before = sum(builder.stats.skipped.values())
            converter.handle(record, line_no)
            recognized += sum(builder.stats.skipped.values()) == before
            if count >= DETECT_SAMPLE_RECORDS:
                break
    except (TranscriptImportError, RecursionError):
        pass  # a record this format cannot read: count what was recognized before it
    return recognized


def detect_format(source: str | Path) -> TranscriptFormat | None:
    """The format whose converter recognizes most of the first records, or ``None`` when none
    (or a tie) does. Reads at most :data:`DETECT_SAMPLE_RECORDS` records; writes nothing."""
    scores = {name: _recognized_records(converter, Path(source)) for name, converter in CONVERTERS.items()}
    best = max(scores.values())
    winners = [name for name, score in scores.items() if score == best]
    return winners[0] if best > 0 and len(winners) == 1 else None


__all__ = [
    "CONVERTERS",
    "FORMATS",
    "SCHEMA_VERSION",
    "ImportFormatError",
    "ImportFormatMismatchError",
    "ImportStats",
    "ImportSummary",
    "ImportTargetError",
    "InvalidImportSessionIdError",
    "ProgressCallback",
    "TranscriptFormat",
    "TranscriptImportError",
    "TranscriptSourceError",
    "default_events_path",
    "detect_format",
    "import_transcript",
    "validate_session_id",
]
