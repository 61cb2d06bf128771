"""The pure retry policy."""

from __future__ import annotations

import pytest

from actors.queue.retry import GiveUpNow, RetryLater, RetryPolicy, RetryPolicyError, decide_retry
from protocol.errors import SettingsError
from protocol.outcomes import JobFailed

FAIL = JobFailed(job_id="j", retryable=True, reason="transient_runtime")
FATAL = JobFailed(job_id="j", retryable=False, reason="invalid_payload")


def test_default_policy_allows_four_attempts_with_doubling_backoff() -> None:
    policy = RetryPolicy()
    assert policy.max_attempts == 4
    assert [decide_retry(n, FAIL, policy) for n in (1, 2, 3)] == [
        RetryLater(delay_s=1.0, next_attempt=2),
        RetryLater(delay_s=2.0, next_attempt=3),
        RetryLater(delay_s=4.0, next_attempt=4),
    ]
    assert decide_retry(4, FAIL, policy) == GiveUpNow(event_reason="retry_exhausted")


def test_non_retryable_failures_are_retried_like_the_reference() -> None:
    # §15: even an invalid payload goes through Messenger's retries before job_failed.
    assert decide_retry(1, FATAL, RetryPolicy()) == RetryLater(delay_s=1.0, next_attempt=2)
    assert decide_retry(4, FATAL, RetryPolicy()) == GiveUpNow(event_reason="retry_exhausted")


def test_opt_in_gives_up_at_once_on_non_retryable() -> None:
    policy = RetryPolicy(give_up_on_non_retryable=True)
    assert decide_retry(1, FATAL, policy) == GiveUpNow(event_reason="invalid_payload")
    assert isinstance(decide_retry(1, FAIL, policy), RetryLater)


def test_delay_is_capped_and_never_overflows() -> None:
    policy = RetryPolicy(max_retries=10_000, base_delay_s=0.5, multiplier=3.0, max_delay_s=10.0)
    assert [policy.delay_before_retry(n) for n in (1, 2, 3, 4)] == [0.5, 1.5, 4.5, 10.0]
    assert policy.delay_before_retry(5_000) == 10.0


def test_zero_retries_gives_up_after_first_attempt() -> None:
    assert decide_retry(1, FAIL, RetryPolicy(max_retries=0)) == GiveUpNow(event_reason="retry_exhausted")


@pytest.mark.parametrize(
    "kwargs", [{"max_retries": -1}, {"base_delay_s": -1.0}, {"max_delay_s": -0.1}, {"multiplier": 0.5}]
)
def test_bad_policy_numbers_raise_a_settings_error(kwargs: dict[str, float]) -> None:
    with pytest.raises(RetryPolicyError) as info:
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, SettingsError)
