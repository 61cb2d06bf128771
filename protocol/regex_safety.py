"""A static check for regular expressions whose backtracking can explode (pure; issue 40 item 12).

Python's ``re`` backtracks, so a pattern such as ``(a+)+$`` takes time exponential in the length
of a long run it fails on, and a redaction pattern runs on every event the Observer, the indexer
and ``recall`` read. :func:`backtracking_risk` refuses the two shapes behind nearly every such
pattern, on the parsed pattern (``re._parser``, the parser ``re.compile`` itself uses):

- a **nested variable quantifier**: a repeat of varying count (``+``, ``*``, ``{2,5}``) inside
  another repeat of more than one (``(a+)+``, ``(\\w+\\s?)*``, ``(?:x*y?)+``);
- **overlapping alternatives under a repeat**: two alternatives of a repeated group that can start
  with the same character (``(foo|fob)*``, ``(?:.|a)+``, ``(?:\\d|1[0-9])+``, ``(?i)(?:a|Ab)+``):
  literals, classes, class escapes, ``.`` and case folding are compared character by character
  (over the Basic Multilingual Plane); a start it cannot tell counts as every character.

A fixed count inside a repeat (``(\\d{3}-)+``), possessive quantifiers (``a++``) and atomic groups
(``(?>a+)+``) do not backtrack into themselves and are accepted. The check is conservative in
one direction only: every pattern it accepts has no nested variable quantifier; some patterns it
refuses would be fast on real text (say ``(?:ab+)+``), and can be written without the nesting.
"""

from __future__ import annotations

import functools
import importlib
import re
from typing import Any, Final

# The parser ``re.compile`` uses (no public API; typeshed only stubs its deprecated ``sre_*`` names).
parser: Any = importlib.import_module("re._parser")
constants: Any = importlib.import_module("re._constants")

_REPEATS: Final = (constants.MAX_REPEAT, constants.MIN_REPEAT)


def backtracking_risk(pattern: str) -> str | None:
    """Why ``pattern`` can backtrack exponentially (``"nested quantifier"``, ``"overlapping
    alternatives"``), or ``None``. ``pattern`` must compile."""
    parsed = parser.parse(pattern)
    return _scan(parsed, inside_repeat=False, fold=bool(parsed.state.flags & re.IGNORECASE))


def _varies(low: int, high: int) -> bool:
    return low != high


def _scan(items: Any, inside_repeat: bool, fold: bool) -> str | None:
    for op, value in items:
        found: str | None = None
        if op in _REPEATS:
            low, high, body = value
            if inside_repeat and _varies(low, high):
                return "nested quantifier"
            repeats = high > 1
            if repeats and _overlapping_alternatives(body, fold):
                return "overlapping alternatives"
            found = _scan(body, inside_repeat or repeats, fold)
        elif op is constants.POSSESSIVE_REPEAT or op is constants.ATOMIC_GROUP:
            body = value[2] if op is constants.POSSESSIVE_REPEAT else value
            found = _scan(body, inside_repeat=False, fold=fold)  # no backtracking into it
        elif op is constants.SUBPATTERN:
            found = _scan(value[3], inside_repeat, _folds(value, fold))
        elif op is constants.BRANCH:
            for branch in value[1]:
                found = found or _scan(branch, inside_repeat, fold)
        elif op in (constants.ASSERT, constants.ASSERT_NOT):
            found = _scan(value[1], inside_repeat, fold)
        elif op is constants.GROUPREF_EXISTS:
            for branch in value[1:]:
                if branch is not None:
                    found = found or _scan(branch, inside_repeat, fold)
        if found is not None:
            return found
    return None


def _folds(subpattern: Any, fold: bool) -> bool:
    """Whether a group's body matches ignoring case (``(?i:...)`` turns it on, ``(?-i:...)`` off)."""
    _group, add_flags, del_flags, _body = subpattern
    if add_flags & re.IGNORECASE:
        return True
    return fold and not del_flags & re.IGNORECASE


def _overlapping_alternatives(items: Any, fold: bool) -> bool:
    """Whether a branch of ``items`` (at its top level or in a group) has two alternatives that can
    start with the same character (``(?:.|a)``, ``(?:\\d|1[0-9])``, ``(?i)(?:a|Ab)``)."""
    for op, value in items:
        if op is constants.SUBPATTERN and _overlapping_alternatives(value[3], _folds(value, fold)):
            return True
        if op is constants.BRANCH:
            seen: set[int] = set()
            for branch in value[1]:
                first = _first_chars(branch, fold)
                if first & seen:
                    return True
                seen |= first
    return False


_PLANE: Final = 0x10000
"""Characters are compared over the Basic Multilingual Plane (what a class holds past it is not
looked at: real patterns do not tell characters apart only there)."""


@functools.cache
def _every_char() -> frozenset[int]:
    return frozenset(range(_PLANE))


@functools.cache
def _category_chars(name: str) -> frozenset[int]:
    """The characters of a class escape (``\\d``, ``\\W``, ...) by its parser name; every
    character for a category this module does not know (conservative: it overlaps anything)."""
    escapes = {"DIGIT": r"\d", "SPACE": r"\s", "WORD": r"\w"}
    kind = name.removeprefix("CATEGORY_").removeprefix("UNI_").removeprefix("LOC_")
    negated = kind.startswith("NOT_")
    escape = escapes.get(kind.removeprefix("NOT_"))
    if escape is None:
        return _every_char()
    regex = re.compile(escape.upper() if negated else escape)
    return frozenset(code for code in range(_PLANE) if regex.match(chr(code)))


def _class_chars(items: Any) -> frozenset[int]:
    """The characters a ``[...]`` class (parsed ``IN`` items) matches."""
    chars: set[int] = set()
    negate = False
    for op, value in items:
        if op is constants.NEGATE:
            negate = True
        elif op is constants.LITERAL:
            chars.add(value)
        elif op is constants.RANGE:
            chars.update(range(value[0], min(value[1], _PLANE - 1) + 1))
        elif op is constants.CATEGORY:
            chars |= _category_chars(str(value))
        else:
            return _every_char()
    return _every_char() - chars if negate else frozenset(chars)


def _case_closed(chars: frozenset[int]) -> frozenset[int]:
    closed = set(chars)
    for code in chars:
        char = chr(code)
        closed.update(ord(other) for other in (char.lower(), char.upper()) if len(other) == 1)
    return frozenset(closed)


def _first_chars(items: Any, fold: bool) -> frozenset[int]:
    """The characters an alternative can start with (every character when unsure)."""
    found: frozenset[int] = frozenset()
    for op, value in items:
        if op is constants.AT:
            continue  # an anchor takes no character
        if op is constants.LITERAL:
            first = frozenset({value})
        elif op is constants.NOT_LITERAL:
            first = _every_char() - {value}
        elif op is constants.IN:
            first = _class_chars(value)
        elif op is constants.SUBPATTERN:
            first = _first_chars(value[3], _folds(value, fold))
        elif op is constants.BRANCH:
            first = frozenset().union(*(_first_chars(branch, fold) for branch in value[1]))
        elif op in _REPEATS or op is constants.POSSESSIVE_REPEAT:
            low, _high, body = value
            found |= _first_chars(body, fold)
            if low == 0:
                continue  # it may take nothing: what follows can start the alternative too
            break
        else:  # ``.``, back-references, lookarounds, ...: anything
            return _every_char()
        found |= _case_closed(first) if fold else first
        break
    return found
