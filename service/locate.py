"""Where a resolved model's checkpoint is on this machine: a MODELS_DIR folder, the Hugging Face cache, or a
`generated` recipe's build folder. Names never escape MODELS_DIR."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .catalog import Entry, UncatalogedRepo
from .errors import BadRequest

GENERATED = "generated"
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")


@dataclass(frozen=True)
class Located:
    path: Path | None  # None: not on this machine
    source: str  # models_dir | hf_cache | generated


def inside(root: Path, *parts: str) -> Path:
    """`root/parts...`, refusing anything that would resolve outside `root`."""
    joined = "/".join(parts)
    if len(joined) > 512 or any(len(p.encode()) > 255 for p in joined.split("/")):
        raise BadRequest("invalid model name: too long (a name is at most 512 characters, 255 per part)")
    if not _SAFE.match(joined) or ".." in joined.split("/"):
        raise BadRequest(f"invalid model name {joined!r}: letters, digits, '.', '_', '-' and one '/' only")
    path = (root / joined).resolve()
    if not path.is_relative_to(_resolved(root)):
        raise BadRequest(f"invalid model name {joined!r}")
    return path


@lru_cache(maxsize=8)
def _resolved(root: Path) -> Path:
    """MODELS_DIR itself is resolved once (it is on every request's path); names under it always are."""
    return root.resolve()


def is_complete(folder: Path) -> bool:
    """config.json plus every weight file the index names (or a single model.safetensors)."""
    if not (folder / "config.json").is_file():
        return False
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, TypeError):
            return False
        return all((folder / shard).is_file() for shard in shards)
    return any(folder.glob("*.safetensors"))


def generated_dir(models_dir: Path, entry: Entry) -> Path:
    return inside(models_dir, GENERATED, entry.tag.replace(":", "-"))


def hf_snapshot(repo: str, revision: str | None) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo, "config.json", revision=revision)
    if not isinstance(found, str):
        return None
    folder = Path(found).parent
    return folder if is_complete(folder) else None


def locate(models_dir: Path, target: Entry | UncatalogedRepo) -> Located:
    if isinstance(target, Entry) and target.quantization.generated is not None:
        folder = generated_dir(models_dir, target)
        return Located(folder if is_complete(folder) else None, "generated")
    repo = target.quantization.repo if isinstance(target, Entry) else target.repo
    revision = target.quantization.revision if isinstance(target, Entry) else None
    for candidate in (inside(models_dir, repo), inside(models_dir, repo.split("/")[-1])):
        if candidate.parent.name == GENERATED or candidate.name == GENERATED:
            continue  # MODELS_DIR/generated holds recipe builds; it is reached through their catalog entries only
        if is_complete(candidate):
            return Located(candidate, "models_dir")
    snapshot = hf_snapshot(repo, revision)
    return Located(snapshot, "hf_cache") if snapshot else Located(None, "hf_cache")


def local_folder(models_dir: Path, name: str) -> Path | None:
    """A plain checkpoint folder MODELS_DIR/NAME that the catalog does not list."""
    try:
        folder = inside(models_dir, name)
    except BadRequest:
        return None
    if name.split("/")[0] == GENERATED:
        return None
    return folder if is_complete(folder) else None
