"""Writing fixture memory through the real Store for the read-service tests."""

from __future__ import annotations

from collections.abc import Sequence

from persistence.writers.store import Store
from protocol.identities import observation_set_hash
from protocol.records import ObservationRecord, ReflectionRecord
from tests.unit.persistence.builders import make_part

_parts: dict[str, int] = {}


def commit(store: Store, observations: Sequence[ObservationRecord], session_id: str | None = None) -> None:
    """Commit observations of one session as the next one-event part of that session."""
    session = session_id if session_id is not None else observations[0].session_id
    seq = _parts.get(f"{store.db_path}:{session}", 0) + 1
    _parts[f"{store.db_path}:{session}"] = seq
    store.commit_observer_part(make_part(session, seq, seq, digest_seed=f"{session}-{seq}"), observations)


def promote(
    store: Store,
    session_id: str,
    reflections: Sequence[ReflectionRecord],
    retained: Sequence[str],
    required_end_seq: int,
    completed_at: str = "2026-07-26T12:00:00+00:00",
    generation_id: str = "e" * 64,
) -> None:
    """Make ``reflections`` and ``retained`` the session's active generation."""
    set_hash = observation_set_hash(session_id, list(retained))
    store.claim_generation(
        generation_id, session_id, set_hash, "local/test", "1", 1, required_end_seq, completed_at
    )
    store.promote_generation(generation_id, session_id, reflections, retained, completed_at)
