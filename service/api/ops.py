"""Operator endpoints (MLX Service's own, in no other API's dialect): stats and the event log."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict

from ..errors import ServiceError
from .common import json_body, number, parse_body
from .errors import OLLAMA
from .process import mlx_memory, rss_bytes
from .schemas import Cleared, EngineConfig, Events, Stats, documented

router = APIRouter()


@router.get("/api/events", responses=documented(OLLAMA, Events))
async def events(request: Request, model: str | None = None, kind: str | None = None, since: int = 0,
                 limit: int = 200):
    """What happened to the models: pulls, loads, unloads (with their reason), refusals, request errors.
    `model`: any of a model's names; `kind`: a comma-separated list; `since`: only events after this id."""
    manager = request.app.state.manager
    names = None
    if model:
        try:
            names = {model, manager.resolve(model).name}
        except ServiceError:  # a pull of something not on disk yet is recorded under the name it was asked by
            names = {model}
    limit = number(limit, "limit", 1, 2000, integer=True)
    kinds = {k.strip() for k in kind.split(",") if k.strip()} if kind else None
    found = manager.events.list(kinds=kinds, since=max(since, 0), limit=2000)
    if names is not None:
        found = [e for e in found if e["model"] in names]
    return {"events": found[-limit:]}


@router.get("/api/stats", responses=documented(OLLAMA, Stats))
async def stats(request: Request):
    """The process's memory and, per model, its state (loading, ready, unloading, error), load, usage, queue,
    batch and prefix cache; running pulls."""
    manager = request.app.state.manager
    models = []
    for name, state in sorted(manager.states().items()):
        row = {"name": name, "state": state}
        if state == "error":
            row["error"] = manager.failed[name]
        served = manager.served(name)
        if served is not None:
            runner = served.runner.stats()
            row.update(kind=served.target.kind, load_seconds=round(served.load_seconds, 4),
                       loaded_at=int(served.loaded_at), memory_bytes=served.runner.memory_bytes,
                       estimate_bytes=served.target.estimate_bytes, batch_size=served.runner.capacity,
                       running=runner.get("running", 0), queue_depth=runner.get("waiting", 0) + served.waiting,
                       usage=served.usage.as_dict(), runner=runner)
            if "cache_hits" in runner or "cache_misses" in runner:
                row["prefix_cache"] = {"ram": {"hits": runner.get("cache_hits", 0),
                                               "misses": runner.get("cache_misses", 0)}}
            if "disk_hits" in runner:
                row.setdefault("prefix_cache", {})["disk"] = {
                                               "hits": runner["disk_hits"], "misses": runner["disk_misses"],
                                               "writes": runner["disk_writes"], "skipped": runner["disk_skipped"],
                                               "dropped": runner["disk_dropped"],
                                               "bytes": runner["disk_bytes"]}
        models.append(row)
    return {"process": {"rss_bytes": rss_bytes(), "mlx": mlx_memory()}, "models": models,
            "pulls": [{"model": k, **v} for k, v in sorted(manager.pulls.items())]}


@router.post("/api/cache/clear", responses=documented(OLLAMA, Cleared))
async def clear_cache(request: Request):
    """Empty the prefix cache: every loaded model's RAM and SSD tiers, and the SSD tier of models not loaded."""
    from ..runners.disk_cache import clear_folder

    manager = request.app.state.manager
    keep = set()
    for served in list(manager.models.values()):
        clear = getattr(served.runner, "clear_cache", None)
        if clear is not None and (key := clear()) is not None:
            keep.add(key)
    folder = manager.settings.cache_dir / "prefix"
    removed = await asyncio.to_thread(clear_folder, folder, keep) if folder.is_dir() else 0
    manager.events.record("cache_cleared", None, files_removed=removed)
    return {"cleared": True}


class _Changes(BaseModel):
    model_config = ConfigDict(extra="allow")


@router.get("/api/engine/config", responses=documented(OLLAMA, EngineConfig))
async def engine_config(request: Request):
    manager = request.app.state.manager
    return {"settings": manager.engine_config(), "rebuilding": manager.rebuilding}


@router.post("/api/engine/config", openapi_extra=json_body(_Changes), responses=documented(OLLAMA, EngineConfig))
async def set_engine_config(request: Request):
    """Change runtime settings: validated as a whole (a bad value or an unknown name is a 400 naming it),
    applied to the next request; batch and prefix-cache settings rebuild loaded models in the background."""
    body = await parse_body(request, _Changes)
    manager = request.app.state.manager
    rebuilding = manager.configure(dict(body.model_extra or {}))
    return {"settings": manager.engine_config(), "rebuilding": rebuilding}
