"""Scripted memory models for the scripted OpenAI-compatible server (tests and benchmarks).

:class:`ScriptedMemoryModel` answers all three memory roles through native tool calls, the way a
diligent real model would: the Observer gets one observation per source block of its chunk, the
Reflector one reflection supported by the first observations it was shown, the Dropper a few
drop proposals. An optional latency per request stands in for a real model's response time: a
fixed part, plus a part that grows with the prompt (a real model reads every prompt token before it
answers, so a coalesced prompt of many turns takes longer than one turn's).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from testkit.scripted_server import Reply, chat_text, chat_tool_calls

_LABEL = re.compile(r"\[Source entry id: ([^:\]]+):(\d+)\]\n\[[^\]@]+ @ (\d{4}-\d{2}-\d{2} \d{2}:\d{2})\]")
_LOCAL_ID = re.compile(r"^\[(\d+)\] ", re.MULTILINE)

CHARS_PER_TOKEN = 4
"""Characters per prompt token in :func:`prompt_tokens`'s estimate (English text with OpenAI's
tokenizers averages about four)."""


def prompt_tokens(body: Mapping[str, Any]) -> int:
    """Estimated prompt tokens of a chat request: the characters of its messages' text, over
    :data:`CHARS_PER_TOKEN` (no tokenizer: the scripted server stays dependency-free)."""
    chars = 0
    for message in body.get("messages", ()):
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(str(part.get("text", ""))) for part in content if isinstance(part, Mapping))
    return chars // CHARS_PER_TOKEN


class ScriptedMemoryModel:
    """Answers the Observer (one observation per block), the Reflector and the Dropper.

    Every answer waits ``latency_s`` plus ``seconds_per_prompt_token`` for each prompt token
    (estimated by :func:`prompt_tokens`). Thread-safe enough for a threaded server: the counters
    are informational only.
    """

    def __init__(self, latency_s: float = 0.0, seconds_per_prompt_token: float = 0.0) -> None:
        self.latency_s = latency_s
        self.seconds_per_prompt_token = seconds_per_prompt_token
        self.reflector_requests = 0
        self.hold_reflector_s = 0.0

    def __call__(self, body: Mapping[str, Any]) -> Reply:
        reply = self._answer(body)
        delay = self.latency_s
        if self.seconds_per_prompt_token:
            delay += self.seconds_per_prompt_token * prompt_tokens(body)
        if delay:
            return Reply(status=reply.status, body=reply.body, delay_s=reply.delay_s + delay)
        return reply

    def _answer(self, body: Mapping[str, Any]) -> Reply:
        messages = body["messages"]
        if messages[-1]["role"] == "tool":
            return chat_text("Done.")
        tool = body["tools"][0]["function"]["name"]
        reply = chat_tool_calls(*self.calls_for(tool, str(messages[-1]["content"])))
        if tool == "record_reflections" and self.hold_reflector_s:
            hold, self.hold_reflector_s = self.hold_reflector_s, 0.0
            return Reply(status=reply.status, body=reply.body, delay_s=hold)
        return reply

    def calls_for(self, tool: str, text: str) -> list[tuple[str, dict[str, Any]]]:
        """The tool calls answering a first request offering ``tool`` with input ``text`` (any
        transport: native tool calls here, a CLI's structured answer in :mod:`testkit.anthropic_messages`)."""
        if tool == "record_observations":
            chunk = text.split("NEW SOURCE-ADDRESSED CONVERSATION CHUNK:", 1)[-1]
            items = [
                {
                    "timestamp": ts,
                    "content": f"Entry {seq} of {run} was handled with care and recorded for later",
                    "relevance": "low",
                    "source_refs": [{"run_id": run, "seq": int(seq)}],
                }
                for run, seq, ts in _LABEL.findall(chunk)
            ]
            return [("record_observations", {"observations": items})]
        local_ids = _LOCAL_ID.findall(text.split("CURRENT OBSERVATIONS:", 1)[-1])
        if tool == "record_reflections":
            self.reflector_requests += 1
            reflection = {
                "content": "The session fixed date parsing in the billing importer.",
                "supporting_observation_ids": local_ids[:4],
            }
            return [("record_reflections", {"reflections": [reflection]})]
        return [("drop_observations", {"ids": local_ids[:3]})]


_BLOCK = re.compile(
    r"\[Source entry id: ([^:\]]+):(\d+)\]\n\[[^\]@]+ @ (\d{4}-\d{2}-\d{2} \d{2}:\d{2})[^\]]*\]:(.*)"
)


class CondensingMemoryModel(ScriptedMemoryModel):
    """Condenses as a real model does: one short observation per ``every`` source blocks of a chunk,
    citing them all and quoting only the first few words of the first; Reflector and Dropper as
    :class:`ScriptedMemoryModel`. What it leaves out must stay findable in the transcript."""

    def __init__(
        self, every: int = 10, latency_s: float = 0.0, seconds_per_prompt_token: float = 0.0
    ) -> None:
        super().__init__(latency_s, seconds_per_prompt_token)
        self.every = every

    def calls_for(self, tool: str, text: str) -> list[tuple[str, dict[str, Any]]]:
        if tool != "record_observations":
            return super().calls_for(tool, text)
        chunk = text.split("NEW SOURCE-ADDRESSED CONVERSATION CHUNK:", 1)[-1]
        blocks = _BLOCK.findall(chunk)
        items = []
        for start in range(0, len(blocks), self.every):
            group = blocks[start : start + self.every]
            gist = " ".join(group[0][3].split()[:6]) or "an exchange"
            items.append(
                {
                    "timestamp": group[0][2],
                    "content": f"Talked about {gist} ({len(group)} messages).",
                    "relevance": "medium",
                    "source_refs": [{"run_id": run, "seq": int(seq)} for run, seq, _, _ in group],
                }
            )
        return [("record_observations", {"observations": items})]
