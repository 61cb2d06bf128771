"""Resolving settings to the models that serve them: a ``provider/model`` reference to a chat model
(reference §2.2, §16), the semantic settings to an embedder and a reranker (§14.6).

Kept apart from :mod:`actors.models.chat` and :mod:`actors.models.embeddings` so that the built-in
models and the endpoint clients can all be chosen here without importing each other.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from actors.models.builtin import BuiltinExtractiveModel
from actors.models.chat import (
    DEFAULT_CLIENT_MAX_RETRIES,
    NO_KEY_PLACEHOLDER,
    ChatModel,
    MissingApiKeyError,
    OpenAIChatModel,
    UnknownModelError,
    UnknownProviderError,
)
from actors.models.claude_cli import ClaudeCliChatModel
from actors.models.clients import ClientPool, secret_key
from actors.models.codex_cli import CodexCliChatModel, endpoint_config
from actors.models.embeddings import HttpReranker, OpenAIEmbedder
from actors.models.offline_embedder import default_offline_embedder
from protocol.errors import ModelSettingsError, SettingsError
from protocol.semantic import Embedder, EmbeddingError, Reranker
from protocol.settings import (
    ANTHROPIC_API_KEY_ENV,
    BUILTIN_MODEL,
    BUILTIN_PROVIDER,
    CLAUDE_CODE_COMMAND,
    CODEX_COMMAND,
    DEFAULT_CLI_MAX_BUDGET_USD,
    OmSettings,
    ProviderSettings,
    SemanticSettings,
)


def model_for(
    settings: OmSettings,
    model: str,
    *,
    environ: Mapping[str, str] | None = None,
    max_retries: int = DEFAULT_CLIENT_MAX_RETRIES,
    clients: ClientPool | None = None,
) -> tuple[ChatModel, int]:
    """The chat model and context window for a ``provider/model`` reference.

    ``builtin/extractive`` is the in-process model; ``claude-code/<model>`` runs the ``claude`` CLI
    (:class:`~actors.models.claude_cli.ClaudeCliChatModel`). Other providers come from
    ``settings.providers``; their API key is read from the environment variable they name
    (``environ`` defaults to ``os.environ``), or :data:`NO_KEY_PLACEHOLDER` when they name none.
    With ``clients`` (a worker passes :func:`actors.models.clients.worker_clients`), one client per
    endpoint, key and timeouts is built and then reused; without it each call builds its own.
    """
    try:
        provider = settings.provider_for(model)
    except ModelSettingsError:
        raise
    except SettingsError:
        name = model.partition("/")[0]
        raise UnknownProviderError(
            f"provider {name!r} of model {model!r} is not defined in observational_memory.providers."
        ) from None
    if provider.kind == "builtin" or provider.name == BUILTIN_PROVIDER:
        if model != BUILTIN_MODEL:
            raise UnknownModelError(f"the built-in provider has no model {model!r}; use {BUILTIN_MODEL!r}.")
        return BuiltinExtractiveModel(), provider.context_window
    if provider.kind == "claude_code":
        # One run of the CLI per request: nothing to pool. The runs start from the environment the
        # worker has when it calls (``environ`` when given), so the CLI finds its login there.
        cli = ClaudeCliChatModel(
            provider.command or CLAUDE_CODE_COMMAND,
            provider.timeout_s,
            provider.max_budget_usd or DEFAULT_CLI_MAX_BUDGET_USD,
            environ=environ,
        )
        return cli, provider.context_window
    if provider.kind == "codex":
        codex = CodexCliChatModel(
            provider.command or CODEX_COMMAND,
            provider.timeout_s,
            environ=environ,
            extra_config=endpoint_config(provider.base_url, provider.api_key_env),
        )
        return codex, provider.context_window
    if provider.kind == "anthropic":
        return _anthropic(provider, environ, max_retries, clients), provider.context_window
    if provider.base_url is None:
        raise SettingsError(f"provider {provider.name!r} has no base_url.")
    api_key = NO_KEY_PLACEHOLDER
    if provider.api_key_env is not None:
        env = os.environ if environ is None else environ
        value = env.get(provider.api_key_env, "")
        if not value.strip():
            raise MissingApiKeyError(
                f"environment variable {provider.api_key_env!r} (API key of provider {provider.name!r}) "
                "is not set."
            )
        api_key = value
    base_url, timeout_s = provider.base_url, provider.timeout_s

    def build() -> OpenAIChatModel:
        return OpenAIChatModel(
            base_url=base_url, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries
        )

    if clients is None:
        return build(), provider.context_window
    key = ("chat", base_url, secret_key(api_key), timeout_s, max_retries)
    return clients.get(key, build), provider.context_window


def _anthropic(
    provider: ProviderSettings,
    environ: Mapping[str, str] | None,
    max_retries: int,
    clients: ClientPool | None,
) -> ChatModel:
    """The Messages API client of an ``anthropic`` provider (its key read from ``api_key_env``)."""
    from actors.models.anthropic_api import AnthropicChatModel

    variable = provider.api_key_env or ANTHROPIC_API_KEY_ENV
    api_key = (os.environ if environ is None else environ).get(variable, "")
    if not api_key.strip():
        raise MissingApiKeyError(
            f"environment variable {variable!r} (API key of provider {provider.name!r}) is not set."
        )
    base_url, timeout_s = provider.base_url, provider.timeout_s

    def build() -> AnthropicChatModel:
        return AnthropicChatModel(base_url, api_key, timeout_s, max_retries=max_retries)

    if clients is None:
        return build()
    return clients.get(("anthropic", base_url, secret_key(api_key), timeout_s, max_retries), build)


def embedder_for(semantic: SemanticSettings, clients: ClientPool | None = None) -> Embedder:
    """The embedder selected by ``semantic.embedding_api`` (the shared offline one for the builtin id).

    With ``clients`` an endpoint's client is built once and reused (a worker passes its pool).
    """
    api = semantic.embedding_api
    if api.is_builtin:
        return default_offline_embedder()
    base_url = api.base_url
    if base_url is None:  # the settings model forbids this; kept for the type checker
        raise EmbeddingError(reason="no_endpoint")

    def build() -> OpenAIEmbedder:
        return OpenAIEmbedder(base_url, api.model_id, api_key_env=None)

    if clients is None:
        return build()
    return clients.get(("embeddings", base_url, api.model_id), build)


def reranker_for(semantic: SemanticSettings, clients: ClientPool | None = None) -> Reranker | None:
    """The configured reranker, or ``None`` (no reranker ships offline); reused from ``clients`` if given."""
    api = semantic.reranker_api
    if api is None:
        return None

    def build() -> HttpReranker:
        return HttpReranker(
            api.base_url,
            api.model_id,
            batch_size=api.batch_size,
            document_characters=api.document_characters,
            min_score=api.min_score,
        )

    if clients is None:
        return build()
    key = ("rerank", api.base_url, api.model_id, api.batch_size, api.document_characters, api.min_score)
    return clients.get(key, build)
