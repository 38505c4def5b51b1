"""A cache of clean catalog layers, keyed by their exact bytes and by this package's code.

Why: ruamel's round-trip parser (needed for line/column positions) is pure Python and takes most of a second
for the built-in catalog; a layer whose files, schema and loader code are unchanged is read back from a pickle
in milliseconds. Only clean layers are cached, so every problem is always reported from a real parse.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import tempfile
from pathlib import Path

from .paths import schema_file

ENV_CACHE_DIR = "MLX_SERVICE_CACHE_DIR"


def cache_dir() -> Path:
    if os.environ.get(ENV_CACHE_DIR):
        return Path(os.environ[ENV_CACHE_DIR]) / "catalog"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mlx-service" / "catalog"


@functools.lru_cache(maxsize=1)
def _code_fingerprint() -> bytes:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    digest.update(schema_file().read_bytes())
    return digest.digest()


def layer_key(files: list[tuple[Path, str]]) -> str:
    digest = hashlib.sha256(_code_fingerprint())
    for path, display in files:
        digest.update(display.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def load(key: str):
    try:
        with (cache_dir() / f"{key}.pickle").open("rb") as f:
            return pickle.load(f)
    except Exception:  # a missing, stale or corrupt cache entry just means: parse again
        return None


def store(key: str, value) -> None:
    store_bytes(cache_dir() / f"{key}.pickle", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


def store_bytes(path: Path, data: bytes) -> None:
    """Write atomically; a cache that cannot be written (read-only home) is silently skipped."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass
