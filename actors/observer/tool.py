"""The ``record_observations`` tool handler for one Observer agent run (reference §7.7).

Pure: no I/O. One handler serves one chunk part: it accepts observations across several tool calls,
checks every cited ref against the part's own ``[Source entry id: ...]`` labels, and answers each call
with a receipt. Nothing is written here; the caller commits :meth:`RecordObservationsHandler.to_records`
together with the part's coverage row in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from actors.observer.packer import ChunkPart
from protocol.errors import OmrayError
from protocol.identities import content_hash, observation_id
from protocol.ids import ObservationId
from protocol.records import TIMESTAMP_PATTERN, ObservationRecord, Relevance, SourceRef
from protocol.tools import (
    ObservationDraft,
    ObservationReceipt,
    invalid_observations_receipt,
    observation_items,
    observation_receipt,
    parse_observation_draft,
)


class PartMismatchError(OmrayError):
    """Accepted observations were paired with a chunk part of another session or schema version."""


class AcceptedObservation(BaseModel):
    """An observation accepted during one agent run, before it is tied to its part's range."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    observation_id: ObservationId
    """Content-derived id (``observation-v1``)."""
    content: str
    """Trimmed single-line text."""
    content_hash: str
    """``sha256(content)``."""
    relevance: Relevance
    """Observer's rating."""
    timestamp: str = Field(pattern=TIMESTAMP_PATTERN)
    """When it happened, ``YYYY-MM-DD HH:MM``."""
    source_refs: tuple[SourceRef, ...]
    """Normalized cited refs, all among the part's allowed refs."""
    token_count: int = Field(ge=0)
    """Token count of ``content``."""


def _has_boolean_seq(item: Mapping[str, Any]) -> bool:
    """JSON ``true``/``false`` is not a numeric seq, though pydantic's lax ints would take it as 1/0."""
    refs = item.get("source_refs")
    if not isinstance(refs, list):
        return False
    return any(isinstance(ref, Mapping) and isinstance(ref.get("seq"), bool) for ref in refs)


class RecordObservationsHandler:
    """Accumulates accepted observations over the tool calls of one agent run.

    Guarantees: a call whose arguments are unusable, or whose every item is rejected, changes nothing;
    an id accepted once is counted as a duplicate afterwards; accepted observations keep their first
    acceptance order. Not thread-safe: one handler per agent run.
    """

    def __init__(
        self,
        session_id: str,
        observer_schema_version: str,
        allowed_source_refs: Iterable[SourceRef],
        count_tokens: Callable[[str], int],
        observer_model: str,
    ) -> None:
        self.session_id = session_id
        self.observer_schema_version = observer_schema_version
        self.observer_model = observer_model
        self._allowed = frozenset((ref.run_id, ref.seq) for ref in allowed_source_refs)
        self._count_tokens = count_tokens
        self._accepted: dict[str, AcceptedObservation] = {}

    def handle(self, arguments: object) -> ObservationReceipt:
        """Process one ``record_observations`` call and return the receipt for the model."""
        items = observation_items(arguments) if isinstance(arguments, Mapping) else None
        if items is None:
            return invalid_observations_receipt(total=len(self._accepted))
        added: dict[str, AcceptedObservation] = {}
        duplicates = rejected = 0
        for item in items:
            draft = self._valid_draft(item)
            if draft is None:
                rejected += 1
                continue
            accepted = self._accept(draft)
            if accepted.observation_id in self._accepted or accepted.observation_id in added:
                duplicates += 1
            else:
                added[accepted.observation_id] = accepted
        # State changes only once the whole call has been read.
        self._accepted.update(added)
        return observation_receipt(
            added=len(added), duplicates=duplicates, rejected=rejected, total=len(self._accepted)
        )

    def accepted_drafts(self) -> list[AcceptedObservation]:
        """Observations accepted so far, in acceptance order."""
        return list(self._accepted.values())

    def to_records(self, part: ChunkPart, covered_at: str) -> list[ObservationRecord]:
        """The accepted observations as rows of ``part`` (its normalized range and chunk key)."""
        if part.session_id != self.session_id or part.observer_schema_version != self.observer_schema_version:
            raise PartMismatchError(
                f"part {part.coverage_key!r} belongs to run {part.session_id!r} schema "
                f"{part.observer_schema_version!r}, not run {self.session_id!r} schema "
                f"{self.observer_schema_version!r}"
            )
        return [
            ObservationRecord(
                observation_id=accepted.observation_id,
                session_id=self.session_id,
                boundary_key=part.chunk_key,
                source_start_seq=part.source_start_seq,
                source_end_seq=part.source_end_seq,
                source_refs=accepted.source_refs,
                content=accepted.content,
                content_hash=accepted.content_hash,
                relevance=accepted.relevance,
                timestamp=accepted.timestamp,
                token_count=accepted.token_count,
                observer_model=self.observer_model,
                observer_schema_version=self.observer_schema_version,
                created_at=covered_at,
            )
            for accepted in self._accepted.values()
        ]

    def _valid_draft(self, item: object) -> ObservationDraft | None:
        if isinstance(item, Mapping) and _has_boolean_seq(item):
            return None
        draft = parse_observation_draft(item)
        if draft is None or not draft.cites_only(self._allowed):
            return None
        return draft

    def _accept(self, draft: ObservationDraft) -> AcceptedObservation:
        return AcceptedObservation(
            observation_id=observation_id(
                self.session_id,
                self.observer_schema_version,
                draft.timestamp,
                draft.content,
                draft.source_refs,
            ),
            content=draft.content,
            content_hash=content_hash(draft.content),
            relevance=draft.relevance,
            timestamp=draft.timestamp,
            source_refs=draft.source_refs,
            token_count=self._count_tokens(draft.content),
        )
