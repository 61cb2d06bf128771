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


class StoreFileReplacedError(StorageError):
    """The database file was removed or replaced while a write ran: that write is not in the file
    now at the path, so it did not happen (the next write opens, or creates, the file there)."""


class MigrationError(StorageError):
    """The database schema cannot be brought to the version omray needs."""


class EventsFileError(OmrayError):
    """A line of ``events.jsonl`` is corrupt (not a partial last line).

    Says where, never what: the file, the 1-based line number, the line's ``seq`` when it could be
    read (``None`` otherwise) and ``after_seq``, the seq of the last good event before the line
    (0 when there is none). ``reason`` is a fixed phrase with field names and seqs, never content.
    """

    def __init__(
        self, path: str, line_no: int, reason: str, *, seq: int | None = None, after_seq: int = 0
    ) -> None:
        self.path = path
        self.line_no = line_no
        self.reason = reason
        self.seq = seq
        self.after_seq = after_seq
        where = f"seq {seq}" if seq is not None else f"after seq {after_seq}"
        super().__init__(f"corrupt events line {line_no} ({where}) in {path!r}: {reason}")

    def location(self) -> dict[str, str | int | None]:
        """Where the corrupt line is, safe to log and to put in a runtime event."""
        return {"path": self.path, "line_no": self.line_no, "seq": self.seq, "after_seq": self.after_seq}


class EventsUnreadableError(OmrayError):
    """An ``events.jsonl`` exists but cannot be opened or read (permissions, a directory, an I/O error)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"cannot read events file {path!r} ({reason})")


class EventsMissingError(OmrayError):
    """A job's ``events.jsonl`` does not exist (removed, moved, or not written yet)."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"events file {path!r} does not exist")


class EventsMismatchError(OmrayError):
    """A job's ``events.jsonl`` holds events of another session than the job's.

    Names the session ids and the seq (ids, never content); retrying cannot help until the file or
    the job's events path is fixed.
    """

    def __init__(self, path: str, line_no: int, session_id: str, found_session_id: str, seq: int) -> None:
        self.path = path
        self.line_no = line_no
        self.session_id = session_id
        self.found_session_id = found_session_id
        self.seq = seq
        super().__init__(
            f"events file {path!r} of session {session_id!r} holds an event of session "
            f"{found_session_id!r} at line {line_no} (seq {seq})"
        )


class InvalidPayloadError(OmrayError, ValueError):
    """A job payload or tool argument object failed validation."""


class BudgetReachedError(OmrayError):
    """The project's daily model budget is used up: the job waits in its lane, held by the queue,
    until ``until`` (the next UTC day) or until the cap is raised. Not a failure: nothing was sent.

    ``reason`` is ``budget_tokens`` or ``budget_usd``; ``spent`` and ``cap`` are counts (tokens, or
    US dollars), never text. ``settings_fingerprint`` is set by the job's handler: the settings the
    budget said no under (a job accepted under other settings re-checks the hold at once).
    """

    def __init__(self, reason: str, until: float, spent: float, cap: float) -> None:
        self.reason = reason
        self.until = until
        self.spent = spent
        self.cap = cap
        self.settings_fingerprint: str | None = None
        key = "daily_usd" if reason == "budget_usd" else "daily_tokens"
        super().__init__(
            f"the daily model budget budget.{key} ({cap:g}) is used up ({spent:g} spent today, UTC)"
        )


class PromptOverCapError(OmrayError):
    """One model call would be sent more prompt tokens than ``budget.max_prompt_tokens``; it was not sent."""

    def __init__(self, prompt_tokens: int, cap: int) -> None:
        self.prompt_tokens = prompt_tokens
        self.cap = cap
        super().__init__(
            f"a model call of {prompt_tokens} prompt tokens exceeds budget.max_prompt_tokens ({cap})"
        )


class RuntimeNotRunningError(OmrayError):
    """No omray runtime is reachable; jobs are never run inline in the caller."""


def clause(error: BaseException | str) -> str:
    """The message of ``error`` without its closing period, to go on with in a longer sentence
    (``f"{clause(exc)}. Fix it ..."`` never reads ``... 1000000000.. Fix it``)."""
    return str(error).rstrip().rstrip(".").rstrip()
