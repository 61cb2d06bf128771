"""Observe jobs carry a fingerprint of the settings the client sent them with (issue 40 item 1): a
job accepted with another fingerprint than a project's failed jobs re-drives them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

from actors.queue.intake import parse_envelope
from actors.queue.redrive import fingerprint_of
from cluster.client import OmrayClient
from cluster.naming import RuntimeNames
from protocol.jobs import settings_fingerprint


def _fingerprint(tmp_path: Path, settings: dict[str, Any]) -> str | None:
    client = OmrayClient(RuntimeNames(prefix="t"), settings=settings, cwd=tmp_path)
    envelope = client.observe_envelope("s1", 4)
    # What the queue reads back from the dispatched envelope.
    return fingerprint_of(parse_envelope(envelope.model_dump(mode="json")))


def test_the_fingerprint_follows_the_settings_not_their_key_order(tmp_path: Path) -> None:
    one = {"model": "builtin/extractive", "observer": {"observe_after_tokens": 0, "idle_flush_seconds": 9}}
    same = {"observer": {"idle_flush_seconds": 9, "observe_after_tokens": 0}, "model": "builtin/extractive"}
    fixed = {**one, "observer": {"observe_after_tokens": 10, "idle_flush_seconds": 9}}
    assert _fingerprint(tmp_path, one) is not None
    assert _fingerprint(tmp_path, one) == _fingerprint(tmp_path, same)
    assert _fingerprint(tmp_path, one) != _fingerprint(tmp_path, fixed)


def test_a_block_json_cannot_hold_sends_no_fingerprint() -> None:
    assert settings_fingerprint({"model": "builtin/extractive", "since": datetime.date(2026, 1, 1)}) is None
