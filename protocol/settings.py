"""omray settings: the shapes of the ``observational_memory`` block of ``.hatfield/settings.yaml``
(reference §3, §14.1).

The models here are immutable and validate their own fields, with every duration and threshold
finite and bounded (:mod:`protocol.settings_limits`). Turning the block as the YAML loader produced
it into these models (the original's defaults, coercions, ignored keys and error messages, plus
omray's ``providers`` and ``tokens``) is :func:`persistence.settings.parse.settings_from_mapping`.
"""

from __future__ import annotations

import json
import math
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from protocol.canonical import sha256_hex
from protocol.errors import ModelSettingsError, SettingsError
from protocol.settings_limits import (
    MAX_BATCH_SIZE,
    MAX_CHUNK_BYTES,
    MAX_CHUNK_LINES,
    MAX_CLI_BUDGET_USD,
    MAX_CONTEXT_WINDOW,
    MAX_DAILY_TOKENS,
    MAX_DAILY_USD,
    MAX_IDLE_FLUSH_SECONDS,
    MAX_PRICE,
    MAX_PROVIDER_TIMEOUT_S,
    MAX_TOKEN_THRESHOLD,
    MIN_PROMPT_CAP,
)

DEFAULT_DATABASE = ".hatfield/extensions-data/observational-memory/om.sqlite"
"""Default ``storage.database`` (relative to the host's working directory)."""
DEFAULT_CONTEXT_WINDOW_RATIO = 0.65
"""Default share of the model's context window one observer part may use."""
DEFAULT_REFLECT_AFTER_OBSERVATION_TOKENS = 40000
"""Default threshold above which the active pool is reflected."""
DEFAULT_OBSERVATIONS_MAX_TOKENS = 30000
"""Default Dropper gate and target."""
DEFAULT_VERSION = "1"
"""Default renderer and schema versions."""
DEFAULT_OBSERVE_AFTER_TOKENS = 8000
"""Default ``observer.observe_after_tokens``: uncovered source tokens that make one observer call."""
DEFAULT_PRESSURE_CONTEXT_FILL = 0.5
"""Default ``observer.pressure_context_fill``: the agent's context fill from which it nears compaction."""
DEFAULT_IDLE_FLUSH_SECONDS = 120.0
"""Default ``observer.idle_flush_seconds``: how long a deferred tail waits for a newer signal."""

DEFAULT_AGENT_MAX_TOOL_CALLS = 16
"""Tool-call budget of the Reflector and the Dropper."""
OBSERVER_MAX_TOOL_CALLS = 6
"""Tool-call budget of the Observer (bounds correction rounds)."""
AGENT_HTTP_MAX_DURATION_SECONDS = 300
"""Wall-clock budget of one agent call, every stage."""

BUILTIN_PROVIDER = "builtin"
"""Name of the provider that runs in-process with no network."""
BUILTIN_MODEL = "builtin/extractive"
"""The embedded default model: used when the settings name no ``model`` (no network, no API key)."""
BUILTIN_CONTEXT_WINDOW = 32768
"""Context window of the built-in model."""
DEFAULT_PROVIDER_TIMEOUT_S = 300.0
"""Default HTTP timeout of a provider, in seconds."""
CLAUDE_CODE_PROVIDER = "claude-code"
"""Name of the provider that runs the installed ``claude`` CLI headless on the user's own login."""
CLAUDE_CODE_CONTEXT_WINDOW = 200_000
"""Default context window of ``claude-code`` models (the Claude models' window)."""
CLAUDE_CODE_COMMAND = "claude"
"""Default ``providers.claude-code.command``: the CLI found on the ``PATH`` of the memory runtime."""
DEFAULT_CLI_MAX_BUDGET_USD = 0.5
"""Default ``providers.claude-code.max_budget_usd``: what one model call may spend (the CLI's own
count, in US dollars; a call on a subscription draws the same amount from its allowance)."""
CODEX_PROVIDER = "codex"
"""Name of the provider that runs the installed ``codex`` CLI (``codex exec``) on the user's own login."""
CODEX_CONTEXT_WINDOW = 200_000
"""Default context window of ``codex`` models."""
CODEX_COMMAND = "codex"
"""Default ``providers.codex.command``."""
DEFAULT_DAILY_TOKENS = 2_000_000
"""Default ``budget.daily_tokens``: prompt plus completion tokens the Observer, Reflector and Dropper
may spend per UTC day and project. Observing a long session (some 160,000 tokens of conversation)
costs about 400,000 prompt tokens at the measured 2.41 prompt tokens per source token
(docs/benchmarks.md), so this is about five long sessions a day."""
DEFAULT_MAX_PROMPT_TOKENS = 100_000
"""Default ``budget.max_prompt_tokens``: the most prompt tokens one model call may be sent. Observer
calls at the default batching send some 10,000-20,000; the cap binds catching up on a backlog (and
the 200,000-token windows of the agent-login providers), and leaves the Reflector room for an active
pool of twice ``reflect_after_observation_tokens`` (40,000)."""
ANTHROPIC_PROVIDER = "anthropic"
"""Name of the provider that calls the Anthropic Messages API with the official SDK (an API key)."""
ANTHROPIC_CONTEXT_WINDOW = 200_000
"""Default context window of ``anthropic`` models."""
ANTHROPIC_API_KEY_ENV = "ANTHROPIC_API_KEY"
"""Default ``providers.anthropic.api_key_env``."""
BUILTIN_EMBEDDING_MODEL = "builtin/all-minilm-l6-v2"
"""``semantic.embedding_api.model_id`` of the offline embedder (all-MiniLM-L6-v2, no ``base_url`` needed)."""
BUILTIN_EMBEDDING_BATCH_SIZE = 32
"""Default chunks per index batch for the offline embedder (endpoints keep the reference's 4)."""

TokenEncoding = Literal["o200k_base", "cl100k_base"]
"""tiktoken encodings omray can count tokens with."""
TOKEN_ENCODINGS: tuple[str, ...] = ("o200k_base", "cl100k_base")
"""Allowed ``tokens.encoding`` values."""

MODEL_REQUIRED_MESSAGE = "observational_memory.model (exact provider/model) is required."
MODEL_FORMAT_MESSAGE = (
    "observational_memory.model must be an exact provider/model reference (provider/model)."
)
CONTEXT_WINDOW_MESSAGE = "context_window must be positive."
BASE_URL_MESSAGE = (
    "semantic base_url must be an HTTP(S) URL with a host and no credentials, query or fragment."
)


class _Settings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class EmbeddingApiSettings(_Settings):
    """OpenAI-compatible ``/v1/embeddings`` endpoint and how memories are chunked for it."""

    base_url: str | None
    """HTTP(S) base URL without a trailing ``/``; ``None`` only for :data:`BUILTIN_EMBEDDING_MODEL`."""
    model_id: str = Field(min_length=1)
    """Embedding model id sent to the endpoint, or :data:`BUILTIN_EMBEDDING_MODEL` for the offline one."""
    query_prefix: str = ""
    """Text prepended to search queries before embedding (trimmed)."""
    chunk_bytes: int = Field(default=1200, ge=4, le=MAX_CHUNK_BYTES)
    """Maximum UTF-8 bytes per chunk."""
    overlap_bytes: int = Field(default=192, ge=0)
    """Bytes shared by consecutive chunks (smaller than ``chunk_bytes``)."""
    max_lines: int = Field(default=80, ge=1, le=MAX_CHUNK_LINES)
    """Maximum lines per chunk."""
    batch_size: int = Field(default=4, ge=1, le=MAX_BATCH_SIZE)
    """Chunks embedded per index job batch."""

    @model_validator(mode="after")
    def _endpoint_or_builtin(self) -> EmbeddingApiSettings:
        if self.base_url is None and not self.is_builtin:
            raise ValueError(BASE_URL_MESSAGE)
        return self

    @property
    def is_builtin(self) -> bool:
        """Whether the offline embedder is selected (no network, no endpoint)."""
        return self.model_id == BUILTIN_EMBEDDING_MODEL


class RerankerApiSettings(_Settings):
    """Optional ``/rerank`` endpoint applied after fusion."""

    base_url: str
    """HTTP(S) base URL without a trailing ``/``."""
    model_id: str = Field(min_length=1)
    """Reranker model id."""
    batch_size: int = Field(default=8, ge=1, le=MAX_BATCH_SIZE)
    """Documents per rerank request."""
    document_characters: int = Field(default=768, ge=1, le=MAX_CHUNK_BYTES)
    """Characters of each document sent for reranking."""
    min_score: float | None = Field(default=None, allow_inf_nan=False)
    """Inclusive score floor; ``None`` keeps every result."""


class SemanticSettings(_Settings):
    """Hybrid retrieval settings (§14.1); absent means exact search only."""

    embedding_api: EmbeddingApiSettings
    """Embedding endpoint (required)."""
    reranker_api: RerankerApiSettings | None = None
    """Reranker endpoint, when configured."""
    no_match: bool = True
    """Hybrid search answers ``no_match`` with no results when nothing stored is close to the query
    (the relevance floor); ``false`` always returns the best candidates."""

    def signature(self) -> str:
        """Hash of everything that changes stored embeddings; a change forces an index rebuild.

        Same formula as the original (PHP default JSON: escaped ``/`` and ``\\uXXXX``), so an index
        signature written by either implementation compares equal. Query prefix and reranker are
        excluded on purpose.
        """
        api = self.embedding_api
        values = [api.base_url, api.model_id, api.chunk_bytes, api.overlap_bytes, api.max_lines, 1]
        text = json.dumps(values, ensure_ascii=True, separators=(",", ":")).replace("/", "\\/")
        return sha256_hex(text)


class ProviderSettings(_Settings):
    """An endpoint that serves the shared Observer/Reflector/Dropper model (``provider/model``)."""

    name: str = Field(min_length=1)
    """Provider name, the part of the model reference before the first ``/``."""
    kind: Literal["builtin", "openai_compatible", "claude_code", "codex", "anthropic"]
    """``builtin`` runs in-process with no network; ``claude_code`` and ``codex`` run the agent's CLI
    on the user's login (:data:`CLAUDE_CODE_PROVIDER`, :data:`CODEX_PROVIDER`); ``anthropic`` calls the
    Anthropic Messages API (:data:`ANTHROPIC_PROVIDER`); others are OpenAI-compatible HTTP endpoints."""
    base_url: str | None = None
    """HTTP(S) base URL (``None`` for ``builtin``, ``claude_code``, ``codex`` on its own login, and
    ``anthropic`` at its default endpoint)."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key (never the key itself)."""
    context_window: int = Field(ge=1, le=MAX_CONTEXT_WINDOW)
    """Model context window in tokens; sizes observer parts."""
    timeout_s: float = Field(
        default=DEFAULT_PROVIDER_TIMEOUT_S, gt=0, le=MAX_PROVIDER_TIMEOUT_S, allow_inf_nan=False
    )
    """HTTP timeout per request (for ``claude_code``: per CLI run), in seconds."""
    command: str | None = None
    """``claude_code`` and ``codex``: the CLI to run (a name looked up on ``PATH``, or an absolute path)."""
    max_budget_usd: float | None = Field(default=None, gt=0, le=MAX_CLI_BUDGET_USD, allow_inf_nan=False)
    """``claude_code`` only: the most one model call may spend, in US dollars (``--max-budget-usd``)."""


BUILTIN_PROVIDER_SETTINGS = ProviderSettings(
    name=BUILTIN_PROVIDER, kind="builtin", context_window=BUILTIN_CONTEXT_WINDOW
)
"""The provider that is always defined."""

CLAUDE_CODE_PROVIDER_SETTINGS = ProviderSettings(
    name=CLAUDE_CODE_PROVIDER,
    kind="claude_code",
    context_window=CLAUDE_CODE_CONTEXT_WINDOW,
    command=CLAUDE_CODE_COMMAND,
    max_budget_usd=DEFAULT_CLI_MAX_BUDGET_USD,
)
"""``claude-code`` when the settings do not define it: usable with no ``providers`` block."""

CODEX_PROVIDER_SETTINGS = ProviderSettings(
    name=CODEX_PROVIDER, kind="codex", context_window=CODEX_CONTEXT_WINDOW, command=CODEX_COMMAND
)
"""``codex`` when the settings do not define it."""

ANTHROPIC_PROVIDER_SETTINGS = ProviderSettings(
    name=ANTHROPIC_PROVIDER,
    kind="anthropic",
    context_window=ANTHROPIC_CONTEXT_WINDOW,
    api_key_env=ANTHROPIC_API_KEY_ENV,
)
"""``anthropic`` when not defined: the default endpoint, its key in ``ANTHROPIC_API_KEY``."""


class ModelPrice(_Settings):
    """Price of one model's tokens, per million tokens, in the table's currency."""

    prompt: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    """Uncached input tokens."""
    cached_prompt: float | None = Field(default=None, ge=0, le=MAX_PRICE, allow_inf_nan=False)
    """Input tokens served from the provider's cache (``None``: priced as ``prompt``)."""
    completion: float = Field(ge=0, le=MAX_PRICE, allow_inf_nan=False)
    """Output tokens."""

    def cost(self, prompt_tokens: int, cached_prompt_tokens: int, completion_tokens: int) -> float:
        """Money for these counts (``cached_prompt_tokens`` is part of ``prompt_tokens``)."""
        cached_rate = self.prompt if self.cached_prompt is None else self.cached_prompt
        uncached = max(0, prompt_tokens - cached_prompt_tokens)
        total = (
            uncached * self.prompt + cached_prompt_tokens * cached_rate + completion_tokens * self.completion
        )
        return total / 1_000_000


class PriceTable(_Settings):
    """Optional ``prices`` block: turns token usage into money in the cost report."""

    currency: str = Field(default="USD", min_length=1)
    """Label of the amounts (no conversion)."""
    models: dict[str, ModelPrice] = Field(default_factory=dict)
    """``provider/model`` -> price per million tokens."""


class BudgetSettings(_Settings):
    """``budget``: what the Observer, Reflector and Dropper may spend (per project, i.e. per memory
    database, and per UTC day), and how large one call may be. The built-in model costs nothing and is
    never capped. ``None`` turns a cap off."""

    daily_tokens: int | None = Field(default=DEFAULT_DAILY_TOKENS, ge=1, le=MAX_DAILY_TOKENS)
    """Prompt plus completion tokens per UTC day (as the providers report them)."""
    daily_usd: float | None = Field(default=None, gt=0, le=MAX_DAILY_USD, allow_inf_nan=False)
    """US dollars per UTC day: what a provider reports (``claude-code``), else what ``prices``
    (in USD) says; calls of a model with neither are not counted (``omray status`` lists it)."""
    max_prompt_tokens: int | None = Field(
        default=DEFAULT_MAX_PROMPT_TOKENS, ge=MIN_PROMPT_CAP, le=MAX_CONTEXT_WINDOW
    )
    """Prompt tokens one model call may be sent (omray's own count, with ``tokens.encoding``): the
    Observer packs smaller parts; a Reflector call over it is refused (``prompt_over_cap``); a
    Dropper call over it is skipped."""

    @property
    def capped(self) -> bool:
        """True when a daily cap is set."""
        return self.daily_tokens is not None or self.daily_usd is not None


class OmSettings(_Settings):
    """Validated, immutable settings. Build with :func:`persistence.settings.parse.settings_from_mapping`."""

    database: str = DEFAULT_DATABASE
    """``storage.database``; relative paths are joined to the working directory (:meth:`database_path`)."""
    data_node: str | None = None
    """``storage.node``: the ``omray-node`` label of the node the database is created on (default:
    the agent's node; ``protocol.placement``)."""
    data_node_resource: str | None = None
    """``storage.node_resource``: a Ray custom resource of the node the database is created on."""
    model: str | None = None
    """``provider/model`` of Observer, Reflector and Dropper; checked lazily (:meth:`require_model`)."""
    context_window_ratio: float = Field(default=DEFAULT_CONTEXT_WINDOW_RATIO, gt=0, lt=1, allow_inf_nan=False)
    """``observer.context_window_ratio``: share of the context window one observer part may fill."""
    renderer_version: str = Field(default=DEFAULT_VERSION, min_length=1)
    """``observer.renderer_version``: part of chunk/coverage identity."""
    observer_schema_version: str = Field(default=DEFAULT_VERSION, min_length=1)
    """``observer.schema_version``: part of observation identity."""
    reflector_schema_version: str = Field(default=DEFAULT_VERSION, min_length=1)
    """``reflector.schema_version``: part of reflection and generation identity."""
    reflect_after_observation_tokens: int = Field(
        default=DEFAULT_REFLECT_AFTER_OBSERVATION_TOKENS, ge=1, le=MAX_TOKEN_THRESHOLD
    )
    """Reflect when the active pool has strictly more tokens than this."""
    observations_max_tokens: int = Field(
        default=DEFAULT_OBSERVATIONS_MAX_TOKENS, ge=1, le=MAX_TOKEN_THRESHOLD
    )
    """``pools.observations_max_tokens``: Dropper gate (strict) and target."""
    semantic: SemanticSettings | None = None
    """Hybrid retrieval, or ``None`` for exact search."""
    providers: tuple[ProviderSettings, ...] = (BUILTIN_PROVIDER_SETTINGS,)
    """Model providers; ``builtin`` is always first."""
    token_encoding: TokenEncoding = "o200k_base"
    """``tokens.encoding``: tiktoken encoding used for token counts."""
    observe_after_tokens: int = Field(default=DEFAULT_OBSERVE_AFTER_TOKENS, ge=0, le=MAX_TOKEN_THRESHOLD)
    """``observer.observe_after_tokens``: observe once this many source tokens are uncovered (0: at
    every turn end, the original policy)."""
    pressure_context_fill: float = Field(
        default=DEFAULT_PRESSURE_CONTEXT_FILL, gt=0, le=1, allow_inf_nan=False
    )
    """``observer.pressure_context_fill``: from this reported context fill on, observe at half the
    threshold, inside turns too, so compaction finds its range covered."""
    idle_flush_seconds: float = Field(
        default=DEFAULT_IDLE_FLUSH_SECONDS, gt=0, le=MAX_IDLE_FLUSH_SECONDS, allow_inf_nan=False
    )
    """``observer.idle_flush_seconds``: a deferred tail is observed after this long without a newer
    signal of its session."""
    prices: PriceTable | None = None
    """Optional price table of the cost report."""
    redact_patterns: tuple[str, ...] = ()
    """``privacy.redact_patterns``: regular expressions masked (``[redacted:custom]``) in event text
    before it reaches a model or the index, on top of the built-in set (``protocol.redact``)."""
    budget: BudgetSettings = BudgetSettings()
    """``budget``: daily caps and the per-call prompt cap (:class:`BudgetSettings`)."""

    def require_model(self) -> str:
        """The model reference, or :class:`ModelSettingsError` when missing or not ``provider/model``."""
        if not self.model:
            raise ModelSettingsError(MODEL_REQUIRED_MESSAGE)
        if self.model.startswith("@") or "/" not in self.model:
            raise ModelSettingsError(MODEL_FORMAT_MESSAGE)
        return self.model

    def provider_for(self, model: str) -> ProviderSettings:
        """The provider of a ``provider/model`` reference; :class:`SettingsError` when it is not defined."""
        if model.startswith("@") or "/" not in model:
            raise ModelSettingsError(MODEL_FORMAT_MESSAGE)
        name = model.partition("/")[0]
        for provider in self.providers:
            if provider.name == name:
                return provider
        if name == CLAUDE_CODE_PROVIDER:
            return CLAUDE_CODE_PROVIDER_SETTINGS
        if name == CODEX_PROVIDER:
            return CODEX_PROVIDER_SETTINGS
        if name == ANTHROPIC_PROVIDER:
            return ANTHROPIC_PROVIDER_SETTINGS
        raise SettingsError(f"provider {name!r} is not defined in observational_memory.providers.")

    def model_provider(self) -> ProviderSettings:
        """Provider of the configured model (model checked first)."""
        return self.provider_for(self.require_model())

    def envelope(self, context_window: int) -> int:
        """Token budget of one observer part: ``floor(context_window * ratio)`` (128000 at 0.65 -> 83200)."""
        if context_window <= 0:
            raise SettingsError(CONTEXT_WINDOW_MESSAGE)
        return math.floor(context_window * self.context_window_ratio)

    def with_versions(self, renderer_version: str, observer_schema_version: str) -> OmSettings:
        """A copy with only the renderer and observer schema versions replaced (as frozen in a job)."""
        for key, value in (
            ("renderer_version", renderer_version),
            ("observer_schema_version", observer_schema_version),
        ):
            if not isinstance(value, str) or value == "":
                raise SettingsError(f"{key} must be a non-empty string.")
        return self.model_copy(
            update={"renderer_version": renderer_version, "observer_schema_version": observer_schema_version}
        )

    def database_path(self, cwd: str | os.PathLike[str]) -> str:
        """Absolute database path: an absolute setting as-is, else joined to ``cwd`` (§3.2)."""
        if self.database.startswith("/"):
            return self.database
        return os.fspath(cwd).rstrip("/") + "/" + self.database.lstrip("/")

    def semantic_dir(self, cwd: str | os.PathLike[str]) -> str:
        """Directory of the derived semantic index files: ``<database path>.semantic``."""
        return self.database_path(cwd) + ".semantic"
