"""Loading omray settings from YAML files.

Accepts a whole Hatfield ``.hatfield/settings.yaml`` (the ``observational_memory`` block under
``extensions.settings`` is used as-is), a file with a top-level ``observational_memory:`` key, or
a file holding just the block. Parsing lives in :mod:`persistence.settings.parse` and the shapes in
:mod:`protocol.settings`; this module only reads.

Reading is defensive: at most :data:`MAX_SETTINGS_BYTES` are read (``OMRAY_SETTINGS=/dev/zero``
is an error, not an endless read), the text must be UTF-8, a key may appear only once per mapping
and nesting too deep for the parser is an error. Every failure is a :class:`SettingsError` naming
the file (and the line when there is one), never its content.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from persistence.settings.parse import apply_overrides, extract_om_block, settings_from_mapping
from protocol.errors import SettingsError
from protocol.settings import OmSettings

SETTINGS_ENV = "OMRAY_SETTINGS"
"""Environment variable naming a settings file."""

DEFAULT_SETTINGS_FILES = ("omray.yaml", ".hatfield/settings.yaml")
"""Files looked for (relative to the working directory) when no path is given."""

MAX_SETTINGS_BYTES = 1024 * 1024
"""Largest settings file read (1 MiB); a real one is a few kilobytes."""

_MERGE_TAG = "tag:yaml.org,2002:merge"
_KEY_SHOWN_CHARS = 80


class _DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: object, line: int, first_line: int) -> None:
        super().__init__()
        self.key = key
        self.line = line
        self.first_line = first_line


class _UniqueKeyLoader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a key repeated in one mapping (YAML says keys are unique;
    PyYAML would silently keep the last value)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[object, int] = {}
        for key_node, _value in node.value:
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue  # merge keys may repeat; complex keys are left to PyYAML
            key = self.construct_object(key_node)
            line = key_node.start_mark.line + 1
            try:
                first_line = seen.get(key)
            except TypeError:
                continue  # an unhashable key: PyYAML rejects it itself
            if first_line is not None:
                raise _DuplicateKeyError(key, line, first_line)
            seen[key] = line
        return super().construct_mapping(node, deep)


def _read_bounded(file_path: Path) -> str:
    try:
        with file_path.open("rb") as handle:
            raw = handle.read(MAX_SETTINGS_BYTES + 1)
    except OSError as exc:
        raise SettingsError(f"cannot read settings file {str(file_path)!r} ({type(exc).__name__})") from None
    return decode_bounded(raw, MAX_SETTINGS_BYTES, f"settings file {str(file_path)!r}", SettingsError)


def decode_bounded(
    raw: bytes, max_bytes: int, name: str, error: Callable[[str], Exception], hint: str = ""
) -> str:
    """``raw`` (read with ``max_bytes + 1`` as the limit) as UTF-8 text; else ``error`` naming ``name``
    and, for text that is not UTF-8, the line, never the content (``hint`` is appended to that message)."""
    if len(raw) > max_bytes:
        raise error(f"{name} is larger than {max_bytes} bytes")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise error(f"{name} is not UTF-8 text (line {line}){hint}") from None


def read_settings_document(path: str | Path) -> Mapping[str, Any]:
    """Parse one YAML settings file; errors name the file and line, never its content."""
    file_path = Path(path)
    text = _read_bounded(file_path)
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass: no arbitrary objects
    except _DuplicateKeyError as exc:
        shown = repr(exc.key)[:_KEY_SHOWN_CHARS]
        raise SettingsError(
            f"settings file {str(file_path)!r} repeats key {shown} at line {exc.line} "
            f"(first set at line {exc.first_line})"
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise SettingsError(f"settings file {str(file_path)!r} is not valid YAML{where}") from None
    except RecursionError:
        raise SettingsError(f"settings file {str(file_path)!r} is nested too deeply") from None
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise SettingsError(f"settings file {str(file_path)!r} must hold a mapping")
    return doc


def is_hatfield_file(path: str | Path) -> bool:
    """Whether ``path`` is Hatfield's own settings file (``.hatfield/settings.yaml``), which holds
    Hatfield's keys beside omray's block."""
    file_path = Path(path)
    return file_path.name == "settings.yaml" and file_path.parent.name == ".hatfield"


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
        block = extract_om_block(read_settings_document(file_path), shared=is_hatfield_file(file_path))
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
