"""Every settings key omray knows, and the check that refuses any other (issue 40 item 2).

The original ignores unknown keys; omray refuses them, because a misspelt key (``modle``,
``observe_afer_tokens``, a misspelt ``observational_memroy`` block) would otherwise run the
defaults while the user believes their setting is in use. The keys the original reads but ignores
(``observer.model``, ``*.thinking_level``, ``pools.reflections_max_tokens``,
``reflector.context_window_ratio``) stay accepted, with no effect, so a Hatfield settings file
works as-is. The error names the key's full path and the nearest known key; it never shows a value.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Final

from protocol.errors import SettingsError

Schema = Mapping[str, "Schema | None"]
"""Known keys of one mapping; a key's schema is ``None`` for a value of any shape, or the schema of
the mapping it holds. The key :data:`NAMED` stands for keys the user chooses (provider names)."""

NAMED: Final[str] = "*"

_PROVIDER: Final[Schema] = dict.fromkeys(
    ("base_url", "api_key_env", "context_window", "timeout_s", "command", "max_budget_usd")
)
_EMBEDDING: Final[Schema] = dict.fromkeys(
    ("base_url", "model_id", "query_prefix", "chunk_bytes", "overlap_bytes", "max_lines", "batch_size")
)
_RERANKER: Final[Schema] = dict.fromkeys(
    ("base_url", "model_id", "batch_size", "document_characters", "min_score")
)

SETTINGS_SCHEMA: Final[Schema] = {
    "model": None,
    "storage": {"database": None, "node": None, "node_resource": None},
    "observer": dict.fromkeys(
        (
            "context_window_ratio",
            "renderer_version",
            "schema_version",
            "observe_after_tokens",
            "pressure_context_fill",
            "idle_flush_seconds",
            "model",  # read and ignored by the original
            "thinking_level",  # read and ignored by the original
        )
    ),
    "reflector": dict.fromkeys(
        (
            "schema_version",
            "reflect_after_observation_tokens",
            "model",  # the three below: read and ignored by the original
            "thinking_level",
            "context_window_ratio",
        )
    ),
    "pools": dict.fromkeys(("observations_max_tokens", "reflections_max_tokens")),
    "semantic": {"embedding_api": _EMBEDDING, "reranker_api": _RERANKER, "no_match": None},
    "providers": {NAMED: _PROVIDER},
    "tokens": {"encoding": None},
    "prices": {"currency": None, "models": {NAMED: dict.fromkeys(("prompt", "cached_prompt", "completion"))}},
    "privacy": {"redact_patterns": None},
    "budget": dict.fromkeys(("daily_tokens", "daily_usd", "max_prompt_tokens")),
}
"""The ``observational_memory`` block's keys (README "Settings", docs/api.md)."""

BLOCK_NAME: Final[str] = "observational_memory"
"""The block's name in a settings document (what a misspelt top-level key is compared with)."""

_SHOWN: Final[int] = 60
"""Characters of an unknown key shown in the error (a key is never a secret, but may be long)."""


def _shown(key: object) -> str:
    return repr(key)[:_SHOWN]


def _nearest(key: object, known: list[str]) -> str | None:
    if not isinstance(key, str):
        return None
    found = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_key_message(where: str, key: object, known: list[str]) -> str:
    """``<where>.<key> is not a setting; did you mean <where>.<nearest>?`` (or the keys known there);
    ``where`` empty for a document's top level."""
    prefix = f"{where}." if where else ""
    name = key[:_SHOWN] if isinstance(key, str) else _shown(key)
    head = f"{prefix}{name} is not a setting"
    nearest = _nearest(key, known)
    if nearest is not None:
        return f"{head}; did you mean {prefix}{nearest}? Nothing was changed."
    return f"{head}; the keys here are {', '.join(sorted(known))}. Nothing was changed."


def check_known_keys(
    block: Mapping[Any, Any], schema: Schema = SETTINGS_SCHEMA, where: str = BLOCK_NAME
) -> None:
    """Raise :class:`SettingsError` naming the first key of ``block`` (depth first, in file order)
    that ``schema`` does not know, with the nearest known key."""
    named = schema.get(NAMED, False)
    for key, value in block.items():
        if named is not False:
            child: Schema | None = named  # type: ignore[assignment]
            path = f"{where}.{key}" if isinstance(key, str) else where
        elif isinstance(key, str) and key in schema:
            child = schema[key]
            path = f"{where}.{key}"
        else:
            raise SettingsError(unknown_key_message(where, key, [k for k in schema if k != NAMED]))
        if child is not None and isinstance(value, Mapping):
            check_known_keys(value, child, path)


def misspelt_block(keys: list[object]) -> str | None:
    """The one of ``keys`` (a document's, or ``extensions.settings``') that is a misspelling of
    :data:`BLOCK_NAME` and no setting of the block itself, if any."""
    for key in keys:
        if isinstance(key, str) and key not in SETTINGS_SCHEMA and _nearest(key, [BLOCK_NAME]) is not None:
            return key
    return None
