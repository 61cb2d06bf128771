"""The keyword half of hybrid search: a ``bm25s`` index over the manifest's chunk texts."""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import bm25s
import numpy as np

from persistence.semantic.files import (
    DIRECTORY_MODE,
    KEYWORD_DIR,
    KEYWORD_LABELS_FILE,
    DerivedIndexError,
    FileKeys,
    directory_digest,
    directory_keys,
    secure_file,
)
from persistence.semantic.manifest import Manifest

logger = logging.getLogger("omray.semantic")

_TOKEN = re.compile(r"[^\W_]+")


def tokenize(text_value: str) -> list[str]:
    """Keyword tokens: lowercased runs of letters and digits (no query syntax reaches the index)."""
    return _TOKEN.findall(text_value.lower())


def query_tokens(query: str) -> list[str]:
    """Unique keyword tokens of a query, in order."""
    return list(dict.fromkeys(tokenize(query)))


@dataclass(frozen=True)
class KeywordScores:
    """Every chunk's BM25 score for one query."""

    scores: Any | None
    """numpy array by document position (``None``: no query token is in the index)."""
    positions: dict[int, int]
    """Chunk label -> document position."""

    def of(self, labels: Sequence[int]) -> dict[int, float]:
        """Scores of ``labels`` (0 for a chunk no token matches; labels not indexed are left out)."""
        if self.scores is None:
            return {label: 0.0 for label in labels if label in self.positions}
        return {
            label: float(self.scores[self.positions[label]]) for label in labels if label in self.positions
        }


@dataclass
class KeywordIndex:
    """A bm25s index over chunk texts; document ``i`` is chunk ``labels[i]``."""

    labels: list[int]
    retriever: Any | None
    vocabulary: frozenset[str]
    positions: dict[int, int] | None = None

    @classmethod
    def build(cls, rows: Sequence[tuple[int, str]]) -> KeywordIndex:
        corpus = [tokenize(value) for _, value in rows]
        labels = [label for label, _ in rows]
        if not any(corpus):
            return cls(labels, None, frozenset())
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        return cls(labels, retriever, frozenset(k for k in retriever.vocab_dict if k))

    def ranked(self, tokens: Sequence[str], k: int) -> tuple[list[tuple[int, float]], KeywordScores]:
        """The first ``k`` (label, BM25 score) hits, best first, and every chunk's score for the same
        query, so fusion can score a chunk the keyword side did not rank (its true BM25, not 0)."""
        known = [token for token in tokens if token in self.vocabulary]
        if self.retriever is None or not known or k <= 0:
            return [], KeywordScores(None, {})
        scores = np.asarray(self.retriever.get_scores(known), dtype=np.float64)
        if k < len(scores):
            top = np.argpartition(-scores, k - 1)[:k]
            order = top[np.lexsort((top, -scores[top]))]
        else:
            order = np.argsort(-scores, kind="stable")
        ranked = [(self.labels[int(i)], float(scores[int(i)])) for i in order if scores[int(i)] > 0]
        return ranked, KeywordScores(scores, self._positions())

    def document_frequencies(self, tokens: Sequence[str]) -> tuple[int, dict[str, int]]:
        """The number of indexed chunks and, per token, how many of them hold it (0: none)."""
        if self.retriever is None:
            return len(self.labels), {token: 0 for token in tokens}
        columns = self.retriever.scores["indptr"]
        vocabulary = self.retriever.vocab_dict
        frequencies = {}
        for token in tokens:
            # bm25s keeps one column per vocabulary word: the chunks holding it are its entries.
            column = vocabulary.get(token) if token in self.vocabulary else None
            if column is None or column + 1 >= len(columns):
                frequencies[token] = 0
            else:
                frequencies[token] = int(columns[column + 1] - columns[column])
        return len(self.labels), frequencies

    def _positions(self) -> dict[int, int]:
        # Built once per loaded index (the store caches the index while its files are unchanged).
        if self.positions is None:
            self.positions = {label: position for position, label in enumerate(self.labels)}
        return self.positions

    def query(self, tokens: Sequence[str], k: int) -> list[int]:
        """Labels of up to ``k`` chunks matching at least one token, best first."""
        return [label for label, _ in self.query_scored(tokens, k)]

    def query_scored(self, tokens: Sequence[str], k: int) -> list[tuple[int, float]]:
        """(label, BM25 score) of up to ``k`` chunks matching at least one token, best first."""
        return self.ranked(tokens, k)[0]

    def save(self, directory: Path) -> str:
        directory.mkdir(mode=DIRECTORY_MODE)
        os.chmod(directory, DIRECTORY_MODE)
        if self.retriever is not None:
            self.retriever.save(str(directory), show_progress=False)
        (directory / KEYWORD_LABELS_FILE).write_text(json.dumps(self.labels), encoding="utf-8")
        for path in directory.iterdir():
            secure_file(path)
        return directory_digest(directory)

    @classmethod
    def load(cls, directory: Path) -> KeywordIndex:
        labels = [int(value) for value in json.loads((directory / KEYWORD_LABELS_FILE).read_text("utf-8"))]
        if not (directory / "params.index.json").is_file():
            return cls(labels, None, frozenset())
        retriever = bm25s.BM25.load(str(directory), show_progress=False)
        return cls(labels, retriever, frozenset(k for k in retriever.vocab_dict if k))


PREPARED_SUFFIX: Final[str] = ".next."
"""Infix of a prepared keyword index's folder (``keyword.next.<random>``) until it is installed."""


@dataclass(frozen=True)
class PreparedKeyword:
    """A keyword index built and saved beside the current one, waiting to be installed."""

    directory: Path
    digest: str
    index: KeywordIndex

    def discard(self) -> None:
        """Remove the folder if it was not installed."""
        shutil.rmtree(self.directory, ignore_errors=True)


class KeywordStore:
    """The keyword index files of one index directory, verified against the manifest and cached.

    Not thread-safe; the owning :class:`persistence.semantic.index.SemanticIndex` calls it under
    the index lock.
    """

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._cache: tuple[FileKeys, str, KeywordIndex] | None = None

    def forget(self) -> None:
        """Drop the cached index (the files were removed or may have changed)."""
        self._cache = None

    def load(self, manifest: Manifest) -> KeywordIndex:
        """The verified keyword index (cached while its checksum is unchanged)."""
        expected = manifest.meta("keyword_sha") or ""
        directory = self._directory / KEYWORD_DIR
        if not directory.is_dir():
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} is missing")
        keys = directory_keys(directory)
        cached = self._cache
        if cached is not None and cached[0] == keys and cached[1] == expected:
            return cached[2]
        digest = directory_digest(directory)
        if digest != expected:
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} fails its checksum")
        try:
            keyword = KeywordIndex.load(directory)
        except Exception as exc:  # any parse failure of a derived file means "corrupt"
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} is unreadable") from exc
        if len(keyword.labels) != manifest.meta_int("keyword_count"):
            raise DerivedIndexError(f"semantic keyword index {KEYWORD_DIR!r} disagrees with the manifest")
        self._cache = (keys, digest, keyword)
        return keyword

    def is_valid(self, manifest: Manifest) -> bool:
        """Whether the files load and agree with the manifest."""
        try:
            self.load(manifest)
        except DerivedIndexError:
            return False
        return True

    def rebuild(self, manifest: Manifest) -> None:
        """Rebuild the files from the manifest's chunk texts and record their digest in it."""
        keyword = KeywordIndex.build(manifest.all_chunk_texts())
        temporary = self._directory / f"{KEYWORD_DIR}.tmp"
        shutil.rmtree(temporary, ignore_errors=True)
        digest = keyword.save(temporary)
        shutil.rmtree(self._directory / KEYWORD_DIR, ignore_errors=True)
        os.replace(temporary, self._directory / KEYWORD_DIR)
        with manifest.transaction():
            manifest.set_meta(keyword_sha=digest, keyword_count=len(keyword.labels))
        self._cache = (directory_keys(self._directory / KEYWORD_DIR), digest, keyword)

    def prepare(self, rows: Sequence[tuple[int, str]]) -> PreparedKeyword:
        """Build and save a keyword index of ``rows`` beside the current one, without the lock: the
        slow half of a removal. :meth:`install` puts it in place under the lock."""
        keyword = KeywordIndex.build(rows)
        temporary = Path(tempfile.mkdtemp(prefix=f"{KEYWORD_DIR}{PREPARED_SUFFIX}", dir=self._directory))
        temporary.rmdir()  # KeywordIndex.save creates it with the index's mode
        try:
            digest = keyword.save(temporary)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
        return PreparedKeyword(temporary, digest, keyword)

    def install(self, manifest: Manifest, prepared: PreparedKeyword) -> None:
        """Put a prepared index in place of the current one and record it (inside the caller's
        manifest transaction: a crash before its commit leaves the state dirty, then rebuilt)."""
        shutil.rmtree(self._directory / KEYWORD_DIR, ignore_errors=True)
        os.replace(prepared.directory, self._directory / KEYWORD_DIR)
        manifest.set_meta(keyword_sha=prepared.digest, keyword_count=len(prepared.index.labels))
        self._cache = (directory_keys(self._directory / KEYWORD_DIR), prepared.digest, prepared.index)

    def for_search(self, manifest: Manifest) -> KeywordIndex:
        """The verified index, or one rebuilt in memory from the (verified) manifest for this query."""
        try:
            return self.load(manifest)
        except DerivedIndexError:
            # The next synchronization repairs the files.
            logger.warning("om.semantic.keyword_rebuilt_in_memory", extra={"reason": "invalid"})
            self._cache = None
            return KeywordIndex.build(manifest.all_chunk_texts())
