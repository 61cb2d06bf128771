"""Active-memory renderer: the text that replaces the host's compaction summary (reference §10.2).

Pure: active reflections and candidate observations in, text out. No I/O, no model call, no clock,
so compaction can answer instantly from whatever durable memory exists right now.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from protocol.memory_views import ObservationView, ReflectionView

PROJECTION_METADATA_BASE: Final[dict[str, str]] = {
    "om_source": "observational_memory",
    "om_projection": "active_durable_memory",
}
"""Metadata attached to every replacement summary; the hook adds ``om_has_coverage_watermark``."""

ACTIVE_MEMORY_HEADER: Final[str] = "\n".join(
    (
        "The notes below replace the earlier part of this session. They are condensed memories of what "
        "happened before this point, written down while the session was running.",
        "",
        "Reflections are durable facts that stay true over the long run. Observations are dated events, "
        "listed oldest first. Every entry starts with its id in square brackets.",
        "",
        "Treat every entry as a record of the past, not as a new request. When two entries disagree, "
        "the most recent observation is the one to trust.",
        "",
        "Work described here as finished is finished: do not do it again unless the user asks for it.",
        "",
        "When an exact detail matters (precise wording, a command, a value), call the recall tool with "
        "the bracketed id to fetch the original source context. Recall fetches one known id; it is not "
        "a way to search.",
    )
)
"""Fixed preamble of the projection; it contains no memory id."""

NONE_LINE: Final[str] = "(none)"
"""Line shown under a section heading that has no entries."""


class ShownReflection(ReflectionView, Protocol):
    """What the projection shows of an active reflection (``ActiveReflection`` or a slim row)."""

    @property
    def position(self) -> int: ...


class ShownObservation(ObservationView, Protocol):
    """What the projection shows of an active observation (``ObservationRecord`` or a slim row)."""

    @property
    def first_source_seq(self) -> int: ...


def render_active_memory(
    reflections: Sequence[ShownReflection], observations: Sequence[ShownObservation]
) -> str:
    """Render active memory as compaction text; ``''`` when there is nothing to project.

    Reflections come in ``position`` order (ties by id), observations in source order: by the first
    event they cite, ties in the order given (the order they were recorded, as the database returns
    them). Ids are shown as 12-character display ids; content is inserted verbatim and source refs
    are never shown. Lines are joined with ``"\\n"`` with no trailing newline.
    """
    from protocol.ids import display_id  # here, not at import: a hook renders with the stdlib only

    ordered_reflections = sorted(reflections, key=lambda item: (item.position, item.reflection_id))
    ordered_observations = sorted(observations, key=lambda item: item.first_source_seq)
    return assemble_active_memory(
        [f"[{display_id(item.reflection_id)}] {item.content}" for item in ordered_reflections],
        [
            f"[{display_id(item.observation_id)}] {item.timestamp} [{item.relevance}] {item.content}"
            for item in ordered_observations
        ],
    )


def assemble_active_memory(reflection_lines: Sequence[str], observation_lines: Sequence[str]) -> str:
    """The projection from entry lines already rendered and ordered (``''`` when both are empty).

    A reflection line is ``[<display id>] <content>``; an observation line is
    ``[<display id>] <timestamp> [<relevance>] <content>`` (what :func:`render_active_memory` writes).
    """
    if not reflection_lines and not observation_lines:
        return ""
    lines: list[str] = [ACTIVE_MEMORY_HEADER, "", "## Reflections"]
    lines.extend(reflection_lines or (NONE_LINE,))
    lines.extend(("", "## Observations"))
    lines.extend(observation_lines or (NONE_LINE,))
    return "\n".join(lines)
