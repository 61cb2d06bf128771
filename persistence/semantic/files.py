"""Files of the derived index: permissions, checksums, and the manifest's seal.

Every derived file is 0600 under a 0700 directory. SQLite pages carry no checksum of their own, so
the manifest is sealed with a SHA-256 beside it; the vector file and the keyword directory are
checked against digests recorded in the manifest.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Final

from protocol.canonical import sha256_hex
from protocol.errors import StorageError

DIRECTORY_MODE: Final[int] = 0o700
FILE_MODE: Final[int] = 0o600
LOCK_FILE: Final[str] = "index.lock"
MANIFEST_FILE: Final[str] = "manifest.sqlite"
VECTOR_FILE: Final[str] = "vectors.hnsw"
KEYWORD_DIR: Final[str] = "keyword"
KEYWORD_LABELS_FILE: Final[str] = "labels.json"


class DerivedIndexError(StorageError):
    """A derived index file is missing, corrupt or inconsistent (the index must be rebuilt)."""


def secure_file(path: Path) -> None:
    os.chmod(path, FILE_MODE)


def file_digest(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def file_key(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return (info.st_ino, info.st_size, info.st_mtime_ns)


_SEALED: dict[str, tuple[tuple[int, int, int], str]] = {}
"""Manifest path -> (file key, checksum) last sealed or verified by this process."""


def seal_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def seal(path: Path) -> None:
    """Record the manifest's checksum next to it (SQLite pages carry none of their own)."""
    digest = file_digest(path)
    seal = seal_path(path)
    temporary = seal.with_name(seal.name + ".tmp")
    temporary.write_text(digest, encoding="ascii")
    secure_file(temporary)
    os.replace(temporary, seal)
    _SEALED[str(path)] = (file_key(path), digest)


def verify_sealed(path: Path) -> None:
    try:
        expected = seal_path(path).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise DerivedIndexError(f"semantic manifest {path.name!r} has no readable checksum") from exc
    key = file_key(path)
    if _SEALED.get(str(path)) == (key, expected):
        return
    if file_digest(path) != expected:
        raise DerivedIndexError(f"semantic manifest {path.name!r} fails its checksum")
    _SEALED[str(path)] = (key, expected)


FileKeys = tuple[tuple[str, tuple[int, int, int]], ...]


def directory_keys(directory: Path) -> FileKeys:
    """Names and stat keys of a directory's files: unchanged keys mean unchanged files."""
    return tuple((path.name, file_key(path)) for path in sorted(directory.iterdir()))


def directory_digest(directory: Path) -> str:
    lines = [f"{path.name}:{file_digest(path)}" for path in sorted(directory.iterdir())]
    return sha256_hex("\n".join(lines))
