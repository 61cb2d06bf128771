"""Deterministic observer chunks and parts (reference §7.3 step 6, §7.5, §7.6).

Pure: no I/O, no clock. The same blocks, memory, budgets and versions always give the same parts with
the same digests and keys; the local-time line closes every user message but never enters a digest, a
key or a budget decision, so re-running a job at another time finds its parts already committed.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from actors.observer.blocks import SourceBlock
from protocol.errors import OmrayError
from protocol.identities import chunk_key, coverage_key, normalize_source_refs, part_digest, source_digest
from protocol.memory_views import ObservationView, ReflectionView
from protocol.records import ChunkPartIdentity, SourceRef

MEMORY_ENVELOPE_FRACTION = 0.55
"""Share of ``envelope - fixed overhead`` the memory context may use before it is trimmed."""
MEMORY_PAGE_FRACTION = 0.5
"""Share of the memory budget dropped at once when the memory context is trimmed."""
MIN_BUDGET_TOKENS = 64
"""Floor of the memory and source budgets."""
BLOCK_SEPARATOR = "\n\n"
"""Between two blocks of one part."""
SOURCE_SECTION_PREFIX = "\n\nNEW SOURCE-ADDRESSED CONVERSATION CHUNK:\n"
"""Between the memory context and the part's source text."""
TIMESTAMP_SEPARATOR = "\n\n"
"""Between the source text and the local-time line."""
TIMESTAMP_LINE_PREFIX = "Current local time fallback: "
"""Start of the user message's last line; the local time follows."""
LOCAL_TIME_LENGTH = 16
"""Length of a ``YYYY-MM-DD HH:MM`` local time."""
MIN_SPLIT_CHARS = 64
"""Smallest slice of an oversized block."""
MIN_SPLIT_BUDGET_TOKENS = 32
"""Token floor used to size slices of an oversized block."""
CHARS_PER_TOKEN = 2.35
"""The original estimator's ratio; sizes the first guess of each slice of an oversized block."""
NO_MEMORY_YET = "(none yet)"
"""Shown in place of an empty memory section."""


class PackerInvariantError(OmrayError):
    """The packer built a multi-block group that does not fit its own budget (a bug, not bad input)."""


class MemoryLine(BaseModel):
    """One line of the Observer's memory context, with what trimming needs to order it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["reflection", "observation"]
    """Which memory section the line belongs to."""
    memory_id: str
    """Full reflection or observation id (the Observer sees full ids)."""
    text: str
    """The rendered line."""
    timestamp: str = ""
    """Observation timestamp (empty for reflections)."""
    relevance: str = ""
    """Observation relevance (empty for reflections)."""


class ChunkPart(ChunkPartIdentity):
    """One Observer input: a slice of a logical chunk, with its identities and the full user message.
    :meth:`to_coverage_part` gives the row committed with its observations."""

    chunk_ordinal: int = Field(ge=0)
    """Which packed group (logical chunk) of this pack the part belongs to, from 0; tells apart two chunks
    that happen to share a range."""
    rendered_part: str
    """The part's source text."""
    source_refs: tuple[SourceRef, ...]
    """Refs the Observer may cite in this part (normalized union of the chunk's block refs)."""
    user_message: str
    """Memory context, source section and local-time line, as sent to the Observer."""
    token_estimate: int = Field(ge=0)
    """Token count of ``user_message``."""


# --- memory context -------------------------------------------------------------------------------


def memory_context_lines(
    reflections: Sequence[ReflectionView],
    observations: Sequence[ObservationView],
    local_ids: Mapping[str, str] | None = None,
) -> list[MemoryLine]:
    """Memory lines in the order given: reflections (position order), then observations.

    ``[<id>] <content>`` and ``[<id>] <timestamp> [<relevance>] <content>``. With ``local_ids``
    (observation id -> the session's stable short id, :meth:`RequestLocalIdMap.for_session`) the
    lines carry short ids instead of the 64-character canonical ones (reflections ``R1``, ``R2``…
    by position): the Observer never cites memory ids, and a canonical id costs dozens of tokens.
    Observations missing from ``local_ids`` keep their canonical id.
    """
    if local_ids is None:
        reflection_lines = [(r.reflection_id, r.reflection_id, r.content) for r in reflections]
    else:
        reflection_lines = [(r.reflection_id, f"R{n}", r.content) for n, r in enumerate(reflections, 1)]
    lines = [
        MemoryLine(kind="reflection", memory_id=memory_id, text=f"[{shown}] {content}")
        for memory_id, shown, content in reflection_lines
    ]
    ids = local_ids or {}
    lines.extend(
        MemoryLine(
            kind="observation",
            memory_id=o.observation_id,
            text=f"[{ids.get(o.observation_id, o.observation_id)}] {o.timestamp} [{o.relevance}] {o.content}",
            timestamp=o.timestamp,
            relevance=o.relevance,
        )
        for o in observations
    )
    return lines


def memory_budget(envelope_tokens: int, fixed_overhead_tokens: int) -> int:
    """Tokens the memory context may use: ``max(64, floor((envelope - overhead) * 0.55))``."""
    return max(
        MIN_BUDGET_TOKENS, math.floor((envelope_tokens - fixed_overhead_tokens) * MEMORY_ENVELOPE_FRACTION)
    )


def memory_pages(tokens: Sequence[int], page_tokens: int) -> list[tuple[int, int]]:
    """``(lines, tokens)`` of consecutive pages of lines with these token counts: each page holds at
    most ``page_tokens`` (at least one line). Pages are cut from the first line on, so appending
    lines never moves an earlier cut."""
    pages: list[tuple[int, int]] = []
    lines = used = 0
    for count in tokens:
        if lines and used + count > page_tokens:
            pages.append((lines, used))
            lines = used = 0
        lines += 1
        used += count
    if lines:
        pages.append((lines, used))
    return pages


def trim_memory_lines(
    lines: Sequence[MemoryLine], budget: int, count_tokens: Callable[[str], int]
) -> tuple[list[MemoryLine], list[MemoryLine]]:
    """Reflections and observations to show, within ``budget`` tokens (sum of per-line counts).

    Observations are taken in the order given (the session's source order, oldest first). Over
    budget, whole pages of :data:`MEMORY_PAGE_FRACTION` of the budget are dropped from the front
    (oldest first) until the rest fits; if still over, reflections are dropped from the end.
    Dropping whole pages instead of single lines keeps the memory section a stable prefix of the
    next requests: as new observations are appended, the cut moves only once a page's worth has
    accumulated, so a provider's prompt cache keeps matching (the original dropped one line at a
    time, which changed the start of the section on nearly every call).
    """
    counted = [(line, count_tokens(line.text)) for line in lines]
    reflections = [item for item in counted if item[0].kind == "reflection"]
    observations = [item for item in counted if item[0].kind == "observation"]
    total = sum(tokens for _, tokens in counted)
    dropped = 0
    page_tokens = max(1, math.floor(budget * MEMORY_PAGE_FRACTION))
    for page_lines, page_used in memory_pages([tokens for _, tokens in observations], page_tokens):
        if total <= budget:
            break
        total -= page_used
        dropped += page_lines
    observations = observations[dropped:]
    while reflections and total > budget:
        total -= reflections.pop()[1]
    return [line for line, _ in reflections], [line for line, _ in observations]


def memory_text(reflections: Sequence[MemoryLine], observations: Sequence[MemoryLine]) -> str:
    """The memory section of the user message (``(none yet)`` for an empty section)."""
    return "\n".join(
        [
            "CURRENT REFLECTIONS:",
            *([line.text for line in reflections] or [NO_MEMORY_YET]),
            "",
            "CURRENT OBSERVATIONS:",
            *([line.text for line in observations] or [NO_MEMORY_YET]),
        ]
    )


def timestamp_line(local_time: str) -> str:
    """Last line of every user message."""
    return TIMESTAMP_LINE_PREFIX + local_time


# --- packing ----------------------------------------------------------------------------------


def source_budget(
    envelope_tokens: int, fixed_overhead_tokens: int, memory: str, count_tokens: Callable[[str], int]
) -> int:
    """Tokens one part's source text may use: what is left of the envelope after the fixed overhead,
    the memory section, the framing and a local-time line (floor 64).

    The time line is reserved as prefix + 16 tokens (a 16-character ASCII time is at most 16 tokens), so the
    budget, and therefore every digest and key, does not depend on the actual local time.
    """
    framing = count_tokens(SOURCE_SECTION_PREFIX + TIMESTAMP_SEPARATOR)
    time_reserve = count_tokens(TIMESTAMP_LINE_PREFIX) + LOCAL_TIME_LENGTH
    return max(
        MIN_BUDGET_TOKENS,
        envelope_tokens - fixed_overhead_tokens - count_tokens(memory) - framing - time_reserve,
    )


def even_slices(text: str, count: int) -> list[str]:
    """``text`` cut into ``count`` consecutive code-point slices whose lengths differ by at most one."""
    length = len(text)
    bounds = [length * index // count for index in range(count + 1)]
    return [text[bounds[index] : bounds[index + 1]] for index in range(count)]


def split_text(text: str, budget: int, count_tokens: Callable[[str], int]) -> list[str]:
    """Consecutive code-point slices of ``text``, each within ``budget`` tokens.

    The slice count starts from the original's slice size, ``max(64, floor(max(32, budget) * 2.35))``
    code points, and grows until every slice fits (token-dense text). The slices themselves depend only
    on ``text`` and their count, never on ``budget``: the count is part of the chunk key, so a retry that
    packs the same block under another budget (memory grew when earlier parts committed) either gets the
    same key and the same parts, or a new key. Budget-dependent slice boundaries would give the same key
    with other part digests, and the coverage row of a part committed before the failure would then
    conflict with the retry forever.
    """
    if not text:
        return []
    max_chars = max(MIN_SPLIT_CHARS, math.floor(max(MIN_SPLIT_BUDGET_TOKENS, budget) * CHARS_PER_TOKEN))
    count = math.ceil(len(text) / max_chars)
    while True:
        slices = even_slices(text, count)
        largest = max(count_tokens(piece) for piece in slices)
        if largest <= budget or count >= len(text):
            return slices
        count = min(len(text), max(count + 1, math.ceil(count * largest / max(1, budget))))


class _PackContext:
    def __init__(
        self,
        session_id: str,
        memory: str,
        local_time: str,
        renderer_version: str,
        observer_schema_version: str,
        count_tokens: Callable[[str], int],
    ) -> None:
        self.session_id = session_id
        self.memory = memory
        self.time_line = timestamp_line(local_time)
        self.renderer_version = renderer_version
        self.observer_schema_version = observer_schema_version
        self.count_tokens = count_tokens
        self.parts: list[ChunkPart] = []
        self.ordinal = 0

    def emit(self, blocks: Sequence[SourceBlock], texts: Sequence[str]) -> None:
        """Parts of one logical chunk: ``texts`` are its slices (one slice when it was not split)."""
        start = min(block.seq for block in blocks)
        end = max(block.seq for block in blocks)
        digest = source_digest(block.digest_entry() for block in blocks)
        key = chunk_key(
            self.session_id,
            start,
            end,
            self.renderer_version,
            self.observer_schema_version,
            digest,
            len(texts),
        )
        refs = tuple(normalize_source_refs(ref for block in blocks for ref in block.source_refs))
        for index, text in enumerate(texts, start=1):
            message = self.memory + SOURCE_SECTION_PREFIX + text + TIMESTAMP_SEPARATOR + self.time_line
            text_digest = part_digest(text)
            self.parts.append(
                ChunkPart(
                    session_id=self.session_id,
                    chunk_ordinal=self.ordinal,
                    source_start_seq=start,
                    source_end_seq=end,
                    chunk_key=key,
                    part_index=index,
                    part_count=len(texts),
                    source_digest=digest,
                    part_digest=text_digest,
                    coverage_key=coverage_key(key, index, text_digest),
                    rendered_part=text,
                    source_refs=refs,
                    user_message=message,
                    token_estimate=self.count_tokens(message),
                    renderer_version=self.renderer_version,
                    observer_schema_version=self.observer_schema_version,
                )
            )
        self.ordinal += 1


def pack_parts(
    *,
    session_id: str,
    blocks: Sequence[SourceBlock],
    envelope_tokens: int,
    fixed_overhead_tokens: int,
    memory_lines: Sequence[MemoryLine],
    local_time: str,
    renderer_version: str,
    observer_schema_version: str,
    count_tokens: Callable[[str], int],
) -> list[ChunkPart]:
    """Pack ``blocks`` (builder order) greedily into parts whose source text fits the source budget.

    Blocks are never split across parts unless one block alone exceeds the budget; then it becomes its
    own chunk of N slices sharing one range, digest and chunk key. Call :func:`normalize_coverage` on the
    result before committing anything.
    """
    if not blocks:
        raise PackerInvariantError(f"no source blocks to pack for run {session_id!r}")
    reflections, observations = trim_memory_lines(
        memory_lines, memory_budget(envelope_tokens, fixed_overhead_tokens), count_tokens
    )
    memory = memory_text(reflections, observations)
    budget = source_budget(envelope_tokens, fixed_overhead_tokens, memory, count_tokens)
    separator_tokens = count_tokens(BLOCK_SEPARATOR)
    context = _PackContext(
        session_id, memory, local_time, renderer_version, observer_schema_version, count_tokens
    )

    def finalize(group: list[SourceBlock]) -> None:
        text = BLOCK_SEPARATOR.join(block.rendered_text for block in group)
        if count_tokens(text) <= budget:
            context.emit(group, [text])
        elif len(group) > 1:
            raise PackerInvariantError(
                f"packed group of {len(group)} blocks at seqs {group[0].seq}..{group[-1].seq} "
                f"of run {session_id!r} exceeds its source budget of {budget} tokens"
            )
        else:
            context.emit(group, split_text(text, budget, count_tokens))

    group: list[SourceBlock] = []
    group_tokens = 0
    for block in blocks:
        block_tokens = count_tokens(block.rendered_text)
        join_cost = separator_tokens if group else 0
        if group and group_tokens + join_cost + block_tokens > budget:
            finalize(group)
            group, group_tokens, join_cost = [], 0, 0
        if not group and block_tokens > budget:
            context.emit([block], split_text(block.rendered_text, budget, count_tokens))
            continue
        group.append(block)
        group_tokens += join_cost + block_tokens
    if group:
        finalize(group)
    return context.parts


# --- coverage normalization -------------------------------------------------------------------


def normalize_coverage(
    parts: Sequence[ChunkPart], observe_start: int, terminal_end_seq: int
) -> list[ChunkPart]:
    """Stretch chunk ranges so that together they tile ``observe_start..terminal_end_seq`` with no hole.

    Seqs that rendered nothing (e.g. ``agent_command_queued``) still need coverage: the first chunk
    starts no later than ``observe_start``, a gap before a chunk is attached to that chunk, and the last
    chunk ends no earlier than ``terminal_end_seq``. Chunk and coverage keys are recomputed from the new
    ranges; text, refs and digests are unchanged.

    Chunks are identified by the packer's ``chunk_ordinal``, not by equal ranges: two separately packed
    single-part chunks on the same seq stay two chunks (the original would merge them into one chunk with
    a repeated ``part_index`` 1).
    """
    groups: list[list[ChunkPart]] = []
    for part in parts:
        if groups and groups[-1][0].chunk_ordinal == part.chunk_ordinal:
            groups[-1].append(part)
        else:
            groups.append([part])
    ranges = [[group[0].source_start_seq, group[0].source_end_seq] for group in groups]
    if not ranges:
        return []
    ranges[0][0] = min(ranges[0][0], observe_start)
    for previous, following in itertools.pairwise(ranges):
        if following[0] > previous[1] + 1:
            following[0] = previous[1] + 1
    ranges[-1][1] = max(ranges[-1][1], terminal_end_seq)

    normalized: list[ChunkPart] = []
    for group, (start, end) in zip(groups, ranges, strict=True):
        first = group[0]
        key = chunk_key(
            first.session_id,
            start,
            end,
            first.renderer_version,
            first.observer_schema_version,
            first.source_digest,
            first.part_count,
        )
        normalized.extend(
            part.model_copy(
                update={
                    "source_start_seq": start,
                    "source_end_seq": end,
                    "chunk_key": key,
                    "coverage_key": coverage_key(key, part.part_index, part.part_digest),
                }
            )
            for part in group
        )
    return normalized
