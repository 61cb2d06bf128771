"""Parsing the ``observational_memory`` settings block into :class:`protocol.settings.OmSettings`
(reference §3, §14.1).

:func:`settings_from_mapping` takes the block as the YAML loader produced it and applies the
original's defaults, coercions, ignored keys and error messages, plus omray's own keys
(``providers``, ``tokens``), with every duration and threshold finite and bounded
(:mod:`protocol.settings_limits`). :func:`extract_om_block` finds the block in a whole settings
document and :func:`apply_overrides` applies ``KEY=VALUE`` overrides. Pure functions: reading files
is :mod:`persistence.settings.file`'s job.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from persistence.settings.budget import budget_from_mapping, prices_from_mapping
from persistence.settings.keys import BLOCK_NAME, check_known_keys, misspelt_block, unknown_key_message
from protocol import settings_limits as limits
from protocol.errors import SettingsError
from protocol.placement import storage_placement
from protocol.redact import compile_custom_patterns
from protocol.settings import (
    ANTHROPIC_PROVIDER,
    ANTHROPIC_PROVIDER_SETTINGS,
    BASE_URL_MESSAGE,
    BUILTIN_EMBEDDING_BATCH_SIZE,
    BUILTIN_EMBEDDING_MODEL,
    BUILTIN_MODEL,
    BUILTIN_PROVIDER,
    BUILTIN_PROVIDER_SETTINGS,
    CLAUDE_CODE_PROVIDER,
    CLAUDE_CODE_PROVIDER_SETTINGS,
    CODEX_PROVIDER,
    CODEX_PROVIDER_SETTINGS,
    DEFAULT_CONTEXT_WINDOW_RATIO,
    DEFAULT_DATABASE,
    DEFAULT_IDLE_FLUSH_SECONDS,
    DEFAULT_OBSERVATIONS_MAX_TOKENS,
    DEFAULT_OBSERVE_AFTER_TOKENS,
    DEFAULT_PRESSURE_CONTEXT_FILL,
    DEFAULT_PROVIDER_TIMEOUT_S,
    DEFAULT_REFLECT_AFTER_OBSERVATION_TOKENS,
    DEFAULT_VERSION,
    TOKEN_ENCODINGS,
    EmbeddingApiSettings,
    OmSettings,
    ProviderSettings,
    RerankerApiSettings,
    SemanticSettings,
    TokenEncoding,
)

RATIO_MESSAGE = "context_window_ratio must satisfy 0 < ratio < 1."
SEMANTIC_EMBEDDING_MESSAGE = "observational_memory.semantic requires embedding_api."
RERANKER_MAPPING_MESSAGE = "semantic.reranker_api must be a mapping."
MIN_SCORE_MESSAGE = "semantic.reranker_api.min_score must be a finite number."
NO_MATCH_SETTING_MESSAGE = "semantic.no_match must be true or false."
CHUNK_OVERLAP_MESSAGE = (
    "chunk_bytes must be at least 4; overlap_bytes must be an integer from 0 to chunk_bytes - 1."
)
MODEL_ID_MESSAGE = "semantic API requires a non-empty model_id."

_PHP_NUMERIC_RE = re.compile(
    r"^[ \t\n\r\v\f]*[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?[ \t\n\r\v\f]*$"
)
_PROVIDER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\Z")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_PROVIDER_KEYS = frozenset({"base_url", "api_key_env", "context_window", "timeout_s"})
_CLI_PROVIDER_KEYS = {
    CLAUDE_CODE_PROVIDER: frozenset({"command", "context_window", "timeout_s", "max_budget_usd"}),
    CODEX_PROVIDER: frozenset({"command", "context_window", "timeout_s", "base_url", "api_key_env"}),
}


def _php_number(value: object) -> float | None:
    """PHP ``is_numeric`` plus the cast to a number; ``None`` when not numeric (bools are not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str) and _PHP_NUMERIC_RE.match(value):
        return float(value)
    return None


def _php_int_at_least_one(value: object, default: int, key: str) -> int:
    """A token threshold: a whole number from 1 to :data:`protocol.settings_limits.MAX_TOKEN_THRESHOLD`
    (a numeric string counts; a fraction is cut to its whole part, as the original casts), the default
    when absent. Anything else (zero, negatives, ``.inf``, ``.nan``, text, values past the bound) is a
    :class:`SettingsError` naming ``key``: the original's cast turned them into 1, "act after every
    token", which no one means.
    """
    if value is None:
        return default
    number: float | None = float(value) if isinstance(value, int) and not isinstance(value, bool) else None
    if number is None:
        number = _php_number(value)
    if number is None or not math.isfinite(number) or number < 1 or number > limits.MAX_TOKEN_THRESHOLD:
        raise SettingsError(f"{key} must be a whole number from 1 to {limits.MAX_TOKEN_THRESHOLD}.")
    return int(value) if isinstance(value, int) else int(number)


def _text_or_default(value: object, default: str) -> str:
    """Non-empty strings as given; ints (YAML ``2``) as their decimal form; anything else the default."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip() != "":
        return value
    return default


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def _http_url(value: object) -> str | None:
    """A trimmed HTTP(S) URL with a host and no credentials/query/fragment, trailing ``/`` removed."""
    if not isinstance(value, str) or value.strip() == "":
        return None
    text = value.strip()
    try:
        parts = urlsplit(text)
        _ = parts.port  # raises ValueError on a malformed port
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return None
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        return None
    if "?" in text or "#" in text:
        return None
    return text.rstrip("/")


def _positive_int(block: Mapping[str, Any], key: str, default: int, maximum: int) -> int:
    value = block.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"semantic {key} must be a positive integer.")
    if value > maximum:
        raise SettingsError(f"semantic {key} must be at most {maximum}.")
    return value


def _model_id(block: Mapping[str, Any]) -> str:
    value = block.get("model_id")
    if not isinstance(value, str) or value.strip() == "":
        raise SettingsError(MODEL_ID_MESSAGE)
    return value.strip()


def _base_url(block: Mapping[str, Any]) -> str:
    url = _http_url(block.get("base_url"))
    if url is None:
        raise SettingsError(BASE_URL_MESSAGE)
    return url


def _builtin_model_id(block: Mapping[str, Any]) -> bool:
    value = block.get("model_id")
    return isinstance(value, str) and value.strip() == BUILTIN_EMBEDDING_MODEL


def _min_score(reranker: Mapping[str, Any]) -> float | None:
    if "min_score" not in reranker:
        return None
    value = reranker["min_score"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise SettingsError(MIN_SCORE_MESSAGE)
    return float(value)


DEFAULT_SEMANTIC_BLOCK: Final[Mapping[str, Any]] = {"embedding_api": {"model_id": BUILTIN_EMBEDDING_MODEL}}
"""The ``semantic`` block used when the settings have no ``semantic`` key: hybrid search with the
offline embedder, so a project with no settings file searches by meaning as well as by words."""


def semantic_from_mapping(value: object) -> SemanticSettings | None:
    """The ``semantic`` block (§14.1): ``None``, ``false`` or empty disables it; else every rule, in order."""
    if value is None or value is False or (isinstance(value, Mapping | list | tuple) and len(value) == 0):
        return None
    if not isinstance(value, Mapping) or not isinstance(value.get("embedding_api"), Mapping):
        raise SettingsError(SEMANTIC_EMBEDDING_MESSAGE)
    embedding: Mapping[str, Any] = value["embedding_api"]
    raw_reranker = value.get("reranker_api")
    if raw_reranker is not None and not isinstance(raw_reranker, Mapping):
        raise SettingsError(RERANKER_MAPPING_MESSAGE)
    reranker: Mapping[str, Any] = raw_reranker if raw_reranker is not None else {}
    min_score = _min_score(reranker)
    chunk_bytes = _positive_int(embedding, "chunk_bytes", 1200, limits.MAX_CHUNK_BYTES)
    max_lines = _positive_int(embedding, "max_lines", 80, limits.MAX_CHUNK_LINES)
    # The reference embeds at most 4 chunks per batch (an HTTP endpoint's bound). The offline
    # embedder has no request to bound, and each batch pays fixed index writes, so it defaults to 32.
    batch_size = _positive_int(
        embedding,
        "batch_size",
        BUILTIN_EMBEDDING_BATCH_SIZE if _builtin_model_id(embedding) else 4,
        limits.MAX_BATCH_SIZE,
    )
    # The reranker's integers are checked even without a reranker (their defaults always pass).
    rerank_batch = _positive_int(reranker, "batch_size", 8, limits.MAX_BATCH_SIZE)
    document_characters = _positive_int(reranker, "document_characters", 768, limits.MAX_CHUNK_BYTES)
    overlap = embedding.get("overlap_bytes")
    overlap = 192 if overlap is None else overlap
    if (
        isinstance(overlap, bool)
        or not isinstance(overlap, int)
        or not 0 <= overlap < chunk_bytes
        or chunk_bytes < 4
    ):
        raise SettingsError(CHUNK_OVERLAP_MESSAGE)
    # The offline embedder needs no endpoint; a base_url given anyway is still validated.
    if embedding.get("base_url") is None and _builtin_model_id(embedding):
        base_url: str | None = None
    else:
        base_url = _base_url(embedding)
    prefix = embedding.get("query_prefix")
    embedding_api = EmbeddingApiSettings(
        base_url=base_url,
        model_id=_model_id(embedding),
        query_prefix=prefix.strip() if isinstance(prefix, str) else "",
        chunk_bytes=chunk_bytes,
        overlap_bytes=overlap,
        max_lines=max_lines,
        batch_size=batch_size,
    )
    reranker_api = None
    if raw_reranker is not None:
        reranker_api = RerankerApiSettings(
            base_url=_base_url(reranker),
            model_id=_model_id(reranker),
            batch_size=rerank_batch,
            document_characters=document_characters,
            min_score=min_score,
        )
    no_match = value.get("no_match", True)
    if not isinstance(no_match, bool):
        raise SettingsError(NO_MATCH_SETTING_MESSAGE)
    return SemanticSettings(embedding_api=embedding_api, reranker_api=reranker_api, no_match=no_match)


def _provider_from_mapping(name: object, entry: object) -> ProviderSettings:
    if not isinstance(name, str) or not _PROVIDER_NAME_RE.match(name):
        raise SettingsError(
            f"provider name {name!r} must be letters, digits, '_', '.' or '-' (no '/'), "
            "starting with a letter or digit."
        )
    if name == BUILTIN_PROVIDER:
        raise SettingsError(f"provider name {name!r} is reserved for the built-in model.")
    where = f"providers.{name}"
    if not isinstance(entry, Mapping):
        raise SettingsError(f"{where} must be a mapping.")
    allowed = _CLI_PROVIDER_KEYS.get(name, _PROVIDER_KEYS)
    unknown = sorted(str(key) for key in entry if key not in allowed)
    if unknown:
        raise SettingsError(f"{where} has unknown keys {unknown!r}; allowed: {sorted(allowed)!r}.")
    if name in _CLI_PROVIDER_KEYS:
        return _cli_provider(where, entry, CODEX_PROVIDER_SETTINGS if name == CODEX_PROVIDER else None)
    base_url, api_key_env = _endpoint(where, entry)
    if name == ANTHROPIC_PROVIDER:  # the Messages API: every key optional (the SDK's endpoint, its key)
        default = ANTHROPIC_PROVIDER_SETTINGS
        return default.model_copy(
            update={
                "base_url": base_url,
                "api_key_env": api_key_env or default.api_key_env,
                "context_window": _context_window(where, entry.get("context_window", default.context_window)),
                "timeout_s": _timeout(where, entry.get("timeout_s", default.timeout_s)),
            }
        )
    if base_url is None:
        raise SettingsError(f"{where}.base_url must be an HTTP(S) URL with a host and no credentials.")
    context_window = entry.get("context_window")
    if context_window is None:
        raise SettingsError(
            f"{where}.context_window is required: the model's context window in tokens (e.g. 32768), "
            "which sizes what the Observer is sent at once."
        )
    return ProviderSettings(
        name=name,
        kind="openai_compatible",
        base_url=base_url,
        api_key_env=api_key_env,
        context_window=_context_window(where, context_window),
        timeout_s=_timeout(where, entry.get("timeout_s", DEFAULT_PROVIDER_TIMEOUT_S)),
    )


def _endpoint(where: str, entry: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """``base_url`` (``None`` when absent) and ``api_key_env`` of a provider entry."""
    base_url = _http_url(entry.get("base_url")) if "base_url" in entry else None
    if "base_url" in entry and base_url is None:
        raise SettingsError(f"{where}.base_url must be an HTTP(S) URL with a host and no credentials.")
    api_key_env = entry.get("api_key_env")
    # Never echo this value: a user may have pasted the key itself here.
    if api_key_env is not None and (not isinstance(api_key_env, str) or not _ENV_NAME_RE.match(api_key_env)):
        raise SettingsError(f"{where}.api_key_env must be the name of an environment variable, not a key.")
    return base_url, api_key_env


def _context_window(where: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingsError(f"{where}.context_window must be an integer >= 1.")
    if value > limits.MAX_CONTEXT_WINDOW:
        raise SettingsError(f"{where}.context_window must be at most {limits.MAX_CONTEXT_WINDOW}.")
    return value


def _timeout(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise SettingsError(f"{where}.timeout_s must be a number > 0.")  # NaN too
    if not value <= limits.MAX_PROVIDER_TIMEOUT_S:
        raise SettingsError(
            f"{where}.timeout_s must be a finite number <= {limits.MAX_PROVIDER_TIMEOUT_S:g}."
        )
    return float(value)


def _cli_provider(
    where: str, entry: Mapping[str, Any], default: ProviderSettings | None = None
) -> ProviderSettings:
    """``providers.claude-code`` (or ``providers.codex``): the CLI's command, window, timeout and (for
    claude-code) per-call budget, defaults from ``default`` (:data:`CLAUDE_CODE_PROVIDER_SETTINGS`).
    It has no ``base_url`` or ``api_key_env``: the CLI calls the model on its own login."""
    default = default or CLAUDE_CODE_PROVIDER_SETTINGS
    command = entry.get("command", default.command)
    if not isinstance(command, str) or not command.strip() or "\0" in command:
        raise SettingsError(f"{where}.command must be the name or absolute path of the agent's CLI.")
    budget = entry.get("max_budget_usd", default.max_budget_usd)
    if budget is None and default.max_budget_usd is None:
        pass  # codex: the CLI has no per-call budget
    elif budget is None or isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0:
        raise SettingsError(f"{where}.max_budget_usd must be a number of US dollars > 0.")
    elif not budget <= limits.MAX_CLI_BUDGET_USD:
        raise SettingsError(f"{where}.max_budget_usd must be at most {limits.MAX_CLI_BUDGET_USD:g}.")
    base_url, api_key_env = _endpoint(where, entry)
    if api_key_env is not None and base_url is None:
        raise SettingsError(f"{where}.api_key_env needs a base_url: the key of that endpoint.")
    return default.model_copy(
        update={
            "base_url": base_url,
            "api_key_env": api_key_env,
            "command": command.strip(),
            "context_window": _context_window(where, entry.get("context_window", default.context_window)),
            "timeout_s": _timeout(where, entry.get("timeout_s", default.timeout_s)),
            "max_budget_usd": None if budget is None else float(budget),
        }
    )


def _providers_from_mapping(value: object) -> tuple[ProviderSettings, ...]:
    if value is None:
        return (BUILTIN_PROVIDER_SETTINGS,)
    if not isinstance(value, Mapping):
        raise SettingsError("observational_memory.providers must be a mapping of provider name to settings.")
    return (
        BUILTIN_PROVIDER_SETTINGS,
        *(_provider_from_mapping(name, entry) for name, entry in value.items()),
    )


def _token_encoding(value: object) -> TokenEncoding:
    if value is None:
        return "o200k_base"
    if not isinstance(value, Mapping):
        raise SettingsError("observational_memory.tokens must be a mapping.")
    encoding = value.get("encoding", "o200k_base")
    if encoding == "o200k_base":
        return "o200k_base"
    if encoding == "cl100k_base":
        return "cl100k_base"
    raise SettingsError(f"tokens.encoding must be one of {list(TOKEN_ENCODINGS)!r}, got {encoding!r}.")


def _context_window_ratio(observer: Mapping[str, Any]) -> float:
    ratio = _php_number(observer.get("context_window_ratio"))
    if ratio is None:
        return DEFAULT_CONTEXT_WINDOW_RATIO
    if not 0 < ratio < 1:  # also rejects NaN
        raise SettingsError(RATIO_MESSAGE)
    return ratio


def _observer_int(observer: Mapping[str, Any], key: str, default: int) -> int:
    value = observer.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limits.MAX_TOKEN_THRESHOLD:
        raise SettingsError(f"observer.{key} must be an integer from 0 to {limits.MAX_TOKEN_THRESHOLD}.")
    return value


def _observer_number(observer: Mapping[str, Any], key: str, default: float, maximum: float) -> float:
    """A finite number in ``(0, maximum]`` (NaN and infinities are refused), else an error naming ``key``."""
    value = observer.get(key)
    if value is None:
        return default
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= maximum
    ):
        raise SettingsError(f"observer.{key} must be a finite number > 0 and <= {maximum:g}.")
    return float(value)


def _redact_patterns(privacy: object) -> tuple[str, ...]:
    if privacy is None:
        return ()
    if not isinstance(privacy, Mapping):
        raise SettingsError("observational_memory.privacy must be a mapping.")
    return compile_custom_patterns(privacy.get("redact_patterns"))


def settings_from_mapping(data: Mapping[str, Any] | None) -> OmSettings:
    """Build settings from the ``observational_memory`` block (``None`` -> all defaults).

    omray's defaults run with no network and no API key: no ``model`` means :data:`BUILTIN_MODEL`,
    and no ``semantic`` key means hybrid search with the offline embedder
    (:data:`DEFAULT_SEMANTIC_BLOCK`); ``semantic: null`` (or ``false``, or ``{}``) turns hybrid
    search off, as in the original, where it was opt-in.

    Unlike the original, an unknown key at any level is a ``SettingsError`` naming it and the
    nearest known key (:mod:`persistence.settings.keys`); the keys the original reads and ignores
    (``observer.model``, ``reflector.model``, ``*.thinking_level``, ``pools.reflections_max_tokens``,
    ``reflector.context_window_ratio``) are accepted and have no effect.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SettingsError("observational_memory settings must be a mapping.")
    check_known_keys(data)
    storage, observer = _section(data, "storage"), _section(data, "observer")
    reflector, pools = _section(data, "reflector"), _section(data, "pools")

    database = storage.get("database")
    model = data.get("model")
    model = model.strip() if isinstance(model, str) else ""
    data_node, data_node_resource = storage_placement(storage)
    reflect_after = _php_int_at_least_one(
        reflector.get("reflect_after_observation_tokens"),
        DEFAULT_REFLECT_AFTER_OBSERVATION_TOKENS,
        "reflector.reflect_after_observation_tokens",
    )
    prices = prices_from_mapping(data.get("prices"))
    return OmSettings(
        database=database if isinstance(database, str) and database.strip() != "" else DEFAULT_DATABASE,
        data_node=data_node,
        data_node_resource=data_node_resource,
        model=model or BUILTIN_MODEL,
        context_window_ratio=_context_window_ratio(observer),
        renderer_version=_text_or_default(observer.get("renderer_version"), DEFAULT_VERSION),
        observer_schema_version=_text_or_default(observer.get("schema_version"), DEFAULT_VERSION),
        reflector_schema_version=_text_or_default(reflector.get("schema_version"), DEFAULT_VERSION),
        reflect_after_observation_tokens=reflect_after,
        observations_max_tokens=_php_int_at_least_one(
            pools.get("observations_max_tokens"),
            DEFAULT_OBSERVATIONS_MAX_TOKENS,
            "pools.observations_max_tokens",
        ),
        semantic=semantic_from_mapping(data.get("semantic", DEFAULT_SEMANTIC_BLOCK)),
        providers=_providers_from_mapping(data.get("providers")),
        token_encoding=_token_encoding(data.get("tokens")),
        observe_after_tokens=_observer_int(observer, "observe_after_tokens", DEFAULT_OBSERVE_AFTER_TOKENS),
        pressure_context_fill=_observer_number(
            observer, "pressure_context_fill", DEFAULT_PRESSURE_CONTEXT_FILL, maximum=1.0
        ),
        idle_flush_seconds=_observer_number(
            observer, "idle_flush_seconds", DEFAULT_IDLE_FLUSH_SECONDS, maximum=limits.MAX_IDLE_FLUSH_SECONDS
        ),
        prices=prices,
        redact_patterns=_redact_patterns(data.get("privacy")),
        budget=budget_from_mapping(data.get("budget"), reflect_after, prices),
    )


def extract_om_block(doc: Mapping[str, Any], shared: bool = False) -> Mapping[str, Any]:
    """The ``observational_memory`` block of a whole Hatfield settings document, a document with a
    top-level ``observational_memory`` key, or the block itself. A missing block is ``{}``.

    Only the block is strict. A Hatfield document (one with ``extensions``, or any document when
    ``shared``: the file is Hatfield's ``.hatfield/settings.yaml``) holds other tools' keys beside
    it, which omray leaves alone; it is never read as a bare block, so Hatfield's own keys are never
    taken for omray's. In omray's own file a key beside the block is a mistake. A misspelt block name
    is an error everywhere, and so are two blocks (which one was meant?).
    """
    if not isinstance(doc, Mapping):
        raise SettingsError("the settings document must be a mapping.")
    extensions = doc.get("extensions")
    ext_settings = extensions.get("settings") if isinstance(extensions, Mapping) else None
    shared = shared or extensions is not None
    block: object = None
    if isinstance(ext_settings, Mapping) and BLOCK_NAME in ext_settings:
        if BLOCK_NAME in doc:
            raise SettingsError(
                f"the settings document has two {BLOCK_NAME} blocks (at the top level and under "
                f"extensions.settings); keep one. Nothing was changed."
            )
        block = ext_settings[BLOCK_NAME]
    elif BLOCK_NAME in doc:
        block = doc[BLOCK_NAME]
        if not shared:  # omray's own file: nothing but the block is read, so another key is a mistake
            for key in doc:
                if key != BLOCK_NAME:
                    raise SettingsError(unknown_key_message("", key, [BLOCK_NAME]))
    elif shared:
        if isinstance(ext_settings, Mapping):
            _refuse_misspelt_block(list(ext_settings), "extensions.settings.")
        _refuse_misspelt_block(list(doc), "")
    else:
        _refuse_misspelt_block(list(doc), "")
        block = doc
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise SettingsError("observational_memory settings must be a mapping.")
    return block


def _refuse_misspelt_block(keys: list[object], where: str) -> None:
    misspelt = misspelt_block(keys)
    if misspelt is not None:
        raise SettingsError(
            f"{where}{misspelt[:60]} is not a setting; did you mean {where}{BLOCK_NAME}? Nothing was changed."
        )


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    return copy.deepcopy(value)


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _override_value(text: str) -> Any:
    """JSON when ``text`` parses as strict JSON (no NaN/Infinity), else the text itself."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):  # nested too deeply for JSON: validated as text
        return text


def apply_overrides(data: Mapping[str, Any] | None, overrides: list[str]) -> dict[str, Any]:
    """A copy of ``data`` with each ``KEY=VALUE`` applied in order (``KEY`` dotted, ``VALUE`` JSON or text).

    Missing or null intermediate keys become mappings; a non-mapping in the way is an error.
    """
    result: dict[str, Any] = _plain(data) if data is not None else {}
    for number, item in enumerate(overrides, start=1):
        key_text, sep, value_text = item.partition("=")
        # The text is not echoed unless it is a key: a value may be a secret.
        if not sep:
            raise SettingsError(f"override #{number} is malformed: expected KEY=VALUE.")
        path = key_text.strip().split(".")
        if any(part.strip() == "" for part in path):
            raise SettingsError(f"override #{number} key {key_text.strip()!r} is malformed: expected a.b.c.")
        target = result
        for depth, part in enumerate(path[:-1]):
            child = target.get(part)
            if child is None:
                child = target[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: depth + 1])
                raise SettingsError(
                    f"override #{number} cannot set {key_text.strip()!r}: {where!r} is not a mapping."
                )
            target = child
        target[path[-1]] = _override_value(value_text)
    return result
