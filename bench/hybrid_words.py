"""Word lists of the hybrid benchmark's labelled queries (``bench.hybrid_bench``)."""

from __future__ import annotations

from typing import Final

_STOP_WORDS_TEXT: Final[
    str
] = """a about above after again all also am an and any are as at be because been before being below
    between both but by can could did do does doing done don down during each few for from further get
    got had has have having he her here hers him his how i if in into is it its itself just let lets
    like may me might more most must my no nor not now of off on once only or other our ours out over
    own same she should so some such than that the their them then there these they this those through
    to too under until up very was we were what when where which while who whom why will with would
    you your yours yes okay ok now still already really sure user assistant i'll i'm it's let's that's
    there's we'll we're you're don't doesn't isn't won't can't need needs want wants use used using
    one two make makes see look"""
STOP_WORDS: Final[frozenset[str]] = frozenset(_STOP_WORDS_TEXT.split())
"""Words left out of paraphrase and keyword queries."""

SYNONYMS: Final[dict[str, str]] = {
    "fix": "repair",
    "fixed": "repaired",
    "error": "failure",
    "errors": "failures",
    "bug": "defect",
    "test": "check",
    "tests": "checks",
    "file": "document",
    "files": "documents",
    "function": "routine",
    "method": "routine",
    "create": "generate",
    "created": "generated",
    "update": "modify",
    "updated": "modified",
    "add": "append",
    "added": "appended",
    "remove": "delete",
    "removed": "deleted",
    "command": "instruction",
    "commands": "instructions",
    "run": "execute",
    "running": "executing",
    "build": "compile",
    "theme": "styling",
    "session": "conversation",
    "message": "note",
    "messages": "notes",
    "component": "widget",
    "components": "widgets",
    "change": "modification",
    "changes": "modifications",
    "show": "display",
    "shows": "displays",
    "check": "verify",
    "issue": "problem",
    "problem": "issue",
    "implement": "build",
    "implementation": "realization",
    "directory": "folder",
    "folder": "directory",
    "text": "content",
    "output": "result",
    "input": "entry",
    "new": "fresh",
    "old": "previous",
    "start": "begin",
    "works": "functions",
    "correct": "right",
    "properly": "correctly",
    "now": "currently",
    "called": "invoked",
    "call": "invoke",
}
"""A small hand-made synonym table for paraphrase queries (deliberately generic)."""
