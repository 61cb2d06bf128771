"""Resolving a ``provider/model`` reference to a chat model (reference §2.2, §16).

Kept apart from :mod:`actors.models.chat` so that the built-in model, which speaks the chat types,
and the OpenAI client can both be chosen here without importing each other.
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
from actors.models.clients import ClientPool, secret_key
from protocol.errors import ModelSettingsError, SettingsError
from protocol.settings import BUILTIN_MODEL, BUILTIN_PROVIDER, OmSettings


def model_for(
    settings: OmSettings,
    model: str,
    *,
    environ: Mapping[str, str] | None = None,
    max_retries: int = DEFAULT_CLIENT_MAX_RETRIES,
    clients: ClientPool | None = None,
) -> tuple[ChatModel, int]:
    """The chat model and context window for a ``provider/model`` reference.

    ``builtin/extractive`` is the in-process model. Other providers come from
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
