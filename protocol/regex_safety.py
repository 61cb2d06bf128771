"""A static check for regular expressions whose backtracking can explode (pure; issue 40 item 12).

Python's ``re`` backtracks, so a pattern such as ``(a+)+$`` takes time exponential in the length
of a long run it fails on, and a redaction pattern runs on every event the Observer, the indexer
and ``recall`` read. :func:`backtracking_risk` refuses the two shapes behind nearly every such
pattern, on the parsed pattern (``re._parser``, the parser ``re.compile`` itself uses):

- a **nested variable quantifier**: a repeat of varying count (``+``, ``*``, ``{2,5}``) inside
  another repeat of more than one (``(a+)+``, ``(\\w+\\s?)*``, ``(?:x*y?)+``);
- **overlapping alternatives under a repeat**: two alternatives of a repeated group that can start
  with the same literal character (``(a|ab)+`` after factoring, ``(foo|fob)*``).

A fixed count inside a repeat (``(\\d{3}-)+``), possessive quantifiers (``a++``) and atomic groups
(``(?>a+)+``) do not backtrack into themselves and are accepted. The check is conservative in
one direction only: every pattern it accepts has no nested variable quantifier; some patterns it
refuses would be fast on real text (say ``(?:ab+)+``), and can be written without the nesting.
"""

from __future__ import annotations

import importlib
from typing import Any, Final

# The parser ``re.compile`` uses (no public API; typeshed only stubs its deprecated ``sre_*`` names).
parser: Any = importlib.import_module("re._parser")
constants: Any = importlib.import_module("re._constants")

_REPEATS: Final = (constants.MAX_REPEAT, constants.MIN_REPEAT)


def backtracking_risk(pattern: str) -> str | None:
    """Why ``pattern`` can backtrack exponentially (``"nested quantifier"``, ``"overlapping
    alternatives"``), or ``None``. ``pattern`` must compile."""
    return _scan(parser.parse(pattern), inside_repeat=False)


def _varies(low: int, high: int) -> bool:
    return low != high


def _scan(items: Any, inside_repeat: bool) -> str | None:
    for op, value in items:
        found: str | None = None
        if op in _REPEATS:
            low, high, body = value
            if inside_repeat and _varies(low, high):
                return "nested quantifier"
            repeats = high > 1
            if repeats and _overlapping_alternatives(body):
                return "overlapping alternatives"
            found = _scan(body, inside_repeat or repeats)
        elif op is constants.POSSESSIVE_REPEAT or op is constants.ATOMIC_GROUP:
            body = value[2] if op is constants.POSSESSIVE_REPEAT else value
            found = _scan(body, inside_repeat=False)  # no backtracking into it
        elif op is constants.SUBPATTERN:
            found = _scan(value[3], inside_repeat)
        elif op is constants.BRANCH:
            for branch in value[1]:
                found = found or _scan(branch, inside_repeat)
        elif op in (constants.ASSERT, constants.ASSERT_NOT):
            found = _scan(value[1], inside_repeat)
        elif op is constants.GROUPREF_EXISTS:
            for branch in value[1:]:
                if branch is not None:
                    found = found or _scan(branch, inside_repeat)
        if found is not None:
            return found
    return None


def _overlapping_alternatives(items: Any) -> bool:
    """Whether a branch of ``items`` (at its top level or in a group) has two alternatives that can
    start with the same literal character."""
    for op, value in items:
        if op is constants.SUBPATTERN and _overlapping_alternatives(value[3]):
            return True
        if op is constants.BRANCH:
            seen: set[int] = set()
            for branch in value[1]:
                first = _first_literals(branch)
                if first & seen:
                    return True
                seen |= first
    return False


def _first_literals(items: Any) -> set[int]:
    """The literal characters an alternative can start with, as far as they are plain literals."""
    for op, value in items:
        if op is constants.LITERAL:
            return {value}
        if op is constants.SUBPATTERN:
            return _first_literals(value[3])
        if op is constants.IN and all(kind is constants.LITERAL for kind, _ in value):
            return {char for _, char in value}
        return set()
    return set()
