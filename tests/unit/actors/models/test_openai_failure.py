"""One classifier of ``openai`` client failures, worded by the chat and embedding clients for their logs."""

from __future__ import annotations

import httpx
import openai
import pytest

from actors.models.chat import _category_for
from actors.models.clients import openai_failure
from actors.models.embeddings import _openai_reason

_REQUEST = httpx.Request("POST", "http://127.0.0.1:9/v1/x")


def _status(cls: type[openai.APIStatusError], code: int) -> openai.APIStatusError:
    return cls("refused", response=httpx.Response(code, request=_REQUEST), body=None)


CASES = [
    # exception, openai_failure, chat category, embedding reason, status
    (openai.APITimeoutError(request=_REQUEST), "timeout", "timeout", "timeout", None),
    (openai.APIConnectionError(request=_REQUEST), "connection", "connection", "connection", None),
    (_status(openai.RateLimitError, 429), "rate_limited", "rate_limited", "http_error", 429),
    (_status(openai.InternalServerError, 503), "server_error", "server_error", "server_error", 503),
    (_status(openai.BadRequestError, 400), "client_error", "bad_response", "http_error", 400),
    (ValueError("not json"), "bad_response", "bad_response", "bad_response", None),
]


@pytest.mark.parametrize(("exc", "failure", "chat", "embedding", "status"), CASES)
def test_each_failure_is_classified_once_and_worded_per_client(
    exc: Exception, failure: str, chat: str, embedding: str, status: int | None
) -> None:
    assert openai_failure(exc) == (failure, status)
    assert _category_for(exc) == (chat, status)
    assert _openai_reason(exc) == (embedding, status)
