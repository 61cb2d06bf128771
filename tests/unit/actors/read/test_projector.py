"""The compaction projection text (reference §10.2)."""

from __future__ import annotations

import re

from actors.read.projector import ACTIVE_MEMORY_HEADER, PROJECTION_METADATA_BASE, render_active_memory
from tests.unit.actors.read.factories import active_reflection, hex_id, observation


def _body(text: str) -> str:
    assert text.startswith(ACTIVE_MEMORY_HEADER + "\n\n")
    return text[len(ACTIVE_MEMORY_HEADER) + 2 :]


def test_reference_example_layout() -> None:
    text = render_active_memory(
        [
            active_reflection("aaaaaaaaaaa2", "Second", position=2),
            active_reflection("aaaaaaaaaaa1", "First", position=1),
        ],
        [
            observation(
                "bbbbbbbbbbb2",
                "Later observation",
                timestamp="2026-07-26 13:00",
                relevance="high",
                refs=(("5", 9),),
            ),
            observation(
                "bbbbbbbbbbb1", "Earlier observation", timestamp="2026-07-26 12:00", refs=(("5", 3),)
            ),
        ],
    )
    assert _body(text) == (
        "## Reflections\n"
        "[aaaaaaaaaaa1] First\n"
        "[aaaaaaaaaaa2] Second\n"
        "\n"
        "## Observations\n"
        "[bbbbbbbbbbb1] 2026-07-26 12:00 [medium] Earlier observation\n"
        "[bbbbbbbbbbb2] 2026-07-26 13:00 [high] Later observation"
    )
    assert not text.endswith("\n")


def test_both_empty_is_empty_string() -> None:
    assert render_active_memory([], []) == ""


def test_empty_sections_show_none() -> None:
    only_observation = _body(render_active_memory([], [observation("b1", "x")]))
    assert only_observation.startswith("## Reflections\n(none)\n\n## Observations\n[b10000000000] ")
    only_reflection = _body(render_active_memory([active_reflection("a1", "r")], []))
    assert only_reflection == "## Reflections\n[a10000000000] r\n\n## Observations\n(none)"


def test_observations_come_in_source_order_and_full_ids_never_appear() -> None:
    reflections = [active_reflection("a2", "two", position=0), active_reflection("a1", "one", position=0)]
    # One minute: the observation of events 7-9 comes before the one of events 15-19 whatever
    # their ids; two of the same first event keep the order given (recorded order); an observation
    # citing only another session's events is placed by its part's start (1).
    observations = [
        observation("b1", "fifteen", timestamp="2026-01-01 00:00", refs=(("5", 15), ("5", 19))),
        observation("b9", "seven", timestamp="2026-01-01 00:00", refs=(("5", 7), ("5", 9))),
        observation("b0", "seven again", timestamp="2026-01-01 00:00", refs=(("5", 7),)),
        observation("b5", "elsewhere", timestamp="2026-01-01 00:00", refs=(("other", 2),)),
    ]
    body = _body(render_active_memory(reflections, observations))
    assert body.index("] one") < body.index("] two")
    shown = [line.rsplit("] ", 1)[1] for line in body.split("## Observations\n")[1].splitlines()]
    assert shown == ["elsewhere", "seven", "seven again", "fifteen"]
    assert "[b90000000000] 2026-01-01 00:00 [medium] seven" in body
    assert hex_id("a1") not in body and hex_id("b1") not in body


def test_content_is_verbatim_and_refs_are_hidden() -> None:
    record = observation("b1", "two  spaces", refs=(("5", 42),))
    body = _body(render_active_memory([], [record]))
    assert "two  spaces" in body
    assert "42" not in body


def test_header_has_no_ids_and_metadata_base() -> None:
    assert not re.search(r"\[[0-9a-f]{12}\]", ACTIVE_MEMORY_HEADER)
    assert "recall" in ACTIVE_MEMORY_HEADER
    assert PROJECTION_METADATA_BASE == {
        "om_source": "observational_memory",
        "om_projection": "active_durable_memory",
    }
