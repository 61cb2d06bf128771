"""How hybrid search orders its candidates (the default ``fusion="zscore"``): pure, no I/O.

Every candidate chunk (the vector side's top hits and the keyword side's, each scored on both
sides) is scored by:

1. **normalized score fusion**: the cosine and the BM25 score, each as a z-score over the candidate
   set, mixed with one weight (:data:`VECTOR_WEIGHT`, chosen by leave-one-history-out
   cross-validation over both development sets, docs/benchmarks.md);
2. **neighbour context**: a transcript event gains a share (:data:`NEIGHBOUR_SHARE`) of the better
   of its two neighbours' fused scores in the same session (positive part only), so the turns of
   one exchange surface together (a question answered over two messages, a list spread over a
   few);
3. **speaker match**: a question in the first person ("what did I ...") favours what the user said,
   one about the other side's words ("what did you recommend ...") what the assistant said
   (:func:`query_speaker`), by :data:`SPEAKER_BONUS`;
4. **time match**: when the query names a time (``actors.read.query_time``), memories dated inside
   it gain :data:`TIME_BONUS`; nothing is filtered out.

The bonuses are in z-score units, so they mean the same on any corpus size. A query no candidate is
close to matches nothing (:func:`below_floor`, the no-match floor). :func:`actors.read.fusion.fuse_candidates`
applies these rules to the candidates one search read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np

from persistence.semantic.keyword import tokenize

Speaker = Literal["user", "assistant"]

VECTOR_WEIGHT: Final[float] = 0.6
"""Share of the cosine z-score in the fused score (the rest is the BM25 z-score)."""
NEIGHBOUR_SHARE: Final[float] = 0.25
"""Share of the better neighbour's fused score an event gains."""
SPEAKER_BONUS: Final[float] = 0.5
"""Added to a candidate whose speaker the query asks about."""
TIME_BONUS: Final[float] = 0.5
"""Added to a candidate dated inside the time the query names."""


@dataclass(frozen=True, slots=True)
class RankingWeights:
    """The weights of :func:`rank_candidates` (the defaults are the measured ones; ``omray bench
    recall`` asks the same stores with each mechanism turned off)."""

    vector_weight: float = VECTOR_WEIGHT
    neighbour_share: float = NEIGHBOUR_SHARE
    speaker_bonus: float = SPEAKER_BONUS
    time_bonus: float = TIME_BONUS


@dataclass(frozen=True, slots=True)
class Candidate:
    """One chunk hit with what ranking reads of it."""

    chunk_id: str
    cosine: float
    """Cosine with the query (a chunk without a vector: its event's first chunk's, else 0)."""
    keyword: float
    """BM25 score (0: no query word)."""
    place: tuple[str, int] | None = None
    """``(session, seq)`` of the transcript event it belongs to, for neighbour context."""
    speaker: Speaker | None = None
    in_window: bool = False
    """Dated inside the time the query names."""


def _zscores(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    spread = float(array.std())
    return (array - float(array.mean())) / spread if spread > 0 else np.zeros_like(array)


def fused_scores(candidates: Sequence[Candidate], vector_weight: float = VECTOR_WEIGHT) -> np.ndarray:
    """Step 1: ``w * z(cosine) + (1 - w) * z(bm25)`` over the candidate set."""
    if not candidates:
        return np.zeros(0)
    cosine = _zscores([candidate.cosine for candidate in candidates])
    keyword = _zscores([candidate.keyword for candidate in candidates])
    fused: np.ndarray = vector_weight * cosine + (1.0 - vector_weight) * keyword
    return fused


def rank_candidates(
    candidates: Sequence[Candidate],
    speaker: Speaker | None = None,
    *,
    vector_weight: float = VECTOR_WEIGHT,
    neighbour_share: float = NEIGHBOUR_SHARE,
    speaker_bonus: float = SPEAKER_BONUS,
    time_bonus: float = TIME_BONUS,
) -> list[str]:
    """Chunk ids best first (ties: input order). Steps 1-4 of the module docstring."""
    fused = fused_scores(candidates, vector_weight)
    best_at: dict[tuple[str, int], float] = {}
    for candidate, score in zip(candidates, fused, strict=True):
        if candidate.place is not None:
            best_at[candidate.place] = max(best_at.get(candidate.place, -np.inf), float(score))
    final: list[float] = []
    for candidate, score in zip(candidates, fused, strict=True):
        value = float(score)
        if candidate.place is not None and neighbour_share:
            session, seq = candidate.place
            around = [best_at.get((session, seq + step), 0.0) for step in (-1, 1)]
            value += neighbour_share * max(0.0, *around)
        if speaker is not None and candidate.speaker == speaker:
            value += speaker_bonus
        if candidate.in_window:
            value += time_bonus
        final.append(value)
    order = sorted(range(len(candidates)), key=lambda index: (-final[index], index))
    return [candidates[index].chunk_id for index in order]


_TOLD = (
    "say|tell|suggest|recommend|mention|advise|give|explain|provide|list|share|propose|describe|write|"
    "offer|name|pick"
)
_ASKS_ASSISTANT = re.compile(
    r"\byou\s+(?:said|told|suggested|recommended|mentioned|advised|gave|explained|provided|listed|"
    r"shared|proposed|described|wrote|offered|named|picked|came up with)\b"
    rf"|\bdid\s+you\s+(?:{_TOLD})\b(?!\s+me\b)"
    r"|\byour\s+(?:suggestion|recommendation|advice|answer|response|reply|explanation|list|tips?)\b",
    re.IGNORECASE,
)
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|i'll|me|my|mine|myself)\b", re.IGNORECASE)


def query_speaker(query: str) -> Speaker | None:
    """Whose words the query asks about: the assistant's (``"what did you recommend"``, ``"your
    advice"``), else the user's when it speaks in the first person, else nobody in particular."""
    normalized = query.replace("\u2019", "'")
    if _ASKS_ASSISTANT.search(normalized):
        return "assistant"
    if _FIRST_PERSON.search(normalized):
        return "user"
    return None


def text_speaker(text: str) -> Speaker | None:
    """Who said a transcript event, from its searchable text's label (``User: ...``, ``Assistant:
    ...``; ``protocol.source_text.event_search_text``); tool results and others: ``None``."""
    if text.startswith("User: "):
        return "user"
    if text.startswith("Assistant: "):
        return "assistant"
    return None


FLOOR_COSINE: Final[float] = 0.45
"""Best cosine under which a query may match nothing stored (:func:`below_floor`)."""
FLOOR_COVERAGE: Final[float] = 0.2
"""Share of the query's word weight (:func:`query_word_weights`) under which no candidate answers it
(:func:`below_floor`). With :data:`FLOOR_COSINE`, chosen on both development sets: the pair that
empties the most questions asked of another history while no real question that finds its evidence
in the first ten is emptied (docs/benchmarks.md, no match)."""
FLOOR_LOOKS: Final[int] = 20
"""Candidates (the best ranked) :func:`below_floor` reads for the query's words."""

_FUNCTION_WORDS = (
    "a an the of to in on at for and or but is are was were be been being am do did does done i me my "
    "mine myself you your yours we us our they them their he him his she her it its this that these "
    "those there here what which who whom whose when where why how with about from as by into over "
    "have has had having can could would should will shall may might must so if than then not no any "
    "some all"
)
FUNCTION_WORDS: Final[frozenset[str]] = frozenset(_FUNCTION_WORDS.split())
"""English words that carry no topic: a query's other words are what an answer must hold."""


def query_word_weights(
    tokens: Sequence[str], documents: int, frequencies: Mapping[str, int]
) -> dict[str, float]:
    """Each topical query word (not in :data:`FUNCTION_WORDS`) with its inverse document frequency in
    the store (``documents`` chunks, ``frequencies``: chunks holding each word): a word the store never
    holds weighs most, one in every chunk least."""
    return {
        token: math.log((documents + 1) / (frequencies.get(token, 0) + 0.5))
        for token in tokens
        if token not in FUNCTION_WORDS
    }


def coverage(text: str, weights: Mapping[str, float]) -> float:
    """Share of the query's word weight that ``text`` holds (1.0 for a query with no topical word)."""
    total = sum(weights.values())
    if total <= 0:
        return 1.0
    held = set(tokenize(text))
    return sum(weight for token, weight in weights.items() if token in held) / total


FLOOR_NAMED_COSINE: Final[float] = 0.5
"""Best cosine under which a query that names something the store has never held (:func:`unknown_names`)
matches nothing stored (:func:`below_floor`). The highest that empties no real question of either
development set (a dev100 question naming a city its evidence never names has a best cosine of 0.59);
docs/benchmarks.md, no match."""

_CALENDAR_WORDS = (
    "january february march april may june july august september october november december jan feb mar "
    "apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday saturday sunday today "
    "yesterday tomorrow"
)
_NOT_NAMES: Final[frozenset[str]] = FUNCTION_WORDS | frozenset(_CALENDAR_WORDS.split())
_EDGE_PUNCTUATION = "\"'()[]{}<>,;:!?.\u201c\u201d\u2018\u2019*_`"
_POSSESSIVE = re.compile(r"['\u2019]s$", re.IGNORECASE)
_FIRST_PERSON_FORMS = re.compile(r"i(?:['\u2019](?:m|ve|d|ll))?", re.IGNORECASE)


def named_words(query: str) -> list[tuple[str, ...]]:
    """The words a query names something by, each as its keyword tokens: written with a capital
    (``Caroline``, ``Montserrat``) or with capitals inside (``OAuth``, ``iPhone``, ``S22``), anywhere
    but at the start of a sentence. ``I`` and its forms, function words, months, weekdays and
    relative days are not names. A query mostly in capitals (a title, a shout) names nothing: its
    capitals say nothing about which words are names."""
    found: list[tuple[str, ...]] = []
    capitalized = eligible = 0
    sentence_start = True
    for raw in query.split():
        word = _POSSESSIVE.sub("", raw.strip(_EDGE_PUNCTUATION))
        starts = sentence_start
        sentence_start = raw.rstrip("\"')]\u201d\u2019").endswith((".", "?", "!", ":"))
        if not word or starts or _FIRST_PERSON_FORMS.fullmatch(word):
            continue
        eligible += 1
        if not any(character.isupper() for character in word):
            continue
        capitalized += 1
        tokens = tuple(token for token in tokenize(word) if len(token) > 1 and token not in _NOT_NAMES)
        if tokens:
            found.append(tokens)
    return [] if capitalized * 2 > eligible else found


def unknown_names(named: Sequence[tuple[str, ...]], frequencies: Mapping[str, int]) -> bool:
    """Whether one of a query's :func:`named_words` is held by no chunk of the store (``frequencies``:
    chunks holding each query token; a token it does not count is not judged): the query asks about
    someone or something never stored."""
    return any(all(frequencies.get(token) == 0 for token in tokens) for tokens in named)


def below_floor(
    ranked: Sequence[Candidate],
    texts: Mapping[str, str],
    weights: Mapping[str, float],
    *,
    floor_cosine: float = FLOOR_COSINE,
    floor_coverage: float = FLOOR_COVERAGE,
    unknown_name: bool = False,
    floor_named_cosine: float = FLOOR_NAMED_COSINE,
) -> bool:
    """Whether nothing stored is close enough to the query to be an answer: no candidate at all, or
    the best cosine under ``floor_cosine`` while none of the first :data:`FLOOR_LOOKS` candidates
    (``ranked``: best first; ``texts``: chunk id -> text) holds ``floor_coverage`` of the query's word
    weight (``weights``, :func:`query_word_weights`). A query with no topical word is judged by the
    cosine alone. Either side alone keeps a query: a paraphrase has the cosine, a looked-up name or
    error code the words. A query that names someone or something the store never held
    (``unknown_name``, :func:`unknown_names`) needs more: a best cosine of ``floor_named_cosine``."""
    if not ranked:
        return True
    best = max(candidate.cosine for candidate in ranked)
    if unknown_name and best < floor_named_cosine:
        return True
    if best >= floor_cosine:
        return False
    if not weights:
        return True
    return all(
        coverage(texts.get(candidate.chunk_id, ""), weights) < floor_coverage
        for candidate in ranked[:FLOOR_LOOKS]
    )
