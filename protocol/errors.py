"""One error hierarchy for omray.

Every error omray raises on purpose derives from :class:`OmrayError`. Messages name the
offending identifier with ``!r`` and never contain memory text, queries, vectors or model
output, so they are safe to log.
"""

from __future__ import annotations


class OmrayError(Exception):
    """Base class of every error omray raises on purpose."""


class SettingsError(OmrayError, ValueError):
    """A setting is missing, of the wrong type or out of range."""


class ModelSettingsError(SettingsError):
    """``observational_memory.model`` is missing or not an exact ``provider/model`` reference."""


class ConflictError(OmrayError):
    """A content-derived id already exists with different content (deterministic; retrying won't help)."""


class StorageError(OmrayError):
    """The SQLite store could not be opened or configured as required."""


class MigrationError(StorageError):
    """The database schema cannot be brought to the version omray needs."""


class EventsFileError(OmrayError):
    """A line of ``events.jsonl`` is corrupt (not a partial last line)."""

    def __init__(self, path: str, line_no: int, reason: str) -> None:
        self.path = path
        self.line_no = line_no
        self.reason = reason
        super().__init__(f"corrupt events line {line_no} in {path!r}: {reason}")


class EventsUnreadableError(OmrayError):
    """An ``events.jsonl`` exists but cannot be opened or read (permissions, a directory, an I/O error)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot read events file {path!r} ({reason})")


class InvalidPayloadError(OmrayError, ValueError):
    """A job payload or tool argument object failed validation."""


class RuntimeNotRunningError(OmrayError):
    """No omray runtime is reachable; jobs are never run inline in the caller."""
