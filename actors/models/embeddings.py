"""Embedding and rerank clients for hybrid retrieval (reference §14.5 step 6, §14.6, §14.7).

Three implementations of the two protocols of :mod:`protocol.semantic` (``Embedder``, ``Reranker``):

* :class:`OpenAIEmbedder` calls any OpenAI-compatible ``/v1/embeddings`` endpoint through the
  official ``openai`` client.
* :class:`~actors.models.offline_embedder.MiniLMEmbedder` runs all-MiniLM-L6-v2 (int8 ONNX)
  in-process on the CPU with ``onnxruntime``: the offline default, selected by
  ``model_id: builtin/all-minilm-l6-v2`` (in its own module).
* :class:`HttpReranker` calls an OpenAI-style ``POST <base_url>/rerank`` endpoint with ``httpx``.

Every vector is validated before anyone stores it (count, common non-zero dimension, finite
components, non-zero norm). Failures surface as ``protocol.semantic.EmbeddingError`` /
``RerankError`` (the protocols' one error contract) with a stable ``code`` and a fixed message:
never a provider body, a text, a query or a vector. Logs carry only categories, status codes,
counts and exception class names.
:func:`actors.models.registry.embedder_for` and ``reranker_for`` choose the implementation.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence

import httpx

from actors.models.chat import NO_KEY_PLACEHOLDER, MissingApiKeyError
from actors.models.clients import openai_failure
from protocol.semantic import EmbeddingError, RerankError

log = logging.getLogger("omray.embeddings")

DEFAULT_HTTP_TIMEOUT_S = 10.0
"""Per-request timeout of the embedding and rerank endpoints (§14.6)."""


# --- validation ---------------------------------------------------------------------------------


def _finite_float(value: object) -> float | None:
    """``value`` as a float when it is a finite JSON number (bools and oversized ints are not)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def validate_vectors(vectors: Sequence[object], expected_count: int) -> list[list[float]]:
    """The vectors as float lists when §14.6 holds; :class:`EmbeddingError` (``invalid_vectors``) otherwise.

    Holds: ``expected_count`` vectors, each a non-empty list with the first one's dimension, every
    component a finite number, and a finite, positive squared norm.
    """
    if len(vectors) != expected_count:
        raise EmbeddingError(reason="invalid_vectors")
    result: list[list[float]] = []
    dimension: int | None = None
    for vector in vectors:
        if not isinstance(vector, list | tuple) or len(vector) == 0:
            raise EmbeddingError(reason="invalid_vectors")
        if dimension is None:
            dimension = len(vector)
        if len(vector) != dimension:
            raise EmbeddingError(reason="invalid_vectors")
        floats: list[float] = []
        for value in vector:
            number = _finite_float(value)
            if number is None:
                raise EmbeddingError(reason="invalid_vectors")
            floats.append(number)
        squared_norm = math.fsum(value * value for value in floats)
        if not (math.isfinite(squared_norm) and squared_norm > 0):
            raise EmbeddingError(reason="invalid_vectors")
        result.append(floats)
    return result


# --- OpenAI-compatible endpoint ---------------------------------------------------------------------


def _api_key(api_key_env: str | None, environ: Mapping[str, str] | None) -> str:
    if api_key_env is None:
        return NO_KEY_PLACEHOLDER
    value = (os.environ if environ is None else environ).get(api_key_env, "")
    if not value.strip():
        raise MissingApiKeyError(f"environment variable {api_key_env!r} (embedding API key) is not set.")
    return value


# ``openai`` is imported where a client is made or used (see ``actors.models.chat``).


def _openai_reason(exc: Exception) -> tuple[str, int | None]:
    failure, status = openai_failure(exc)
    # The embedding logs name any 4xx answer (429 included) ``http_error``.
    return ("http_error" if failure in ("client_error", "rate_limited") else failure), status


def _ordered_embeddings(body: object, count: int) -> list[object]:
    """``data[].embedding`` reordered by ``data[].index`` (which must be a permutation of the inputs)."""
    data = body.get("data") if isinstance(body, Mapping) else None
    if not isinstance(data, list) or len(data) != count:
        raise EmbeddingError(reason="invalid_vectors")
    ordered: list[object] = [None] * count
    seen: set[int] = set()
    for item in data:
        index = item.get("index") if isinstance(item, Mapping) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in seen:
            raise EmbeddingError(reason="invalid_vectors")
        seen.add(index)
        ordered[index] = item.get("embedding")
    return ordered


class OpenAIEmbedder:
    """An OpenAI-compatible ``/embeddings`` endpoint reached with the official ``openai`` client.

    One request per :meth:`embed` call (batching is the caller's choice). ``base_url`` is given to
    the client as-is (``.../v1``). Like the original, failed requests are not retried here
    (``max_retries=0`` by default): the queue retries index jobs and a search reports the error.
    Thread-safe (the ``openai`` client is).
    """

    def __init__(
        self,
        base_url: str,
        model_id: str,
        api_key_env: str | None = None,
        timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
        *,
        max_retries: int = 0,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.base_url = base_url
        self._model_id = model_id
        self.timeout_s = timeout_s
        self._dimensions: int | None = None
        import openai

        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=_api_key(api_key_env, environ),
            timeout=timeout_s,
            max_retries=max_retries,
        )

    @property
    def model_id(self) -> str:
        """Model id sent with every request."""
        return self._model_id

    @property
    def dimensions(self) -> int | None:
        """Dimension of the last valid response (``None`` before the first one)."""
        return self._dimensions

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Vectors for ``texts`` in input order (no request for an empty list)."""
        import openai

        inputs = list(texts)
        if not inputs:
            return []
        try:
            # The raw body is validated here: the client's lenient parsing would coerce
            # ``true`` to 1.0 and could hide a malformed reply.
            response = self._client.embeddings.with_raw_response.create(
                model=self._model_id, input=inputs, encoding_format="float"
            )
            body = json.loads(response.content)
            vectors = validate_vectors(_ordered_embeddings(body, len(inputs)), len(inputs))
        except EmbeddingError as exc:
            log.warning("embedding request failed: reason=%s count=%d", exc.reason, len(inputs))
            raise
        except (openai.OpenAIError, ValueError, TypeError, ArithmeticError, RecursionError) as exc:
            reason, status = _openai_reason(exc)
            log.warning(
                "embedding request failed: reason=%s status=%s error_class=%s count=%d",
                reason,
                status,
                type(exc).__name__,
                len(inputs),
            )
            # Not chained: the provider exception may carry the response body.
            raise EmbeddingError(reason=reason) from None
        self._dimensions = len(vectors[0])
        return vectors


# --- rerank endpoint -----------------------------------------------------------------------------------


def _batch_scores(body: object, batch_size: int) -> list[float]:
    """Scores by batch offset from a ``{results: [{index, relevance_score}]}`` body (§14.6 rules)."""
    results = body.get("results") if isinstance(body, Mapping) else None
    if not isinstance(results, list) or len(results) != batch_size:
        raise RerankError(reason="invalid_results")
    scores: list[float | None] = [None] * batch_size
    for result in results:
        if not isinstance(result, Mapping):
            raise RerankError(reason="invalid_results")
        index, score = result.get("index"), result.get("relevance_score")
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < batch_size:
            raise RerankError(reason="invalid_results")
        if scores[index] is not None:
            raise RerankError(reason="invalid_results")
        number = _finite_float(score)
        if number is None:
            raise RerankError(reason="invalid_results")
        scores[index] = number
    return [score for score in scores if score is not None]


class HttpReranker:
    """An OpenAI-style ``POST <base_url>/rerank`` endpoint (llama.cpp server and compatible ones), §14.6.

    Documents are sent in order-preserving batches of ``batch_size``, each cut to its first
    ``document_characters`` code points, serially. The result keeps scores ``>= min_score`` (when
    set) and orders them by score descending, ties by original offset ascending. Thread-safe.
    """

    def __init__(
        self,
        base_url: str,
        model_id: str,
        batch_size: int = 8,
        document_characters: int = 768,
        min_score: float | None = None,
        timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
        *,
        api_key_env: str | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if batch_size < 1 or document_characters < 1:
            raise ValueError("batch_size and document_characters must be >= 1.")
        self.url = base_url.rstrip("/") + "/rerank"
        self.model_id = model_id
        self.batch_size = batch_size
        self.document_characters = document_characters
        self.min_score = min_score
        headers = {}
        if api_key_env is not None:
            headers["Authorization"] = f"Bearer {_api_key(api_key_env, environ)}"
        self._client = httpx.Client(timeout=timeout_s, headers=headers)

    def close(self) -> None:
        """Release the HTTP connection pool."""
        self._client.close()

    def rerank(self, query: str, documents: Sequence[str]) -> list[int]:
        """Kept original offsets, best first (no request when ``documents`` is empty)."""
        scored: list[tuple[float, int]] = []
        for start in range(0, len(documents), self.batch_size):
            batch = [
                document[: self.document_characters]
                for document in documents[start : start + self.batch_size]
            ]
            scores = self._score_batch(query, batch)
            scored.extend((score, start + offset) for offset, score in enumerate(scores))
        if self.min_score is not None:
            floor = self.min_score
            scored = [item for item in scored if item[0] >= floor]
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [offset for _, offset in scored]

    def _score_batch(self, query: str, batch: list[str]) -> list[float]:
        payload = {"model": self.model_id, "query": query, "documents": batch, "top_n": len(batch)}
        try:
            response = self._client.post(self.url, json=payload)
            if not response.is_success:
                raise RerankError(reason=f"http_{response.status_code}")
            return _batch_scores(response.json(), len(batch))
        except RerankError as exc:
            log.warning("rerank request failed: reason=%s count=%d", exc.reason, len(batch))
            raise
        except (httpx.HTTPError, ValueError, RecursionError) as exc:
            reason = "timeout" if isinstance(exc, httpx.TimeoutException) else "transport"
            if isinstance(exc, ValueError | RecursionError):
                reason = "invalid_json"
            log.warning(
                "rerank request failed: reason=%s error_class=%s count=%d",
                reason,
                type(exc).__name__,
                len(batch),
            )
            raise RerankError(reason=reason) from None
