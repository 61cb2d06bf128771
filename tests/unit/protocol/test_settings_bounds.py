"""Every duration and threshold of the settings is finite and bounded; a bad one is a typed error
naming its key (``observer.idle_flush_seconds: .inf`` held a session's tail and ``wait_idle`` forever)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from persistence.settings.file import load_settings
from persistence.settings.parse import settings_from_mapping
from protocol.errors import SettingsError
from protocol.settings import OmSettings
from protocol.settings_limits import (
    MAX_BATCH_SIZE,
    MAX_CHUNK_BYTES,
    MAX_CHUNK_LINES,
    MAX_CONTEXT_WINDOW,
    MAX_IDLE_FLUSH_SECONDS,
    MAX_PRICE,
    MAX_PROVIDER_TIMEOUT_S,
    MAX_TOKEN_THRESHOLD,
)

NON_FINITE = st.sampled_from([math.inf, -math.inf, math.nan])
EMBEDDING = {"model_id": "builtin/all-minilm-l6-v2"}
RERANKER = {"base_url": "http://127.0.0.1:1", "model_id": "r"}


def _observer(key: str) -> Callable[[object], dict[str, Any]]:
    return lambda value: {"observer": {key: value}}


def _provider(key: str) -> Callable[[object], dict[str, Any]]:
    return lambda value: {
        "providers": {"p": {"base_url": "http://127.0.0.1:1/v1", "context_window": 1000, key: value}}
    }


def _embedding(key: str) -> Callable[[object], dict[str, Any]]:
    return lambda value: {"semantic": {"embedding_api": {**EMBEDDING, key: value}}}


def _reranker(key: str) -> Callable[[object], dict[str, Any]]:
    return lambda value: {"semantic": {"embedding_api": EMBEDDING, "reranker_api": {**RERANKER, key: value}}}


def _price(key: str) -> Callable[[object], dict[str, Any]]:
    return lambda value: {"prices": {"models": {"a/b": {"prompt": 1, "completion": 1, key: value}}}}


FLOAT_KEYS: list[tuple[str, Callable[[object], dict[str, Any]], float, bool]] = [
    # (name in the error, block builder, upper bound, whether the upper bound itself is allowed)
    ("observer.idle_flush_seconds", _observer("idle_flush_seconds"), MAX_IDLE_FLUSH_SECONDS, True),
    ("observer.pressure_context_fill", _observer("pressure_context_fill"), 1.0, True),
    ("context_window_ratio", _observer("context_window_ratio"), 1.0, False),
    ("providers.p.timeout_s", _provider("timeout_s"), MAX_PROVIDER_TIMEOUT_S, True),
    ("prices.models['a/b']", _price("prompt"), MAX_PRICE, True),
    ("prices.models['a/b']", _price("completion"), MAX_PRICE, True),
    ("prices.models['a/b']", _price("cached_prompt"), MAX_PRICE, True),
]
INT_KEYS: list[tuple[str, Callable[[object], dict[str, Any]], int]] = [
    ("observer.observe_after_tokens", _observer("observe_after_tokens"), MAX_TOKEN_THRESHOLD),
    (
        "reflector.reflect_after_observation_tokens",
        lambda v: {"reflector": {"reflect_after_observation_tokens": v}},
        MAX_TOKEN_THRESHOLD,
    ),
    (
        "pools.observations_max_tokens",
        lambda v: {"pools": {"observations_max_tokens": v}},
        MAX_TOKEN_THRESHOLD,
    ),
    ("providers.p.context_window", _provider("context_window"), MAX_CONTEXT_WINDOW),
    ("semantic chunk_bytes", _embedding("chunk_bytes"), MAX_CHUNK_BYTES),
    ("semantic max_lines", _embedding("max_lines"), MAX_CHUNK_LINES),
    ("semantic batch_size", _embedding("batch_size"), MAX_BATCH_SIZE),
    ("semantic batch_size", _reranker("batch_size"), MAX_BATCH_SIZE),
    ("semantic document_characters", _reranker("document_characters"), MAX_CHUNK_BYTES),
]


def _refused(block: dict[str, Any], name: str) -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping(block)
    assert name in str(info.value)


@given(st.sampled_from(FLOAT_KEYS), NON_FINITE)
def test_non_finite_durations_and_thresholds_are_refused_by_name(
    case: tuple[str, Callable[[object], dict[str, Any]], float, bool], value: float
) -> None:
    name, build, _maximum, _inclusive = case
    _refused(build(value), name)


@given(st.sampled_from(FLOAT_KEYS), st.floats(min_value=1.0, max_value=1e300))
def test_numbers_past_their_bound_are_refused_by_name(
    case: tuple[str, Callable[[object], dict[str, Any]], float, bool], factor: float
) -> None:
    name, build, maximum, inclusive = case
    value = maximum * factor
    if inclusive and value == maximum:
        value = math.nextafter(maximum, math.inf)
    _refused(build(value), name)


@given(st.sampled_from(INT_KEYS), st.integers(min_value=1, max_value=10**30))
def test_integers_past_their_bound_are_refused_by_name(
    case: tuple[str, Callable[[object], dict[str, Any]], int], excess: int
) -> None:
    name, build, maximum = case
    _refused(build(maximum + excess), name)


@given(st.sampled_from(INT_KEYS), NON_FINITE)
def test_non_finite_integers_are_refused_or_become_a_bounded_value(
    case: tuple[str, Callable[[object], dict[str, Any]], int], value: float
) -> None:
    name, build, maximum = case
    try:
        settings = settings_from_mapping(build(value))
    except SettingsError as exc:
        assert name in str(exc)
        return
    # PHP casts a non-finite float to 0 (the original's reflector and pool thresholds): 1 then.
    assert settings.reflect_after_observation_tokens <= maximum
    assert settings.observations_max_tokens <= maximum


@given(st.floats(min_value=0.001, max_value=MAX_IDLE_FLUSH_SECONDS))
def test_any_idle_flush_within_bounds_is_kept(value: float) -> None:
    assert settings_from_mapping({"observer": {"idle_flush_seconds": value}}).idle_flush_seconds == value


@pytest.mark.parametrize("text", [".inf", ".nan", "-.inf", "1e400", "86401"])
def test_a_settings_file_with_an_endless_idle_flush_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "omray.yaml"
    path.write_text(f"observational_memory:\n  observer:\n    idle_flush_seconds: {text}\n")
    with pytest.raises(SettingsError, match=r"observer\.idle_flush_seconds"):
        load_settings(path)


@pytest.mark.parametrize("field", ["idle_flush_seconds", "pressure_context_fill", "context_window_ratio"])
def test_the_model_itself_refuses_non_finite_values(field: str) -> None:
    for value in (math.inf, math.nan):
        with pytest.raises(ValueError):
            OmSettings.model_validate({field: value})
