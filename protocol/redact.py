"""What never leaves an events file: ``<private>`` text and likely secrets (pure).

Every path from a session's ``events.jsonl`` to anything omray keeps or sends (the Observer's
prompt, the transcript rows and the hybrid index built from them, ``recall``'s hydrated events)
reads events through :mod:`persistence.files.events_reader`, which passes each event's payload through
:meth:`Redactor.payload`: the one choke point. So:

- text between ``<private>`` and ``</private>`` (any case) becomes ``[private]``; an unclosed tag
  hides the rest of that string, and in a user message (``agent_command_applied``) the span stays
  open into the session's next user messages until one closes it; a closing tag with no open span
  hides everything before it in its string;
- a likely secret becomes ``[redacted:<kind>]`` (:data:`BUILTIN_PATTERNS`: API keys such as
  ``sk-...`` and ``sk-ant-...``, GitHub, Slack and AWS keys, JWTs, PEM private key blocks, the
  password of a ``scheme://user:pass@host`` URL, ``Authorization: Bearer ...`` and
  ``password=...``-style assignments), plus the patterns of the ``privacy.redact_patterns``
  setting (``[redacted:custom]``).

The events file itself is the agent's own log and is never rewritten: it keeps the raw text.
Only string values are redacted (keys and numbers are kept), so an event keeps its shape.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from protocol.errors import SettingsError
from protocol.regex_safety import backtracking_risk

PRIVATE_MARK: Final = "[private]"
"""What a ``<private>`` span becomes."""

_PRIVATE_TAG: Final = re.compile(r"<(/?)private\s*>", re.IGNORECASE)

BUILTIN_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    # (kind, regex); a regex with a group named ``keep`` keeps that group and masks the rest.
    (
        "private-key",
        r"-----BEGIN (?:[A-Z0-9]++ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"(?:-----END (?:[A-Z0-9]++ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
    ),
    ("api-key", r"(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{16,}"),
    # a key holds a run of 16+ characters without a hyphen; a CSS class such as sk-circle-bounce does not
    (
        "api-key",
        r"(?<![A-Za-z0-9_-])sk-(?:proj-|live-|test-|svcacct-)?(?=[A-Za-z0-9_-]*?[A-Za-z0-9_]{16})"
        r"[A-Za-z0-9_-]{20,}",
    ),
    ("token", r"(?<![A-Za-z0-9_])gh[pousr]_[A-Za-z0-9]{30,}"),
    ("token", r"(?<![A-Za-z0-9_])github_pat_[A-Za-z0-9_]{22,}"),
    ("aws-key", r"(?<![A-Z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Z0-9])"),
    ("token", r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}"),
    ("jwt", r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"),
    # the scheme starts where no scheme character precedes it and is at most 32 long: one long run of
    # letters, dots and hyphens is read once, not once per word boundary in it (that was quadratic)
    (
        "password",
        r"(?P<keep>(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]{0,31}://[^\s:/@]{0,256}:)[^\s@/]{1,256}(?=@)",
    ),
    (
        "token",
        r"(?i)(?P<keep>\bauthorization\b[\"']?\s*[:=]\s*[\"']?(?:bearer|basic|token)\s+)[A-Za-z0-9._~+/=-]{8,}",
    ),
    ("token", r"(?i)(?P<keep>\bbearer\s+)[A-Za-z0-9._~+/=-]{20,}"),
    # NAME = value, NAME: value, "NAME": "value" (escaped JSON too), where NAME ends in a secret's
    # name (DB_PASSWORD, STRIPE_API_KEY, GITHUB_TOKEN, aws_secret_access_key); a value that is code
    # (a call, an index, a dotted name: request.form.get(...), os.environ[...], settings.KEY) is left.
    (
        "secret",
        r"(?i)(?P<keep>(?<![A-Za-z0-9])(?:[A-Za-z0-9]++[_-]){0,4}(?:api[_-]?key|secret(?:[_-]?access)?[_-]?key"
        r"|client[_-]?secret|secret|password|passwd|access[_-]?token|auth[_-]?token|token)"
        r"(?![A-Za-z0-9])\\?[\"']?\s*[:=]\s*\\?[\"']?)(?!\[redacted:)"
        r"(?![A-Za-z_][A-Za-z0-9_]*+(?:\.[A-Za-z_][A-Za-z0-9_]*+)+(?![A-Za-z0-9_.]))(?![A-Za-z0-9_.]*[(\[])"
        r"[^\s\"',;\\]{6,}",
    ),
)
"""The built-in likely-secret patterns, applied in this order."""

MAX_CUSTOM_PATTERNS: Final = 64
"""Most ``privacy.redact_patterns`` entries accepted."""
MAX_CUSTOM_PATTERN_CHARS: Final = 512
"""Longest ``privacy.redact_patterns`` entry accepted."""


@dataclass(frozen=True, slots=True)
class _Rule:
    kind: str
    regex: re.Pattern[str]

    def apply(self, text: str) -> str:
        mark = f"[redacted:{self.kind}]"
        if "keep" in self.regex.groupindex:
            return self.regex.sub(lambda m: m.group("keep") + mark, text)
        return self.regex.sub(mark, text)


def compile_custom_patterns(patterns: object) -> tuple[str, ...]:
    """Validate ``privacy.redact_patterns``: a list of regular expressions; ``SettingsError`` naming
    the entry's position (never its text: a pattern may quote a secret) otherwise."""
    if patterns is None:
        return ()
    if isinstance(patterns, str) or not isinstance(patterns, list | tuple):
        raise SettingsError("privacy.redact_patterns must be a list of regular expressions.")
    if len(patterns) > MAX_CUSTOM_PATTERNS:
        raise SettingsError(f"privacy.redact_patterns takes at most {MAX_CUSTOM_PATTERNS} patterns.")
    checked: list[str] = []
    for number, pattern in enumerate(patterns, start=1):
        if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_CUSTOM_PATTERN_CHARS:
            raise SettingsError(
                f"privacy.redact_patterns entry #{number} must be a non-empty string of at most "
                f"{MAX_CUSTOM_PATTERN_CHARS} characters."
            )
        try:
            compiled = re.compile(pattern)
        except (re.error, RecursionError, OverflowError) as exc:
            raise SettingsError(
                f"privacy.redact_patterns entry #{number} is not a valid regular expression "
                f"({type(exc).__name__})."
            ) from None
        if compiled.search("") is not None:
            raise SettingsError(f"privacy.redact_patterns entry #{number} matches the empty string.")
        risk = backtracking_risk(pattern)
        if risk is not None:
            # Every event the Observer, the indexer and recall read passes through it: a pattern
            # that backtracks exponentially on a long run would stall them all.
            raise SettingsError(
                f"privacy.redact_patterns entry #{number} can take exponential time on long text "
                f"({risk}, as in (a+)+); write it without a variable repeat inside a repeat or "
                "overlapping alternatives under one, or make the inner repeat possessive (a++)."
            )
        checked.append(pattern)
    return tuple(checked)


def scan_private(text: str, depth: int = 0) -> tuple[str, int]:
    """``text`` with its ``<private>`` spans replaced by ``[private]``, and the span depth after it.

    ``depth`` is how deep inside spans the text starts (a span a previous message of the same
    session opened and did not close). Tags nest; ``<private >`` counts. A text that starts inside
    a span is hidden up to the tag that closes it; an unclosed span runs to the end (the depth
    returned is then > 0); a closing tag with no open span means the text started inside one that
    this text cannot see opened, so everything before it is hidden too (fail closed).
    """
    parts: list[str] = [PRIVATE_MARK] if depth > 0 else []
    position = 0
    for tag in _PRIVATE_TAG.finditer(text):
        closing = tag.group(1) == "/"
        if depth == 0:
            if closing:
                parts = [PRIVATE_MARK]  # an unmatched close: the text began inside a span
            else:
                parts.append(text[position : tag.start()])
                depth = 1
                parts.append(PRIVATE_MARK)
        elif closing:
            depth -= 1
        else:
            depth += 1
        position = tag.end()
    if depth == 0:
        parts.append(text[position:])
    return "".join(parts), depth


def strip_private(text: str) -> str:
    """``text`` with each outermost ``<private>...</private>`` span replaced by ``[private]``
    (:func:`scan_private` from outside any span)."""
    return scan_private(text)[0]


USER_TURN_EVENT: Final = "agent_command_applied"
"""The event of a user message: the one whose open ``<private>`` span carries into the next ones."""


def _user_text_slots(payload: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    """Where a user-turn payload holds the user's text, in reading order: ``text``, then the parts
    of ``message.content`` (a string, or string / ``{"text": ...}`` items)."""
    slots: list[tuple[Any, Any]] = []
    if isinstance(payload.get("text"), str):
        slots.append((payload, "text"))
    message = payload.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        slots.append((message, "content"))
    elif isinstance(content, list):
        for index, item in enumerate(content):
            if isinstance(item, str):
                slots.append((content, index))
            elif isinstance(item, dict) and isinstance(item.get("text"), str):
                slots.append((item, "text"))
    return slots


def user_turn_private_depth(payload: Mapping[str, Any], depth: int) -> int:
    """The ``<private>`` span depth after a user-turn payload read from ``depth`` (no copy made)."""
    for container, key in _user_text_slots(payload):
        text = container[key]
        if depth > 0 or "<" in text:
            depth = scan_private(text, depth)[1]
    return depth


class Redactor:
    """Strips ``<private>`` spans and masks likely secrets in text and event payloads."""

    def __init__(self, custom_patterns: Iterable[str] = ()) -> None:
        rules = [_Rule(kind, re.compile(regex)) for kind, regex in BUILTIN_PATTERNS]
        rules.extend(
            _Rule("custom", re.compile(pattern)) for pattern in compile_custom_patterns(list(custom_patterns))
        )
        self._rules: tuple[_Rule, ...] = tuple(rules)

    def text(self, value: str) -> str:
        """``value`` with private spans replaced by ``[private]`` and secrets masked."""
        if "<" in value:
            value = strip_private(value)
        for rule in self._rules:
            value = rule.apply(value)
        return value

    def user_turn_payload(self, payload: dict[str, Any], depth: int) -> tuple[dict[str, Any], int]:
        """A user-turn payload redacted as :meth:`payload` does, its text read from ``depth`` (the
        span a previous user message left open), and the depth after it.

        So a ``<private>`` opened in one message and closed in a later one hides the rest of the
        first, every message in between and the second up to its close."""
        if depth == 0 and not any("<" in c[k] for c, k in _user_text_slots(payload)):
            return self.payload(payload), 0
        copy = self.payload_copy(payload)
        for container, key in _user_text_slots(copy):
            container[key], depth = scan_private(container[key], depth)
        return self.payload(copy), depth

    @staticmethod
    def payload_copy(value: Any) -> Any:
        """A copy of JSON data whose mappings and lists may be changed without touching ``value``."""
        return Redactor._copy(value, None)

    def payload(self, value: Any) -> Any:
        """``value`` (JSON data) with every string redacted; mappings and lists keep their shape.

        Iterative, so a payload nested as deeply as the JSON parser allows never overflows the stack."""
        return self._copy(value, self.text)

    @staticmethod
    def _copy(value: Any, on_text: Callable[[str], str] | None) -> Any:
        if isinstance(value, str):
            return on_text(value) if on_text is not None else value
        if not isinstance(value, Mapping | list | tuple):
            return value
        root: list[Any] = [None]
        # (container to fill, key or index, value to copy)
        work: list[tuple[Any, Any, Any]] = [(root, 0, value)]
        while work:
            target, key, item = work.pop()
            if isinstance(item, str):
                target[key] = on_text(item) if on_text is not None else item
            elif isinstance(item, Mapping):
                copy: dict[Any, Any] = dict.fromkeys(item)
                target[key] = copy
                work.extend((copy, k, v) for k, v in item.items())
            elif isinstance(item, list | tuple):
                items: list[Any] = [None] * len(item)
                target[key] = items
                work.extend((items, i, v) for i, v in enumerate(item))
            else:
                target[key] = item
        return root[0]


@functools.lru_cache(maxsize=32)
def redactor_for(custom_patterns: tuple[str, ...] = ()) -> Redactor:
    """The (cached) redactor of the built-in patterns plus ``custom_patterns``."""
    return Redactor(custom_patterns)


DEFAULT_REDACTOR: Final = redactor_for(())
"""Built-in patterns only: what every events read applies unless given a redactor with more."""
