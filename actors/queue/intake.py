"""What ``dispatch`` and ``dispatch_many`` accept: job envelopes, checked before anything is queued.

Bad input gets :class:`~protocol.errors.InvalidPayloadError` naming only the exception class (never
the payload) and queues nothing: one bad envelope in a ``dispatch_many`` rejects the whole call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from protocol.errors import InvalidPayloadError
from protocol.jobs import JobEnvelope

MAX_DISPATCH_BATCH: Final = 256
"""Most jobs one ``dispatch_many`` call may carry (a client sends what its hooks have waiting)."""


def parse_envelope(envelope: JobEnvelope | Mapping[str, Any]) -> JobEnvelope:
    """One job envelope, validated."""
    try:
        return envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
    except Exception as exc:
        raise InvalidPayloadError(f"invalid job envelope ({type(exc).__name__})") from None


def parse_envelopes(envelopes: Sequence[JobEnvelope | Mapping[str, Any]]) -> list[JobEnvelope]:
    """A list of at most :data:`MAX_DISPATCH_BATCH` envelopes, all valid, in order; else an error."""
    if isinstance(envelopes, str | bytes | Mapping) or not isinstance(envelopes, Sequence):
        raise InvalidPayloadError(
            f"dispatch_many takes a list of job envelopes, not {type(envelopes).__name__}"
        )
    if len(envelopes) > MAX_DISPATCH_BATCH:
        raise InvalidPayloadError(
            f"at most {MAX_DISPATCH_BATCH} jobs per dispatch_many, got {len(envelopes)}"
        )
    jobs: list[JobEnvelope] = []
    for index, envelope in enumerate(envelopes):
        try:
            jobs.append(
                envelope if isinstance(envelope, JobEnvelope) else JobEnvelope.model_validate(envelope)
            )
        except Exception as exc:
            raise InvalidPayloadError(
                f"invalid job envelope at index {index} ({type(exc).__name__}); no job accepted"
            ) from None
    return jobs
