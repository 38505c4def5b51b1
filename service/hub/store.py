"""Models on this machine: pull by catalog name or repo id, list, delete (shared by the CLI and the HTTP API)."""

from __future__ import annotations

import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from ..catalog import Catalog, Entry, UncatalogedRepo
from ..catalog.resolve import ResolveError
from ..config import Settings
from ..errors import BadRequest, ModelNotFound
from ..locate import generated_dir, is_complete, locate
from .pull import Progress, Puller

_PULLER: Puller | None = None
_LOCK = threading.Lock()


def puller() -> Puller:
    """One per process, so concurrent pulls of the same model share one download."""
    global _PULLER
    with _LOCK:
        if _PULLER is None:
            _PULLER = Puller()
        return _PULLER


def use_puller(instance: Puller | None) -> None:
    """Replace the process's puller (tests point it at a local fake Hub)."""
    global _PULLER
    with _LOCK:
        _PULLER = instance


def _target(catalog: Catalog, name: str) -> Entry | UncatalogedRepo:
    try:
        return catalog.resolve(name)
    except ResolveError as exc:
        raise ModelNotFound(str(exc)) from None


def pull(settings: Settings, catalog: Catalog, name: str, progress: Progress | None = None,
         cancel: threading.Event | None = None) -> Path:
    """Fetch `name` (catalog name, tag or repo id) unless it is already complete here; returns its folder."""
    target = _target(catalog, name)
    progress = progress or (lambda event: None)
    if isinstance(target, Entry) and target.quantization.generated is not None:
        from ..recipes import build_checkpoint

        progress({"status": "building generated model", "total": 0, "completed": 0})
        path = build_checkpoint(target, catalog.prompt_style(target), generated_dir(settings.models_dir, target))
        progress({"status": "success", "total": 0, "completed": 0})
        return path
    located = locate(settings.models_dir, target)
    if located.path is not None:
        size = sum(p.stat().st_size for p in located.path.glob("*.safetensors"))
        progress({"status": "success", "total": size, "completed": size})
        return located.path
    repo = target.quantization.repo if isinstance(target, Entry) else target.repo
    revision = target.quantization.revision if isinstance(target, Entry) else None
    trust = isinstance(target, Entry) and target.family.trust_remote_code
    hub = puller()
    plan = hub.plan(repo, revision, trust_remote_code=trust)
    if isinstance(target, UncatalogedRepo):
        _check_kind(catalog, hub, plan)
    return hub.pull(plan, progress, cancel)


def _check_kind(catalog: Catalog, hub: Puller, plan) -> None:
    """Type an uncataloged repo from its config.json first, so an unknown kind fails before the weights."""
    import json

    from huggingface_hub.utils import httpx

    from ..catalog.detect import UndetectableModel

    r = httpx.get(f"{hub.endpoint}/{plan.repo}/resolve/{plan.sha}/config.json", headers=hub.headers(), timeout=30,
                  follow_redirects=True)
    try:
        catalog.detect(json.loads(r.text))
    except (UndetectableModel, ValueError) as exc:
        raise BadRequest(f"{plan.repo} cannot be served: {exc}") from None


@dataclass
class Local:
    name: str
    path: Path
    size: int
    revision: str | None
    modified: float
    entry: Entry | None


def downloaded(settings: Settings, catalog: Catalog) -> list[Local]:
    """Every complete checkpoint here: cataloged entries, other repos in the HF cache, MODELS_DIR folders."""
    out: dict[str, Local] = {}

    def add(name: str, path: Path, entry: Entry | None) -> None:
        weights = list(path.glob("*.safetensors"))
        revision = path.name if path.parent.name == "snapshots" else None
        modified = max((p.stat().st_mtime for p in weights), default=path.stat().st_mtime)
        out.setdefault(name, Local(name, path, sum(p.stat().st_size for p in weights), revision, modified, entry))

    for entry in catalog.entries():
        path = locate(settings.models_dir, entry).path
        if path is not None:
            add(entry.tag, path, entry)
    cataloged = {e.quantization.repo.lower() for e in catalog.entries() if e.quantization.repo}
    hub_cache = puller().cache_dir
    if hub_cache.is_dir():
        for folder in hub_cache.glob("models--*--*"):
            repo = folder.name[len("models--"):].replace("--", "/", 1)
            if repo.lower() in cataloged:
                continue
            for snap in (folder / "snapshots").glob("*"):
                if is_complete(snap):
                    add(repo, snap, None)
    if settings.models_dir.is_dir():
        for child in sorted(settings.models_dir.iterdir()):
            if child.name != "generated" and is_complete(child):
                add(child.name, child, None)
    return sorted(out.values(), key=lambda m: m.name)


def find(settings: Settings, catalog: Catalog, name: str) -> Local:
    """The downloaded checkpoint `name` means (any spelling of a cataloged model, or a listed name)."""
    here = downloaded(settings, catalog)
    match = next((m for m in here if m.name == name), None)
    if match is None:  # another spelling of a cataloged model: match by where it is
        try:
            path = locate(settings.models_dir, _target(catalog, name)).path
        except (ModelNotFound, BadRequest):
            path = None
        match = next((m for m in here if m.path == path), None) if path else None
    if match is None:
        raise ModelNotFound(f"model '{name}' not found on this machine")
    return match


def delete(settings: Settings, catalog: Catalog, name: str) -> Path:
    """Remove a downloaded checkpoint (a whole HF-cache repo revision, or a MODELS_DIR folder)."""
    return remove(settings, find(settings, catalog, name).path)


def remove(settings: Settings, path: Path) -> Path:
    """Delete `path`, which must be a snapshot in the HF cache or a folder (or a link) in MODELS_DIR: nothing
    outside them is ever deleted, and a link is removed without touching what it points to."""
    cache, models = puller().cache_dir, settings.models_dir
    if path.parent.name == "snapshots" and _under(path.parent, cache):
        from huggingface_hub import scan_cache_dir

        repo_dir = path.parent.parent
        for link in path.rglob("*"):  # a link out of the cache (a tampered pull by an older version) goes alone:
            if link.is_symlink() and not _under(link, cache):  # huggingface_hub would delete its target
                link.unlink()
        info = scan_cache_dir(repo_dir.parent)
        info.delete_revisions(path.name).execute()
        if repo_dir.exists() and not any((repo_dir / "snapshots").glob("*")):
            shutil.rmtree(repo_dir, ignore_errors=True)
    elif _under(path.parent, models):
        if path.is_symlink():
            path.unlink()
        else:
            shutil.rmtree(path)
    else:
        raise BadRequest(f"refused to delete {path.name!r}: it is not in the model cache or MODELS_DIR")
    return path


def _under(path: Path, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
