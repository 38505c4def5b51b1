"""What models a request can name here (for /v1/models): on disk, buildable from a recipe, or loaded."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ..catalog import Entry
from ..errors import ModelNotFound
from ..manager import ModelManager, Target


@dataclass
class ModelInfo:
    name: str
    entry: Entry | None
    path: Path | None  # None: not on disk (yet)
    created: int
    size: int


def digest_of(path: Path) -> str:
    """A stable id for a plain checkpoint folder: sha256 of its weight files' names, sizes and times."""
    h = hashlib.sha256(str(path.name).encode())
    for p in sorted(path.glob("*.safetensors")):
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()


def _info(name: str, entry: Entry | None, path: Path | None) -> ModelInfo:
    if path is not None:
        weights = list(path.glob("*.safetensors"))
        size = sum(p.stat().st_size for p in weights)
        created = int(max((p.stat().st_mtime for p in weights), default=path.stat().st_mtime))
    else:
        size, created = (entry.quantization.size_bytes or 0) if entry else 0, 0
    return ModelInfo(name, entry, path, created, size)


def available(manager: ModelManager) -> list[ModelInfo]:
    """Models a request can name right now: on disk, buildable from a recipe, or loaded."""
    from ..hub import store

    runs = manager.runners.supports
    out = {m.name: ModelInfo(m.name, m.entry, m.path, int(m.modified), m.size)
           for m in store.downloaded(manager.settings, manager.catalog)
           if m.entry is None or runs(m.entry.family.loader)}
    for entry in manager.catalog.entries():
        if entry.quantization.generated is not None and runs(entry.family.loader):
            out.setdefault(entry.tag, _info(entry.tag, entry, None))
    for served in manager.models.values():
        out.setdefault(served.name, _info(served.name, served.target.entry, served.target.path))
    return sorted(out.values(), key=lambda m: m.name)


def describe(manager: ModelManager, name: str) -> ModelInfo:
    """One model by any of its names; 404 if it is neither cataloged nor on disk."""
    target: Target = manager.resolve(name)
    if target.entry is None and target.path is None:
        raise ModelNotFound(f"model {name!r} not found")
    return _info(target.name, target.entry, target.path)


def mtime_iso(ts: int) -> str:
    import datetime as dt

    if not ts:
        return "1970-01-01T00:00:00Z"
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).astimezone().isoformat()


