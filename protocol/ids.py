"""Typed identifiers.

Memory ids are lowercase SHA-256 hex digests derived from content (see ``protocol.identities``),
so the same memory always gets the same id and a redelivered job never duplicates anything.
"""

from __future__ import annotations

import re
from typing import Annotated, Final

from pydantic import AliasChoices, StringConstraints

Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
"""A full lowercase SHA-256 hex digest (64 characters)."""

ObservationId = Sha256Hex
"""Id of one observation: ``sha256(canonical observation-v1 object)``."""

ReflectionId = Sha256Hex
"""Id of one reflection: ``sha256(canonical reflection-v1 object)``."""

GenerationId = Sha256Hex
"""Id of one memory generation: ``sha256(canonical threshold-generation-v1 object)``."""

SessionId = Annotated[str, StringConstraints(min_length=1)]
"""A session (run) id; always a string, even when it looks like a number (``"5"``)."""

MemoryIdPrefix = Annotated[str, StringConstraints(pattern=r"^[a-f0-9]{12,64}$")]
"""A full id or a unique prefix of 12..64 lowercase hex characters, as accepted by ``recall``."""

DISPLAY_ID_LENGTH = 12
"""Length of the display ids shown in compaction text, views and search results."""

FULL_ID_LENGTH: Final[int] = 64
"""Length of a full memory id; shorter ids are prefixes."""

FULL_ID: Final = re.compile(r"^[0-9a-f]{64}\Z")
"""The whole text is a full memory id (:data:`Sha256Hex` for plain ``re``: nothing may follow)."""

ID_OR_PREFIX: Final = re.compile(r"^[a-f0-9]{12,64}\Z")
"""The whole text is a full memory id or a prefix of at least :data:`DISPLAY_ID_LENGTH` characters
(:data:`MemoryIdPrefix` for plain ``re``)."""


def display_id(memory_id: str) -> str:
    """The short display form of a memory id: lowercase, first 12 characters."""
    return memory_id.lower()[:DISPLAY_ID_LENGTH]


SESSION_ID_ALIASES = AliasChoices("session_id", "run_id")
"""Input names of a public ``session_id`` field: ``run_id``, its name in earlier releases, still loads
(old callers, payloads already stored in the queue's file); output always says ``session_id``."""
