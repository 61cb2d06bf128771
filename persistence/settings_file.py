"""Loading omray settings from YAML files.

Accepts a whole Hatfield ``.hatfield/settings.yaml`` (the ``observational_memory`` block under
``extensions.settings`` is used as-is), a file with a top-level ``observational_memory:`` key, or
a file holding just the block. Validation lives in :mod:`protocol.settings`; this module only reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from protocol.errors import SettingsError
from protocol.settings import OmSettings, apply_overrides, extract_om_block, settings_from_mapping

SETTINGS_ENV = "OMRAY_SETTINGS"
"""Environment variable naming a settings file."""

DEFAULT_SETTINGS_FILES = ("omray.yaml", ".hatfield/settings.yaml")
"""Files looked for (relative to the working directory) when no path is given."""


def read_settings_document(path: str | Path) -> Mapping[str, Any]:
    """Parse one YAML settings file; errors name the file and line, never its content."""
    file_path = Path(path)
    try:
        text = file_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {str(file_path)!r} ({type(exc).__name__})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SettingsError(f"settings file {str(file_path)!r} is not valid YAML{where}") from None
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise SettingsError(f"settings file {str(file_path)!r} must hold a mapping")
    return doc


def find_settings_file(cwd: str | Path) -> Path | None:
    """The settings file in effect: ``$OMRAY_SETTINGS``, else the first default file found."""
    env_path = os.environ.get(SETTINGS_ENV)
    if env_path:
        return Path(env_path)
    for name in DEFAULT_SETTINGS_FILES:
        candidate = Path(cwd) / name
        if candidate.is_file():
            return candidate
    return None


def load_settings_block(
    path: str | Path | None = None, overrides: Sequence[str] = (), cwd: str | Path | None = None
) -> dict[str, Any]:
    """The raw ``observational_memory`` block from ``path`` (or the file found) plus ``KEY=VALUE`` overrides.

    Validated (a bad block raises ``SettingsError``), so it can travel in job payloads as-is.
    """
    base_dir = Path(cwd) if cwd is not None else Path.cwd()
    file_path = Path(path) if path is not None else find_settings_file(base_dir)
    block: Mapping[str, Any] = {}
    if file_path is not None:
        block = extract_om_block(read_settings_document(file_path))
    if overrides:
        block = apply_overrides(block, list(overrides))
    settings_from_mapping(block)
    return dict(block)


def load_settings(
    path: str | Path | None = None, overrides: Sequence[str] = (), cwd: str | Path | None = None
) -> OmSettings:
    """Settings from ``path`` (or the file :func:`find_settings_file` finds) plus ``KEY=VALUE`` overrides."""
    return settings_from_mapping(load_settings_block(path, overrides, cwd))


def job_settings_block(settings_file: str | None, inline_block: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a job runs with, read when it runs: ``settings_file`` if the job names one (a
    missing or bad file is a ``SettingsError``: the attempt fails and the queue retries), else the
    inline block the job carries (settings given in code, or a payload from before ``settings_file``)."""
    if settings_file is not None:
        return load_settings_block(settings_file)
    block = dict(inline_block)
    settings_from_mapping(block)
    return block
