"""The queue's pure retry policy: after a failed attempt, retry after a delay or give up.

The original host (reference §2.4, §15) retries *every* failing job up to 3 times (4 attempts in
all), with exponential backoff, then emits ``extension_agent.job_failed``. Even an invalid payload
is retried there. omray does the same by default: a worker's ``retryable=False`` is recorded (logs,
metrics) but does not cut the retries short unless a deployment opts in with
``RetryPolicy(give_up_on_non_retryable=True)``.

Deterministic: no jitter, no clock; the caller adds the delay to its own ``now``.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.errors import SettingsError
from protocol.outcomes import REASON_RETRY_EXHAUSTED, JobFailed


class RetryPolicyError(SettingsError):
    """A retry policy was built with out-of-range numbers."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How many times, and how long after, a failing job is tried again.

    The delay before retry ``n`` (1-based) is ``base_delay_s * multiplier ** (n - 1)``, capped at
    ``max_delay_s``: 1 s, 2 s, 4 s with the defaults (the host transport's 1 s × 2 strategy).
    """

    max_retries: int = 3
    """Retries after the first attempt (reference §2.4: 3, so 4 attempts)."""
    base_delay_s: float = 1.0
    """Delay before the first retry, in seconds."""
    multiplier: float = 2.0
    """Factor applied to the delay for each further retry."""
    max_delay_s: float = 60.0
    """Upper bound of any single delay, in seconds."""
    give_up_on_non_retryable: bool = False
    """omray opt-in: a ``retryable=False`` failure gives up at once (off: the reference retries all)."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise RetryPolicyError(f"max_retries must be >= 0, got {self.max_retries!r}")
        if self.base_delay_s < 0 or self.max_delay_s < 0:
            raise RetryPolicyError(
                f"delays must be >= 0, got base={self.base_delay_s!r} max={self.max_delay_s!r}"
            )
        if self.multiplier < 1:
            raise RetryPolicyError(f"multiplier must be >= 1, got {self.multiplier!r}")

    @property
    def max_attempts(self) -> int:
        """Attempts allowed in total (first attempt + retries)."""
        return self.max_retries + 1

    def delay_before_retry(self, retry_number: int) -> float:
        """Seconds to wait before retry ``retry_number`` (1-based)."""
        exponent = max(retry_number - 1, 0)
        try:
            delay = self.base_delay_s * self.multiplier**exponent
        except OverflowError:
            return self.max_delay_s
        return min(delay, self.max_delay_s)


@dataclass(frozen=True, slots=True)
class RetryLater:
    """Try the job again once ``delay_s`` seconds have passed."""

    delay_s: float
    """Backoff before the next attempt, in seconds."""
    next_attempt: int
    """Number (1-based) of the attempt that will follow."""


@dataclass(frozen=True, slots=True)
class GiveUpNow:
    """Stop trying: the job leaves the queue as failed and one job-failed event is emitted."""

    event_reason: str
    """``retry_exhausted``, or the failure's own category when the policy gave up early."""


RetryDecision = RetryLater | GiveUpNow
"""What to do after a failed attempt."""


def decide_retry(attempt: int, failure: JobFailed, policy: RetryPolicy) -> RetryDecision:
    """Decide what follows the failure of attempt number ``attempt`` (1-based) of a job."""
    if policy.give_up_on_non_retryable and not failure.retryable:
        return GiveUpNow(event_reason=failure.reason)
    if attempt >= policy.max_attempts:
        return GiveUpNow(event_reason=REASON_RETRY_EXHAUSTED)
    return RetryLater(delay_s=policy.delay_before_retry(attempt), next_attempt=attempt + 1)
