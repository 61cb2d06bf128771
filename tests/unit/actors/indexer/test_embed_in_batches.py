"""embed_in_batches: input order kept; an embedder that batches by tokens gets one call."""

from __future__ import annotations

from collections.abc import Sequence

from actors.indexer.sync import embed_in_batches


class Counting:
    def __init__(self, batches_by_tokens: bool) -> None:
        self.batches_by_tokens = batches_by_tokens
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(len(texts))
        return [[float(len(text)), 1.0] for text in texts]


def test_order_kept_and_calls_by_size() -> None:
    texts = ["a" * (i * 7 % 11 + 1) for i in range(10)]
    for by_tokens, calls in ((False, [4, 4, 2]), (True, [10])):
        embedder = Counting(by_tokens)
        vectors = embed_in_batches(embedder, texts, 4)
        assert [vector[0] for vector in vectors] == [float(len(text)) for text in texts]
        assert embedder.calls == calls
