"""Property tests for canonical JSON (§5.1) and source-ref normalization (§5.3)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from protocol.canonical import canonical_hash, canonical_json, sha256_hex
from protocol.identities import normalize_source_refs
from protocol.records import SourceRef

json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text()
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)


def _pairs(value: Any) -> Any:
    """Value with every dict turned into its ordered list of pairs, so key order is compared too."""
    if isinstance(value, dict):
        return [(key, _pairs(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [_pairs(item) for item in value]
    return value


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *_strings(item)]]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


@given(json_values)
def test_round_trips_through_json_loads_keeping_key_order(value: Any) -> None:
    text = canonical_json(value)
    assert json.loads(text) == value
    assert json.loads(text, object_pairs_hook=lambda pairs: [(k, _pairs(v)) for k, v in pairs]) == _pairs(
        value
    )


@given(json_values)
def test_never_escapes_slash_and_escapes_line_separators(value: Any) -> None:
    text = canonical_json(value)
    strings = _strings(value)
    assert text.count("/") == sum(s.count("/") for s in strings)
    assert "\u2028" not in text and "\u2029" not in text
    assert text.count("\\u2028") >= sum(s.count("\u2028") for s in strings)


plain_text = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters='"\\\u2028\u2029'),
)


@given(plain_text)
def test_non_ascii_and_slash_are_written_raw(text: str) -> None:
    assert canonical_json(text) == '"' + text + '"'


@given(
    st.dictionaries(
        st.text(alphabet="abc/é", max_size=5), st.integers() | st.text(alphabet="xyz/ü"), max_size=5
    )
)
def test_compact_without_spaces(value: dict[str, Any]) -> None:
    text = canonical_json(value)
    assert " " not in text and "\n" not in text
    assert canonical_hash(value) == sha256_hex(text)


def test_fixed_examples() -> None:
    assert canonical_json({"b": 1, "a": [None, True, "x/y"]}) == '{"b":1,"a":[null,true,"x/y"]}'
    assert canonical_json("é\u2028\n\u0001") == '"é\\u2028\\n\\u0001"'


ref_dicts = st.fixed_dictionaries(
    {
        "run_id": st.sampled_from(["", "5", "10", "run-1", "run-2", "é"]),
        "seq": st.integers(-2, 6) | st.sampled_from(["3", "x", None, 2.0]),
    }
)
ref_objects = st.builds(SourceRef, run_id=st.sampled_from(["5", "10", "run-1"]), seq=st.integers(1, 6))
ref_lists = st.lists(ref_dicts | ref_objects, max_size=12)


def _valid_pairs(refs: list[Any]) -> set[tuple[str, int]]:
    pairs: set[tuple[str, int]] = set()
    for ref in refs:
        if isinstance(ref, SourceRef):
            pairs.add((ref.run_id, ref.seq))
            continue
        seq = ref["seq"]
        if isinstance(seq, str) and seq.isdigit():
            seq = int(seq)
        if isinstance(seq, int | float) and ref["run_id"] and int(seq) >= 1:
            pairs.add((ref["run_id"], int(seq)))
    return pairs


@given(ref_lists)
def test_normalize_is_sorted_unique_and_drops_bad_refs(refs: list[Any]) -> None:
    out = normalize_source_refs(refs)
    keys = [(r.run_id.encode("utf-8"), r.seq) for r in out]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)
    assert {(r.run_id, r.seq) for r in out} == _valid_pairs(refs)


@given(ref_lists)
def test_normalize_is_idempotent(refs: list[Any]) -> None:
    once = normalize_source_refs(refs)
    assert normalize_source_refs(once) == once


@given(
    st.lists(ref_dicts | ref_objects, max_size=8).flatmap(
        lambda xs: st.tuples(st.just(xs), st.permutations(xs))
    )
)
def test_normalize_is_order_insensitive(pair: tuple[list[Any], list[Any]]) -> None:
    original, shuffled = pair
    assert normalize_source_refs(shuffled) == normalize_source_refs(original)


def test_normalize_sorts_run_ids_bytewise_not_numerically() -> None:
    out = normalize_source_refs(
        [{"run_id": "5", "seq": 1}, {"run_id": "10", "seq": 2}, {"run_id": "10", "seq": 1}]
    )
    assert [(r.run_id, r.seq) for r in out] == [("10", 1), ("10", 2), ("5", 1)]
