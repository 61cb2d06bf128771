"""The Reflector and Dropper system prompts name their tools and the line format the cores build."""

from __future__ import annotations

from actors.models.prompts import DROPPER_SYSTEM_PROMPT, REFLECTOR_SYSTEM_PROMPT
from protocol.tool_specs import DROP_OBSERVATIONS, RECORD_REFLECTIONS


def test_prompts_name_their_tools_and_coverage_tiers() -> None:
    assert RECORD_REFLECTIONS in REFLECTOR_SYSTEM_PROMPT
    assert DROP_OBSERVATIONS in DROPPER_SYSTEM_PROMPT
    assert "[coverage: none|partial|strong]" in REFLECTOR_SYSTEM_PROMPT
    assert "[coverage: none|partial|strong]" in DROPPER_SYSTEM_PROMPT
    assert "supporting_observation_ids" in REFLECTOR_SYSTEM_PROMPT
