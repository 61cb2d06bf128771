"""Pure core of the live import: which transcript each mark feeds, and how its events are numbered.

One session may name several transcripts over time: Claude Code has reported another file for the
same ``session_id`` after ``/clear``, a ``--fork-session`` resume and a compaction (its issues
#3019, #39355, #75435), and a transcript may be rewritten or truncated under a running session.
So a session's events are fed by *spans*: one span is one transcript, from the mark that first
named it (or from the sync that found it rewritten) on. Each span is converted from its own bytes
and its own marks; its events are appended to the session's one ``events.jsonl`` as they come,
renumbered into the session's seq (1..N, no holes) and turn numbers.

Guarantees (tested as properties in ``tests/unit/persistence/importers/test_live_spans.py``):

* a mark's offset applies only to the transcript it names: another file's offset never cuts one
  in the middle of a line;
* nothing is converted twice: a span remembers how many of its own events are in the file;
* no blending: a transcript whose converted prefix changed (shorter than what was read, or its
  fingerprint differs) ends its span, and what it holds now starts a new one; two spans never
  share a turn number, so an observer never sees one turn made of two files;
* turn numbers never go down in the file, and a turn of one span continued after another span's
  turn gets a new number.

Nothing here does I/O: the shell (:mod:`persistence.importers.live`) looks at the files
(:class:`FileView`) and runs the importer.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FileState = Literal["regular", "missing", "not_regular", "unreadable"]
"""What a transcript path is when a sync looks at it."""
PrefixState = Literal["same", "shrunk", "changed"]
"""A transcript's converted prefix compared with what its span recorded."""


LiveFormat = Literal["claude-code", "codex"]
"""Transcript formats a live hook follows."""
FlushSignal = Literal["compaction", "session_end"]
"""Why a mark asks to observe everything so far at once (``protocol.jobs.ObserveSignal``)."""


class Mark(BaseModel):
    """One hook call: the transcript had ``offset`` complete bytes; ``close`` ends the turn there.

    A line of ``live.marks.jsonl`` (written and read by :mod:`persistence.importers.live`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    transcript: str
    """Absolute path of the transcript."""
    format: LiveFormat
    """Transcript format."""
    offset: int = Field(ge=0)
    """Bytes of the transcript, through its last newline, when the hook ran."""
    close: bool
    """Whether a turn ended at this point (Stop, PreCompact, SessionEnd, a Codex turn)."""
    flush: FlushSignal | None = None
    """The host is about to compact, or the session ended: observe everything through here now."""
    settle: bool = False
    """A turn ended, but the transcript had not caught up yet (the agent writes it asynchronously):
    the dispatcher closes the turn where the transcript is complete when it looks
    (:func:`persistence.importers.live.settle_mark`). The mark itself closes nothing."""


class Span(BaseModel):
    """One transcript (one generation of it) feeding a session's events."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    transcript: str
    """Absolute path of the transcript."""
    format: str
    """Its format (``claude-code`` or ``codex``)."""
    first_mark: int = Field(ge=0)
    """Index in ``live.marks.jsonl`` of the first mark this span takes."""
    emitted: int = Field(default=0, ge=0)
    """Events of its own conversion already in ``events.jsonl``."""
    read_to: int = Field(default=0, ge=0)
    """Transcript bytes its conversion covered at the last sync."""
    fingerprint: str = ""
    """:func:`fingerprint` of those bytes."""
    last_local_turn: int = Field(default=0, ge=0)
    """Turn number (of its own conversion) of its last event in the file."""
    last_session_turn: int = Field(default=-1, ge=-1)
    """Session turn number that local turn was given (-1: none yet)."""
    first_seq: int = Field(default=0, ge=0)
    """Session seq of its first event (0: none yet)."""
    next_mark: int = Field(default=0, ge=0)
    """Index of the first mark not folded into ``furthest`` and ``closes`` yet."""
    furthest: int = Field(default=0, ge=0)
    """Bytes its marks say were complete (each never beyond the file's complete length when folded)."""
    closes: tuple[int, ...] = ()
    """Offsets where its turns were closed, in order (a conversion ends the open turn at each)."""
    ended: Literal["rewritten", "truncated"] | None = None
    """Why it takes no more marks (its transcript no longer holds what was read from it)."""
    waiting: bool = False
    """Marks are waiting for it (the file was missing or a line did not parse): convert again."""
    inherited_to: int = Field(default=0, ge=0)
    """Transcript bytes that are history copied from a transcript this project already imported (a
    ``--fork-session`` resume starts with the old session's lines, same ``uuid``): never converted."""
    inherited_settled: bool = False
    """``inherited_to`` is final: the transcript's first new conversation record was read, or the
    span had events before (decided once, so its conversion stays a pure function of its bytes)."""


@dataclass(frozen=True)
class FileView:
    """What a transcript path is now, compared with the open span of that path (if any)."""

    state: FileState
    complete: int = 0
    """Bytes through its last newline."""
    prefix: PrefixState = "same"
    """Its first ``read_to`` bytes against the open span's fingerprint."""
    reason: str = ""
    """Why it cannot be read (``not_regular``, ``unreadable``): names the file, never its content."""


@dataclass(frozen=True)
class Assignment:
    """Output of :func:`assign_marks`: the spans after taking the new marks, and which to convert."""

    spans: tuple[Span, ...]
    to_convert: tuple[int, ...]
    """Indexes of the spans to convert now, in order."""
    refused: tuple[str, ...]
    """Transcript paths refused (not regular files), once each."""


def fingerprint(chunks: Iterable[bytes], length: int) -> str:
    """The fingerprint of a converted prefix of ``length`` bytes given as ``chunks``: its SHA-256."""
    digest = hashlib.sha256(str(length).encode("ascii") + b"\n")
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def open_span(spans: Sequence[Span], transcript: str) -> int | None:
    """Index of the span that takes the marks of ``transcript`` now (its latest, if not ended)."""
    for index in range(len(spans) - 1, -1, -1):
        if spans[index].transcript == transcript:
            return index if spans[index].ended is None else None
    return None


def assign_marks(
    spans: Sequence[Span], marks: Sequence[Mark], start: int, views: Mapping[str, FileView]
) -> Assignment:
    """Give the marks ``marks[start:]`` to spans: the open span of their transcript, or a new one.

    A transcript whose converted prefix changed ends its span here, and its new marks open the
    next one. Marks naming a non-regular file are refused (they open nothing). Spans waiting from
    an earlier sync are converted again too.
    """
    result = list(spans)
    touched = {index for index, span in enumerate(result) if span.waiting and span.ended is None}
    checked: set[str] = set()
    refused: list[str] = []
    for index in range(start, len(marks)):
        mark = marks[index]
        view = views.get(mark.transcript, FileView("missing"))
        if view.state == "not_regular":
            if mark.transcript not in refused:
                refused.append(mark.transcript)
            continue
        current = open_span(result, mark.transcript)
        if current is not None and mark.transcript not in checked and view.state == "regular":
            span = result[current]
            if span.read_to > 0 and view.prefix != "same":
                result[current] = span.model_copy(
                    update={
                        "ended": "truncated" if view.prefix == "shrunk" else "rewritten",
                        "waiting": False,
                    }
                )
                touched.discard(current)
                current = None
        checked.add(mark.transcript)
        if current is None:
            # The session's very first span keeps its turn numbers (a batch import's); later ones
            # always start a turn of their own.
            result.append(
                Span(
                    transcript=mark.transcript,
                    format=mark.format,
                    first_mark=index,
                    next_mark=index,
                    last_session_turn=0 if not result else -1,
                )
            )
            current = len(result) - 1
        touched.add(current)
    return Assignment(spans=tuple(result), to_convert=tuple(sorted(touched)), refused=tuple(refused))


def fold_marks(spans: Sequence[Span], index: int, marks: Sequence[Mark], complete: int) -> Span:
    """Span ``index`` with its new marks folded in: its transcript's marks up to the next span of it.

    A mark's offset counts at most at the file's complete length now (a mark taken before the file
    shrank), offsets never go backwards, and the closes are kept, so a conversion through
    ``furthest`` with ``closes`` only ever extends the previous one.
    """
    span = spans[index]
    later = [s.first_mark for s in spans[index + 1 :] if s.transcript == span.transcript]
    stop = min(later) if later else len(marks)
    furthest, closes = span.furthest, list(span.closes)
    for mark in marks[span.next_mark : stop]:
        if mark.transcript != span.transcript:
            continue
        furthest = max(furthest, min(mark.offset, complete))
        if mark.close and (not closes or closes[-1] != furthest):
            closes.append(furthest)
    return span.model_copy(
        update={"next_mark": max(stop, span.next_mark), "furthest": furthest, "closes": tuple(closes)}
    )


@dataclass(frozen=True)
class Emission:
    """Output of :func:`renumber`: the lines to append and the session state after them."""

    lines: tuple[str, ...]
    """Events lines in session numbering (newline-terminated)."""
    end_turns: tuple[tuple[int, int], ...]
    """``(end_seq, turn_no)`` of each ``agent_end`` among them."""
    span: Span
    """The span with its new counts (``read_to`` and ``fingerprint`` are the caller's)."""
    last_seq: int
    last_turn: int


def renumber(local_lines: Sequence[str], span: Span, last_seq: int, last_turn: int) -> Emission:
    """The events of a span's conversion not in the file yet, in the session's numbering.

    ``local_lines`` is the span's whole conversion (its own seq 1..n); the first ``span.emitted``
    are in the file already. Seqs continue the session's; a new local turn gets the next session
    turn, and so does a local turn continued after another span's turn (turns never go down and
    never mix two spans).
    """
    lines: list[str] = []
    end_turns: list[tuple[int, int]] = []
    local_turn, session_turn = span.last_local_turn, span.last_session_turn
    first_seq = span.first_seq
    for raw in local_lines[span.emitted :]:
        event = json.loads(raw)
        turn = event["turn_no"]
        if turn != local_turn or session_turn != last_turn or session_turn < 0:
            last_turn += 1
            local_turn, session_turn = turn, last_turn
        last_seq += 1
        first_seq = first_seq or last_seq
        event["seq"], event["turn_no"] = last_seq, session_turn
        lines.append(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        if event["type"] == "agent_end":
            end_turns.append((last_seq, session_turn))
    updated = span.model_copy(
        update={
            "emitted": max(span.emitted, len(local_lines)),
            "last_local_turn": local_turn,
            "last_session_turn": session_turn,
            "first_seq": first_seq,
            "waiting": False,
        }
    )
    return Emission(tuple(lines), tuple(end_turns), updated, last_seq, last_turn)
