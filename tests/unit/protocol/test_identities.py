"""Identity formulas (reference §5) against Appendix A.2 vectors and hand-written canonical strings."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from protocol.canonical import canonical_json
from protocol.identities import (
    chunk_key,
    content_hash,
    coverage_key,
    is_observation_timestamp,
    observation_id,
    observation_set_hash,
    observe_job_id,
    part_digest,
    reflection_id,
    semantic_chunk_id,
    source_digest,
    source_refs_json,
    threshold_generation_id,
)
from protocol.records import SourceRef

OBS_ID = "f4d603872c12a854dd3a509549cf8de192a4f0d09a130285de1409635b613ce9"
SET_HASH = "c8209a00d5ad89d802d512ef6f53c8f8dabb827a46d78b07de794469846d93c6"
GENERATION_ID = "dce3b41ebc99d4512db4d8e1f3b17fa344be3a89840914ccd42f0128bc5a3435"
OBSERVE_JOB_ID = "2f4cc349a58cedcbce5459681d2014c94b519d42c0c5e51a3e0b91f3c3f0ca58"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# --- Appendix A.2 -------------------------------------------------------------------------------


def test_observation_id_vector() -> None:
    refs = [{"run_id": "run-1", "seq": 1}]
    assert observation_id("run-1", "1", "2026-07-26 10:00", "User prefers feature flags", refs) == OBS_ID


def test_observation_id_vector_canonical_text() -> None:
    text = (
        '{"type":"observation-v1","run_id":"run-1","observer_schema_version":"1",'
        '"timestamp":"2026-07-26 10:00","content":"User prefers feature flags",'
        '"source_refs":[{"run_id":"run-1","seq":1}]}'
    )
    assert sha(text) == OBS_ID


def test_observation_id_trims_content_and_normalizes_refs() -> None:
    messy_refs: list[dict[str, Any]] = [
        {"run_id": "run-1", "seq": 1},
        {"run_id": "run-1", "seq": "1"},
        {"run_id": "", "seq": 4},
        {"run_id": "run-1", "seq": 0},
    ]
    assert (
        observation_id("run-1", "1", "2026-07-26 10:00", "  User prefers feature flags\n", messy_refs)
        == OBS_ID
    )
    assert (
        observation_id(
            "run-1", "1", "2026-07-26 10:00", "User prefers feature flags", [SourceRef(run_id="run-1", seq=1)]
        )
        == OBS_ID
    )


def test_observation_id_changes_with_each_input() -> None:
    refs = [{"run_id": "run-1", "seq": 1}]
    base = ("run-1", "1", "2026-07-26 10:00", "User prefers feature flags", refs)
    variants = [
        ("run-2", *base[1:]),
        (base[0], "2", *base[2:]),
        (*base[:2], "2026-07-26 10:01", *base[3:]),
        (*base[:3], "User prefers flags", base[4]),
        (*base[:4], [{"run_id": "run-1", "seq": 2}]),
    ]
    ids = {observation_id(*v) for v in variants}
    assert OBS_ID not in ids
    assert len(ids) == len(variants)


def test_observation_set_hash_vector() -> None:
    assert observation_set_hash("run-1", [OBS_ID]) == SET_HASH
    assert observation_set_hash("run-1", [OBS_ID, OBS_ID]) == SET_HASH


def test_threshold_generation_id_vector() -> None:
    assert threshold_generation_id("run-1", None, SET_HASH, "llama_cpp_test/test", "1") == GENERATION_ID
    assert (
        threshold_generation_id("run-1", GENERATION_ID, SET_HASH, "llama_cpp_test/test", "1") != GENERATION_ID
    )


def test_observe_job_id_vector() -> None:
    assert observe_job_id("run-1", 2, "completed", "1", "1") == OBSERVE_JOB_ID
    assert sha("run-1|2|completed|1|1") == OBSERVE_JOB_ID


# --- hand-checked cases -------------------------------------------------------------------------


def test_observation_set_hash_sorts_bytewise_and_dedupes() -> None:
    expected = sha('{"type":"observation-set-v1","run_id":"r","observation_ids":["B","a","b"]}')
    assert observation_set_hash("r", ["b", "a", "B", "b"]) == expected


def test_reflection_id_sorts_and_dedupes_supporting_ids() -> None:
    expected = sha(
        '{"type":"reflection-v1","run_id":"run-1","reflector_schema_version":"1",'
        '"content":"Uses feature flags","supporting_observation_ids":["aa","bb","cc"]}'
    )
    assert reflection_id("run-1", "1", "Uses feature flags", ["cc", "aa", "bb", "aa"]) == expected
    assert reflection_id("run-1", "1", "Uses feature flags", ("bb", "cc", "aa")) == expected


def test_reflection_id_content_is_not_trimmed() -> None:
    assert reflection_id("r", "1", "x ", ["a"]) != reflection_id("r", "1", "x", ["a"])


def test_source_digest_keeps_block_order_and_key_order() -> None:
    blocks: list[dict[str, Any]] = [
        {"kind": "user", "rendered_text": "hi/there", "seq": "2", "run_id": "r"},
        {"run_id": "r", "seq": 1, "kind": "outcome", "rendered_text": "é"},
    ]
    expected = sha(
        '[{"run_id":"r","seq":2,"kind":"user","rendered_text":"hi/there"},'
        '{"run_id":"r","seq":1,"kind":"outcome","rendered_text":"é"}]'
    )
    assert source_digest(blocks) == expected
    assert source_digest(list(reversed(blocks))) != expected


def test_chunk_key_hand_checked() -> None:
    digest = "d" * 64
    expected = sha(
        '{"type":"observer-chunk-v1","run_id":"5","source_start_seq":3,"source_end_seq":9,'
        '"renderer_version":"1","observer_schema_version":"2","source_digest":"'
        + digest
        + '","part_count":2}'
    )
    assert chunk_key("5", 3, 9, "1", "2", digest, 2) == expected
    assert chunk_key("5", 3, 9, "1", "2", digest, 3) != expected


def test_part_digest_is_raw_bytes_not_json() -> None:
    assert part_digest('a "quoted"\nline') == sha('a "quoted"\nline')
    assert part_digest("x") != sha(canonical_json("x"))


def test_coverage_key_hand_checked() -> None:
    key = "k" * 64
    pd = part_digest("part text")
    expected = sha(
        '{"type":"observer-chunk-part-v1","chunk_key":"'
        + key
        + '","part_index":1,"part_digest":"'
        + pd
        + '"}'
    )
    assert coverage_key(key, 1, pd) == expected
    assert coverage_key(key, 2, pd) != expected


def test_content_hash_is_plain_sha256() -> None:
    assert content_hash("héllo") == hashlib.sha256("héllo".encode()).hexdigest()


def test_semantic_chunk_id_uses_literal_backslash_zero() -> None:
    expected = sha("observation:abc\\0" + "3" + "\\0" + "chunk text")[:32]
    assert semantic_chunk_id("observation", "abc", 3, "chunk text") == expected
    assert len(expected) == 32
    with_nul = hashlib.sha256(b"observation:abc\x003\x00chunk text").hexdigest()[:32]
    assert semantic_chunk_id("observation", "abc", 3, "chunk text") != with_nul


def test_source_refs_json_is_compact_and_normalized() -> None:
    refs = [
        {"run_id": "b", "seq": 2},
        {"run_id": "a", "seq": 10},
        {"run_id": "a", "seq": 9},
        {"run_id": "b", "seq": 2},
    ]
    assert source_refs_json(refs) == '[{"run_id":"a","seq":9},{"run_id":"a","seq":10},{"run_id":"b","seq":2}]'  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("2026-07-26 10:00", True),
        ("2026-02-30 99:99", True),  # format only, no calendar check
        ("2026-07-26T10:00", False),
        ("2026-07-26 10:00:00", False),
        ("26-07-26 10:00", False),
        ("", False),
    ],
)
def test_is_observation_timestamp(value: str, ok: bool) -> None:
    assert is_observation_timestamp(value) is ok
