"""``builtin/extractive``: an offline, deterministic stand-in for a real model.

It exists so omray can be tried on a fresh machine (``make demo``) and so the whole pipeline can
be tested without a network or an API key. It is NOT a substitute for a real model: it does not
understand anything. It copies and labels lines of the input by simple rules:

* ``record_observations`` (§7.4 chunk format): one observation per user request (high), assistant
  answer (medium), failing tool result or model step (high), run outcome (medium) and set of file
  paths seen in tool calls/results (low), each with its block's timestamp and source ref. A user
  or assistant message of up to :data:`MAX_MESSAGE_CHARS` characters is kept whole (whitespace
  collapsed): a real model would summarize it, this stand-in copies it. Longer messages and every
  other kind of observation are cut at :data:`MAX_CONTENT_CHARS`; search still finds their full
  text in the transcript. Every message of the input gets its observation, however many there are;
* ``record_reflections`` (§9.5 input): one reflection per group of >= 2 observations sharing a
  file path, an identifier or a keyword, citing the group's request-local ids;
* ``drop_observations`` (§9.7 input): the oldest low/medium observations that a reflection
  already cites, up to the stated maximum.

It answers with at most one round of tool calls, then a short final message. Same input, same
output. Input it cannot parse gives no tool call, never an exception.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from actors.models.chat import ChatRequest, ChatResponse, Messages, ToolCall
from protocol.records import relevance_rank
from protocol.tool_specs import DROP_OBSERVATIONS, RECORD_OBSERVATIONS, RECORD_REFLECTIONS
from protocol.tools import looks_like_secret

log = logging.getLogger("omray.models.builtin")

MAX_CONTENT_CHARS = 240
"""Longest observation/reflection text the built-in model writes (cut at a word, then ``…``),
except for user and assistant messages of up to :data:`MAX_MESSAGE_CHARS`."""
MAX_MESSAGE_CHARS = 2000
"""Longest user or assistant message the built-in model keeps whole."""
MAX_REFLECTIONS_PER_CALL = 10
"""Reflections per ``record_reflections`` call."""
MAX_PATHS_PER_OBSERVATION = 8
"""File paths listed in one file observation."""

_CHUNK_HEADER = "NEW SOURCE-ADDRESSED CONVERSATION CHUNK:"
_TS = r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}"
_SOURCE_LABEL_RE = re.compile(r"^\[Source entry id: (?P<ref>[^\]\n]+)\]\s*$")
_ROLE_LINE_RE = re.compile(rf"^\[(?P<label>[^\]\n@]+?) @ (?P<ts>{_TS})(?P<extra>[^\]\n]*)\]:(?P<text>.*)$")
_TOOL_CALL_RE = re.compile(r"^\[Tool call (?P<id>\S*) ?name=(?P<name>\S+) args=(?P<args>.*)\]\s*$")
_FALLBACK_RE = re.compile(rf"^Current local time fallback: (?P<ts>{_TS})\s*$")
_MEMORY_OBSERVATION_RE = re.compile(rf"^\[[^\]\n]+\] {_TS} \[(?:low|medium|high|critical)\] (?P<content>.+)$")
_LOCAL_OBSERVATION_RE = re.compile(
    rf"^\[(?P<id>\d+)\] (?P<ts>{_TS}) \[(?P<rel>low|medium|high|critical)\]"
    r"(?: \[coverage: (?P<cov>none|partial|strong)\])? (?P<content>.+)$"
)
_REFLECTION_LINE_RE = re.compile(r"^\[(?P<id>[^\]\n]+)\] (?P<content>.+)$")
_MAX_DROPS_RE = re.compile(r"Maximum drops allowed this run: (?P<count>[\d,]+) observation")
_URL_RE = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.IGNORECASE)
_KNOWN_EXTENSIONS = (
    "py|pyi|php|js|jsx|ts|tsx|mjs|cjs|go|rs|rb|java|kt|c|h|cc|cpp|hpp|cs|swift|sh|bash|zsh|sql|md|rst|txt"
    "|json|jsonl|yaml|yml|toml|ini|cfg|conf|lock|xml|html|css|scss|vue|svelte|env|csv|proto|gradle|tf"
)
_PATH_RE = re.compile(
    r"(?<![\w/.~-])(?:"
    r"(?:~|\.{1,2})?/?(?:[\w.-]+/)+[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,9}"  # dir/name.ext
    rf"|[\w-][\w.-]*\.(?:{_KNOWN_EXTENSIONS})"  # name.ext with a well-known extension
    r")(?::\d+)?(?![\w/])"
)
_IDENTIFIER_RE = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\b")
_WORD_RE = re.compile(r"[a-z]{6,}")
_ERROR_LABEL_RE = re.compile(r"\b(?:error|errors|failed|failure|is_error)\b", re.IGNORECASE)
_ERROR_TEXT_RE = re.compile(
    r"^\s*(?:error|fatal|exception|traceback)\b|\b(?:error|exception|failed|failure)\s*:", re.IGNORECASE
)
_OUTCOME_END_RE = re.compile(r"^agent_end reason=(?P<reason>\S+)")
_OUTCOME_STEP_FAILED_RE = re.compile(r"^llm_step_failed retryable=(?P<retryable>true|false)")
_STOPWORDS = frozenset(
    {
        # the built-in model's own wording
        "request", "replied", "assistant", "failed", "touched", "result", "results", "outcome", "ended",
        "reason", "retryable", "mentioned", "repeatedly", "observations", "relevant",
        # common words that do not identify a topic
        "should", "would", "could", "please", "about", "there", "these", "those", "their", "which",
        "where", "while", "using", "before", "after", "because", "without", "within", "through",
        "between", "something", "things", "really", "change", "changes", "changed", "making",
        "always", "already", "another", "anything", "everything", "actually", "instead", "other",
        "further", "around", "during", "itself", "others", "number", "called", "return", "returns",
        "returned", "string", "object", "people", "little", "needed", "having",
        "completed", "current", "currently", "working",
    }
)  # fmt: skip


# --- shared helpers --------------------------------------------------------------------------------


def _one_line(text: str, limit: int = MAX_CONTENT_CHARS) -> str:
    """Whitespace collapsed to single spaces, cut at a word boundary with ``…`` when too long."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "…"


def find_paths(text: str) -> list[str]:
    """File paths in ``text`` (URLs ignored), unique, in order of first appearance."""
    cleaned = _URL_RE.sub(" ", text.replace("\\/", "/"))
    seen: dict[str, None] = {}
    for match in _PATH_RE.finditer(cleaned):
        path = match.group(0)
        if any(ch.isalpha() for ch in path):
            seen.setdefault(path, None)
    return list(seen)


def _user_text(messages: Messages) -> str | None:
    for message in messages:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [part.get("text") for part in content if isinstance(part, Mapping)]
            return "\n".join(part for part in parts if isinstance(part, str))
        return None
    return None


def _offered_tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for spec in tools:
        function = spec.get("function") if isinstance(spec, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if isinstance(name, str):
            names.append(name)
    return names


def _clean(content: str, limit: int = MAX_CONTENT_CHARS) -> str | None:
    """Usable single-line content, or ``None`` when empty or it looks like it carries a secret."""
    text = _one_line(content, limit)
    if text == "" or looks_like_secret(text):
        return None
    return text


# --- record_observations -------------------------------------------------------------------------


@dataclass
class _Entry:
    """One role line of the chunk with its continuation lines."""

    label: str
    extra: str
    timestamp: str
    session_id: str
    seq: int
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip()


@dataclass
class _ToolUse:
    """One ``[Tool call ...]`` line."""

    name: str
    args: str
    timestamp: str | None
    session_id: str
    seq: int


def _parse_ref(ref: str) -> tuple[str, int] | None:
    session_id, colon, seq_text = ref.strip().rpartition(":")
    if not colon or not session_id or not seq_text.isdigit() or int(seq_text) < 1:
        return None
    return session_id, int(seq_text)


def _split_observer_input(text: str) -> tuple[str, str]:
    """(memory section, chunk section); the whole text is the chunk when the header is missing."""
    memory, header, chunk = text.partition(_CHUNK_HEADER)
    return (memory, chunk) if header else ("", text)


def _parse_chunk(chunk: str) -> tuple[list[_Entry | _ToolUse], str | None]:
    """Role lines and tool-call lines of the chunk, in order, plus the fallback local time."""
    items: list[_Entry | _ToolUse] = []
    ref: tuple[str, int] | None = None
    block_ts: str | None = None
    fallback: str | None = None
    entry: _Entry | None = None
    for line in chunk.splitlines():
        if match := _SOURCE_LABEL_RE.match(line):
            entry, ref, block_ts = None, _parse_ref(match.group("ref")), None
        elif match := _FALLBACK_RE.match(line):
            entry, fallback = None, match.group("ts")
        elif match := _TOOL_CALL_RE.match(line):
            entry = None
            if ref is not None:
                items.append(_ToolUse(match.group("name"), match.group("args"), block_ts, *ref))
        elif match := _ROLE_LINE_RE.match(line):
            entry = None
            block_ts = match.group("ts")
            if ref is not None:
                entry = _Entry(
                    label=match.group("label").strip(),
                    extra=match.group("extra"),
                    timestamp=block_ts,
                    session_id=ref[0],
                    seq=ref[1],
                    lines=[match.group("text")],
                )
                items.append(entry)
        elif entry is not None:
            entry.lines.append(line)
    return _date_tool_calls(items), fallback


def _date_tool_calls(items: list[_Entry | _ToolUse]) -> list[_Entry | _ToolUse]:
    """A tool call listed before any role line of its block takes the block's next role-line time
    (the tool result's), so it is dated from the chunk rather than from the fallback clock."""
    dated: list[_Entry | _ToolUse] = []
    for index, item in enumerate(items):
        if isinstance(item, _ToolUse) and item.timestamp is None:
            later = next(
                (
                    other.timestamp
                    for other in items[index + 1 :]
                    if isinstance(other, _Entry)
                    and (other.session_id, other.seq) == (item.session_id, item.seq)
                ),
                None,
            )
            item = _ToolUse(item.name, item.args, later, item.session_id, item.seq)
        dated.append(item)
    return dated


def _looks_like_json(text: str) -> bool:
    if not text.startswith(("{", "[")):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _entry_observation(entry: _Entry) -> tuple[str, str] | None:
    """(content, relevance) for one role line, or ``None`` when it carries nothing to keep."""
    text = entry.text
    label = entry.label.lower()
    if text == "":
        return None
    if label == "user":
        return f"User request: {text}", "high"
    if label == "assistant":
        # An assistant message with only tool calls renders as its JSON; the calls are handled apart.
        return None if _looks_like_json(text) else (f"Assistant replied: {text}", "medium")
    if label == "outcome":
        if match := _OUTCOME_END_RE.match(text):
            return f"Run ended with reason {match.group('reason')}.", "medium"
        if match := _OUTCOME_STEP_FAILED_RE.match(text):
            return f"Model step failed (retryable={match.group('retryable')}).", "high"
        return f"Outcome: {text}", "medium"
    if label.startswith("tool result for"):
        name = entry.label[len("tool result for") :].strip().split(" ")[0] or "tool"
        errored = _ERROR_LABEL_RE.search(entry.label[len("tool result for") :] + entry.extra)
        if errored or _ERROR_TEXT_RE.search(text[:400]):
            return f"Tool {name} failed: {text}", "high"
        return None  # ordinary tool output: only the files it names are kept
    return f"{entry.label}: {text}", "low"


def _tool_name_of(item: _Entry | _ToolUse) -> str:
    if isinstance(item, _ToolUse):
        return item.name
    return item.label[len("tool result for") :].strip().split(" ")[0] or "tool"


def extract_observations(text: str) -> list[dict[str, Any]]:
    """Observation items for a ``record_observations`` call on an Observer user message (§7.5)."""
    memory, chunk = _split_observer_input(text)
    known = {m.group("content").strip() for m in map(_MEMORY_OBSERVATION_RE.match, memory.splitlines()) if m}
    items, fallback = _parse_chunk(chunk)
    seen_paths: set[str] = set()
    observations: list[dict[str, Any]] = []

    def add(
        content: str,
        relevance: str,
        timestamp: str | None,
        session_id: str,
        seq: int,
        limit: int = MAX_CONTENT_CHARS,
    ) -> None:
        cleaned = _clean(content, limit)
        timestamp = timestamp or fallback
        if cleaned is None or timestamp is None or cleaned in known:
            return
        known.add(cleaned)
        observations.append(
            {
                "timestamp": timestamp,
                "content": cleaned,
                "relevance": relevance,
                "source_refs": [{"run_id": session_id, "seq": seq}],
            }
        )

    for item in items:
        if isinstance(item, _Entry):
            found = _entry_observation(item)
            if found is not None:
                whole = item.label.lower() in ("user", "assistant") and len(" ".join(item.text.split())) <= (
                    MAX_MESSAGE_CHARS
                )
                limit = MAX_MESSAGE_CHARS + len("Assistant replied: ") if whole else MAX_CONTENT_CHARS
                add(found[0], found[1], item.timestamp, item.session_id, item.seq, limit)
            if not item.label.lower().startswith("tool result for"):
                continue
            source = item.text
        else:
            source = item.args
        paths = [path for path in find_paths(source) if path not in seen_paths][:MAX_PATHS_PER_OBSERVATION]
        if paths:
            seen_paths.update(paths)
            verb = "touched" if isinstance(item, _ToolUse) else "output mentioned"
            add(f"Tool {_tool_name_of(item)} {verb} {', '.join(paths)}", "low", item.timestamp, *_ref(item))
    # No cap: every message of the part is recorded, however long the part (a capped call dropped
    # the messages past its cap while coverage said they were observed).
    return observations


def _ref(item: _Entry | _ToolUse) -> tuple[str, int]:
    return item.session_id, item.seq


# --- record_reflections / drop_observations -------------------------------------------------------


@dataclass(frozen=True)
class _LocalObservation:
    """One ``[<local id>] <ts> [<relevance>] [coverage: <tier>] <content>`` line."""

    local_id: str
    timestamp: str
    relevance: str
    coverage: str
    content: str


def _parse_pool(text: str) -> tuple[list[str], list[_LocalObservation]]:
    """Reflection contents and observation lines of a Reflector/Dropper input (§9.5, §9.7)."""
    reflections: list[str] = []
    observations: list[_LocalObservation] = []
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("CURRENT REFLECTIONS:", "CURRENT OBSERVATIONS:"):
            section = stripped
            continue
        if section == "CURRENT OBSERVATIONS:" and (match := _LOCAL_OBSERVATION_RE.match(stripped)):
            observations.append(
                _LocalObservation(
                    local_id=match.group("id"),
                    timestamp=match.group("ts"),
                    relevance=match.group("rel"),
                    coverage=match.group("cov") or "none",
                    content=match.group("content").strip(),
                )
            )
        elif section == "CURRENT REFLECTIONS:" and (match := _REFLECTION_LINE_RE.match(stripped)):
            reflections.append(match.group("content").strip())
    return reflections, observations


def _topic_keys(content: str) -> list[tuple[int, str]]:
    """(rank, key) topics of one observation: file paths (0), identifiers (1), keywords (2)."""
    paths = find_paths(content)
    rest = content
    for path in paths:
        rest = rest.replace(path, " ")
    identifiers = [
        token
        for token in _IDENTIFIER_RE.findall(rest)
        if len(token) >= 4
        and ("_" in token or "." in token or re.search(r"[a-z][A-Z]", token) or re.search(r"\d", token))
    ]
    words = [word for word in _WORD_RE.findall(rest.lower()) if word not in _STOPWORDS]
    keys = [(0, path) for path in paths] + [(1, token) for token in identifiers] + [(2, w) for w in words]
    return list(dict.fromkeys(keys))


def propose_reflections(text: str) -> list[dict[str, Any]]:
    """Reflection items for a ``record_reflections`` call on a Reflector user message."""
    reflections, observations = _parse_pool(text)
    existing = " ".join(reflections).lower()
    members: dict[tuple[int, str], list[_LocalObservation]] = {}
    for observation in observations:
        for key in _topic_keys(observation.content):
            members.setdefault(key, []).append(observation)
    order = sorted(members, key=lambda item: (item[0], -len(members[item]), item[1]))
    used: set[str] = set()
    proposals: list[dict[str, Any]] = []
    for rank_and_topic in order:
        topic = rank_and_topic[1]
        group = [obs for obs in members[rank_and_topic] if obs.local_id not in used]
        if len(group) < 2 or topic.lower() in existing:
            continue
        top = max(group, key=lambda obs: (relevance_rank(obs.relevance), obs.timestamp, -int(obs.local_id)))
        content = _clean(
            f"{topic} came up repeatedly ({len(group)} observations); most relevant: {top.content}"
        )
        if content is None:
            continue
        used.update(obs.local_id for obs in group)
        ids = sorted({obs.local_id for obs in group}, key=int)
        proposals.append({"content": content, "supporting_observation_ids": ids})
        if len(proposals) >= MAX_REFLECTIONS_PER_CALL:
            break
    return proposals


def propose_drops(text: str) -> list[str]:
    """Local ids for a ``drop_observations`` call: oldest low/medium ones a reflection cites, capped."""
    match = _MAX_DROPS_RE.search(text)
    if match is None:
        return []
    cap = int(match.group("count").replace(",", ""))
    _, observations = _parse_pool(text)
    safe = [
        obs
        for obs in observations
        if obs.relevance in ("low", "medium") and obs.coverage in ("partial", "strong")
    ]
    safe.sort(key=lambda obs: (obs.timestamp, int(obs.local_id)))
    return list(dict.fromkeys(obs.local_id for obs in safe))[:cap]


# --- the model ----------------------------------------------------------------------------------------


class BuiltinExtractiveModel:
    """In-process :class:`~actors.models.chat.ChatModel` with no network: deterministic and fast.

    An offline default for trying omray and testing the pipeline, not a substitute for a real
    model (see the module docstring for exactly what it does). Stateless and thread-safe.
    """

    def complete(self, request: ChatRequest) -> ChatResponse:
        """One tool-call round for the first known tool offered, then a final message."""
        messages = request.messages
        if any(message.get("role") == "assistant" and message.get("tool_calls") for message in messages):
            return ChatResponse(text="Done.")
        try:
            call = self._tool_call(messages, request.tools)
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as exc:
            # Malformed input must never fail a job through this model: answer without a tool call.
            log.warning("builtin model could not parse its input: error_class=%s", type(exc).__name__)
            call = None
        if call is None:
            return ChatResponse(text="Nothing to record.")
        return ChatResponse(tool_calls=(call,))

    @staticmethod
    def _tool_call(messages: Messages, tools: Sequence[Mapping[str, Any]]) -> ToolCall | None:
        text = _user_text(messages)
        if text is None:
            return None
        arguments: dict[str, Any] | None = None
        for name in _offered_tool_names(tools):
            if name == RECORD_OBSERVATIONS:
                observations = extract_observations(text)
                arguments = {"observations": observations} if observations else None
            elif name == RECORD_REFLECTIONS:
                reflections = propose_reflections(text)
                arguments = {"reflections": reflections} if reflections else None
            elif name == DROP_OBSERVATIONS:
                ids = propose_drops(text)
                arguments = (
                    {"ids": ids, "reason": "Oldest low/medium observations already cited by a reflection."}
                    if ids
                    else None
                )
            else:
                continue
            if arguments is None:
                return None
            return ToolCall(
                call_id="builtin-call-1",
                name=name,
                arguments=json.dumps(arguments, ensure_ascii=False, separators=(",", ":")),
            )
        return None
