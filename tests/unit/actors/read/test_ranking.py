"""The default hybrid ranking (``actors.read.ranking``): normalized fusion, neighbour context,
speaker and time match, and the no-match floor, alone and on a real index."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from actors.indexer.sync import synchronize
from actors.read.ranking import (
    FLOOR_COSINE,
    FLOOR_COVERAGE,
    FLOOR_LOOKS,
    FLOOR_NAMED_COSINE,
    Candidate,
    below_floor,
    coverage,
    fused_scores,
    named_words,
    query_speaker,
    query_word_weights,
    rank_candidates,
    text_speaker,
    unknown_names,
)
from actors.read.retrieval import retrieve
from persistence.search.request import TimeWindow
from persistence.semantic import SemanticIndex
from persistence.semantic.keyword import KeywordIndex
from persistence.writers.store import Store
from tests.unit.persistence.semantic.conftest import Memories, RecordingWriter, semantic_settings


def test_fusion_is_on_z_scores_so_the_scale_of_bm25_does_not_matter() -> None:
    small = [Candidate("a", 0.9, 1.0), Candidate("b", 0.5, 2.0), Candidate("c", 0.1, 0.0)]
    large = [Candidate(c.chunk_id, c.cosine, c.keyword * 1000) for c in small]
    assert list(fused_scores(small)) == pytest.approx(list(fused_scores(large)))
    assert rank_candidates(small, neighbour_share=0) == rank_candidates(large, neighbour_share=0)
    # the weight decides between the two sides
    assert rank_candidates(small, vector_weight=1.0)[0] == "a"
    assert rank_candidates(small, vector_weight=0.0)[0] == "b"


def test_a_flat_side_counts_for_nothing() -> None:
    same_cosine = [Candidate("a", 0.5, 1.0), Candidate("b", 0.5, 3.0)]
    assert rank_candidates(same_cosine) == ["b", "a"]
    assert rank_candidates([]) == []


def test_an_event_gains_a_share_of_its_better_neighbour() -> None:
    candidates = [
        Candidate("lone", 0.62, 2.0, ("s1", 40)),
        Candidate("answer-part", 0.60, 2.0, ("s1", 11)),
        Candidate("question", 0.95, 9.0, ("s1", 10)),
        Candidate("other-session", 0.10, 0.0, ("s2", 12)),
    ]
    without = rank_candidates(candidates, neighbour_share=0)
    with_context = rank_candidates(candidates, neighbour_share=0.5)
    assert without.index("lone") < without.index("answer-part")
    assert with_context.index("answer-part") < with_context.index("lone")
    # a neighbour in another session, or a poor one, gives nothing
    assert rank_candidates(candidates[3:], neighbour_share=0.5) == ["other-session"]


def test_speaker_and_time_match_add_bonuses() -> None:
    candidates = [
        Candidate("assistant", 0.60, 2.0, speaker="assistant"),
        Candidate("user", 0.58, 2.0, speaker="user"),
        Candidate("far", 0.10, 0.0),
    ]
    assert rank_candidates(candidates)[0] == "assistant"
    assert rank_candidates(candidates, "user")[0] == "user"
    dated = [
        Candidate("old", 0.60, 2.0),
        Candidate("in-window", 0.58, 2.0, in_window=True),
        Candidate("far", 0.10, 0.0),
    ]
    assert rank_candidates(dated)[0] == "in-window"
    assert rank_candidates(dated, time_bonus=0)[0] == "old"


@pytest.mark.parametrize(
    ("query", "speaker"),
    [
        ("What did I say about my sister's wedding?", "user"),
        ("Where do I keep the spare key", "user"),
        ("what did you recommend for the rate limiter", "assistant"),
        ("Can you remind me of your advice on sleep?", "assistant"),
        ("I forgot what you suggested for dinner", "assistant"),
        ("Can you tell me how my savings plan went?", "user"),  # asks the assistant, about the user
        ("Could you help me plan my week?", "user"),
        ("How would you suggest I split my study time?", "user"),  # a request now, not past advice
        ("the deploy script for staging", None),
        ("When did Caroline meet the artists?", None),
    ],
)
def test_query_speaker(query: str, speaker: str | None) -> None:
    assert query_speaker(query) == speaker


def test_text_speaker_reads_the_event_label() -> None:
    assert text_speaker("User: hello") == "user"
    assert text_speaker("Assistant: hi\nTool call bash: ls") == "assistant"
    assert text_speaker("Tool result bash: ok") is None
    assert text_speaker("user said hello") is None


def test_query_words_weigh_by_rarity_in_the_store() -> None:
    weights = query_word_weights(["what", "did", "i", "say", "about", "gastritis"], 100, {"say": 40})
    assert set(weights) == {"say", "gastritis"}  # function words carry no topic
    assert weights["gastritis"] > weights["say"] > 0  # a word the store never holds weighs most
    assert coverage("my gastritis is back", weights) == pytest.approx(
        weights["gastritis"] / (weights["gastritis"] + weights["say"])
    )
    assert coverage("anything", {}) == 1.0


def test_the_floor_pure() -> None:
    far = [Candidate("a", FLOOR_COSINE - 0.01, 3.0), Candidate("b", 0.05, 1.0)]
    texts = {"a": "the weather in spring", "b": "error E1234 in the parser"}
    revenue = query_word_weights(["quarterly", "revenue"], 2, {})
    lookup = query_word_weights(["e1234", "parser"], 2, {"e1234": 1, "parser": 1})
    assert below_floor(far, texts, revenue)
    assert not below_floor(far, texts, lookup)  # the words of the lookup are held
    assert not below_floor([Candidate("a", FLOOR_COSINE, 0.0)], texts, revenue)  # close in meaning
    assert below_floor(far, texts, {})  # no topical word: the cosine alone decides
    assert below_floor([], texts, lookup)
    # a candidate past the ones read does not keep the query
    crowd = [Candidate(str(n), 0.1, 0.0) for n in range(FLOOR_LOOKS)] + [Candidate("b", 0.05, 1.0)]
    assert below_floor(crowd, texts, lookup)
    # holding a small share of the query's weight is not enough
    partial = {"weather": 1.0, "quarterly": 4.0, "revenue": 4.0}
    assert coverage(texts["a"], partial) < FLOOR_COVERAGE and below_floor(far, texts, partial)


def test_the_keyword_index_counts_the_chunks_holding_each_word() -> None:
    index = KeywordIndex.build([(1, "the parser fails"), (2, "the parser works"), (3, "tomatoes")])
    assert index.document_frequencies(["parser", "tomatoes", "peru"]) == (
        3,
        {"parser": 2, "tomatoes": 1, "peru": 0},
    )
    assert KeywordIndex.build([(1, "")]).document_frequencies(["x"]) == (1, {"x": 0})


class TableEmbedder:
    """Fixed vectors for known texts; anything else points along axis 3."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.table.get(text, [0.0, 0.0, 0.0, 1.0]) for text in texts]


@pytest.fixture
def corpus(store: Store, db_path: Path) -> tuple[SemanticIndex, TableEmbedder, str]:
    memories = Memories(db_path)
    table = {
        "Booked the dentist for Tuesday at nine": [1.0, 0.0, 0.0, 0.0],
        "The parser fails with error E1234 on empty input": [0.0, 1.0, 0.0, 0.0],
        "Planted tomatoes along the south fence": [0.0, 0.0, 1.0, 0.0],
        "when is my dentist appointment": [0.9, 0.0, 0.43589, 0.0],  # cosine 0.9 with the first
        "what is the capital of Peru": [0.0, 0.0, 0.0, 1.0],  # cosine 0 with everything stored
        "E1234 parser": [0.0, 0.0, 0.0, 1.0],  # a lookup whose vector matches nothing
    }
    dentist = memories.observation("Booked the dentist for Tuesday at nine")
    memories.observation("The parser fails with error E1234 on empty input")
    memories.observation("Planted tomatoes along the south fence")
    embedder = TableEmbedder(table)
    index = SemanticIndex(db_path, semantic_settings(), RecordingWriter(store))
    while not synchronize(index, embedder).complete:
        pass
    return index, embedder, dentist


def test_the_floor_on_a_corpus_with_and_without_a_match(
    corpus: tuple[SemanticIndex, TableEmbedder, str],
) -> None:
    index, embedder, dentist = corpus
    found = retrieve(index, "when is my dentist appointment", embedder, limit=5)
    assert not found.no_match and found.results[0].memory_id == dentist
    nothing = retrieve(index, "what is the capital of Peru", embedder, limit=5)
    assert nothing.no_match and nothing.results == ()
    lookup = retrieve(index, "E1234 parser", embedder, limit=5)
    assert not lookup.no_match and "E1234" in lookup.results[0].content
    unfloored = retrieve(index, "what is the capital of Peru", embedder, limit=5, floor=False)
    assert not unfloored.no_match and len(unfloored.results) >= 1


def test_a_time_window_lifts_the_memories_dated_in_it(store: Store, db_path: Path) -> None:
    """Two memories alike to the query on both sides: the one dated in the window comes first,
    whichever of the two it is."""
    memories = Memories(db_path)
    early = memories.observation("deploy notes alpha", timestamp="2026-09-01 10:00")
    late = memories.observation("deploy notes beta", timestamp="2026-09-11 10:00")
    embedder = TableEmbedder(
        {
            "deploy notes alpha": [1.0, 0.0, 0.0, 0.0],
            "deploy notes beta": [1.0, 0.0, 0.0, 0.0],
            "deploy notes": [1.0, 0.0, 0.0, 0.0],
        }
    )
    index = SemanticIndex(db_path, semantic_settings(), RecordingWriter(store))
    while not synchronize(index, embedder).complete:
        pass
    for wanted, window in (
        (early, TimeWindow("2026-09-01 00:00", "2026-09-02 00:00")),
        (late, TimeWindow("2026-09-11 00:00", "2026-09-12 00:00")),
    ):
        found = retrieve(index, "deploy notes", embedder, limit=2, time_window=window)
        assert found.results[0].memory_id == wanted


def test_a_no_match_answer_says_so() -> None:
    from actors.read.hybrid import hybrid_answer
    from protocol.semantic import NO_MATCH_MESSAGE, Retrieval

    answer = hybrid_answer("capital of Peru", 10, Retrieval((), False, False, (), no_match=True))
    assert answer["no_match"] is True and answer["count"] == 0 and answer["results"] == []
    assert answer["message"] == NO_MATCH_MESSAGE
    assert "no_match" not in hybrid_answer("anything", 10, Retrieval((), False, False))


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("When did Caroline go to the LGBTQ support group?", [("caroline",), ("lgbtq",)]),
        ("What did Melanie's kids paint?", [("melanie",)]),  # the possessive is not a word of its own
        ("How long does probate take in Montserrat?", [("montserrat",)]),
        ("what did I say about the iPhone and OAuth?", [("iphone",), ("oauth",)]),  # capitals inside
        ("Which came first, the Galaxy S22 or the XPS 13?", [("galaxy",), ("s22",), ("xps",)]),
        ("Caroline said what about it?", []),  # the first word of a sentence is capitalized anyway
        ("I moved. Denver was cold.", []),  # so is the first word after a full stop
        ("What did I do in March, on Monday, Today?", []),  # months, weekdays, relative days
        ("What did I and I'm and I've say", []),  # "I" and its forms
        ("What Is The Best Way To Cook Rice", []),  # a title: capitals name nothing
        ("what did we decide about the cache", []),
        ("Did I meet Caroline?", [("caroline",)]),  # "I" and the first word do not make it a title
    ],
)
def test_named_words(query: str, named: list[tuple[str, ...]]) -> None:
    assert named_words(query) == named


def test_a_name_the_store_never_held_is_unknown() -> None:
    named = named_words("When did Caroline meet the LGBTQ group?")
    assert unknown_names(named, {"caroline": 0, "lgbtq": 3, "group": 9})
    assert not unknown_names(named, {"caroline": 2, "lgbtq": 3})
    # a word the keyword side did not count (no keyword index yet) is not judged
    assert not unknown_names(named, {})
    # a name of several tokens is unknown only when none of them is held
    assert not unknown_names([("flask", "login")], {"flask": 0, "login": 4})


def test_the_floor_for_a_query_naming_something_never_stored() -> None:
    texts = {"a": "we went hiking", "b": "hiking boots"}
    weights = query_word_weights(["hiking"], 2, {"hiking": 2})
    held = [Candidate("a", FLOOR_NAMED_COSINE - 0.01, 1.0), Candidate("b", 0.2, 1.0)]
    # The query's words are held, so the name-blind floor keeps it ...
    assert not below_floor(held, texts, weights)
    # ... but it names someone the store never held, and nothing is close enough in meaning.
    assert below_floor(held, texts, weights, unknown_name=True)
    close = [Candidate("a", FLOOR_NAMED_COSINE, 1.0)]
    assert not below_floor(close, texts, weights, unknown_name=True)
