"""Redaction patterns that can backtrack exponentially are refused (issue 40 item 12)."""

from __future__ import annotations

import pytest

from protocol.errors import SettingsError
from protocol.redact import BUILTIN_PATTERNS, compile_custom_patterns
from protocol.regex_safety import backtracking_risk


@pytest.mark.parametrize(
    ("pattern", "risk"),
    [
        (r"(a+)+$", "nested quantifier"),
        (r"(\w+\s?)*$", "nested quantifier"),
        (r"(?:x*y?)+", "nested quantifier"),
        (r"(x+x+)+y", "nested quantifier"),
        (r"((ab)*c)*", "nested quantifier"),
        (r"(?=(a+)+)b", "nested quantifier"),
        (r"(?:aa|ab|b)+", "overlapping alternatives"),
        # Alternatives that share a first character through a class, ``.`` or case folding: the
        # first took 200 s on 30 characters, and each passed the check that compared literals only.
        (r"(?:.|a)+\Z", "overlapping alternatives"),
        (r"(?:\d|1[0-9])+\Z", "overlapping alternatives"),
        (r"(?:[a-f]x|cy)+\Z", "overlapping alternatives"),
        (r"(?:[^b]x|ay)*\Z", "overlapping alternatives"),
        (r"(?:\wx|_y)+\Z", "overlapping alternatives"),
        (r"(?i)(?:ax|Ay)+\Z", "overlapping alternatives"),
        (r"(?i:(?:ax|Ay)+)\Z", "overlapping alternatives"),
        (r"(?:\bax|a?y)+\Z", "overlapping alternatives"),
    ],
)
def test_exponential_shapes_are_named(pattern: str, risk: str) -> None:
    assert backtracking_risk(pattern) == risk


@pytest.mark.parametrize(
    "pattern",
    [
        r"sk-[A-Za-z0-9]{20,}",
        r"internal-[0-9]+",
        r"(\d{3}-)+\d{4}",  # a fixed count inside a repeat
        r"(?:[A-Z0-9]++ )*KEY",  # possessive inside
        r"(?>a+)+b",  # atomic group
        r"(?:foo|bar)-\d+",
        r"(?:\s|,)+",
        r"ACME-[A-F0-9]{32}",
        r"(?:\sx|,y)+",  # classes that share no character
        r"(?:\dx|[a-f]y)+",
        r"(?:ax|Ay)+",  # case counts without (?i)
        r"(?i)(?-i:ax|Ay)+",
    ],
)
def test_ordinary_patterns_pass(pattern: str) -> None:
    assert backtracking_risk(pattern) is None


def test_every_builtin_pattern_passes_the_check() -> None:
    assert [kind for kind, pattern in BUILTIN_PATTERNS if backtracking_risk(pattern)] == []


def test_a_catastrophic_custom_pattern_is_a_settings_error_naming_its_entry_not_its_text() -> None:
    with pytest.raises(SettingsError) as info:
        compile_custom_patterns([r"internal-[0-9]+", r"(secretword+)+$"])
    message = str(info.value)
    assert "entry #2" in message and "nested quantifier" in message and "secretword" not in message
    assert compile_custom_patterns([r"internal-[0-9]+"]) == (r"internal-[0-9]+",)
    with pytest.raises(SettingsError, match=r"entry #1 can take exponential time .*overlapping alternatives"):
        compile_custom_patterns([r"(?:.|a)+\Z"])
