"""`GET /api/catalog`: the catalog as a person browses it (the web UI's catalog view), and the UI's static files.

Every entry comes with what deciding to pull it needs: kind, abilities, size, quantization, license, context, the
memory estimate at the context this service plans for, whether it is on this machine and whether its facts were
verified. The user's catalog layers are linted again on each call, so a file edited since the service started
shows its problems here (the service keeps serving the catalog it loaded)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel

from ..catalog import Entry, load_catalog
from ..catalog.memory import estimate
from ..hub import store
from .errors import OLLAMA
from .schemas import documented

router = APIRouter()
UI_DIR = Path(__file__).resolve().parent.parent / "ui"


class CatalogView(BaseModel):
    context: int
    families: list[dict]
    entries: list[dict]
    problems: list[dict]


def _entry(entry: Entry, context: int, on_disk: set[str]) -> dict:
    served = min(entry.context_length, context)
    return {"tag": entry.tag, "family": entry.family.name, "size": entry.model.size,
            "quantization": entry.quantization.name, "kind": entry.family.kind,
            "abilities": list(entry.family.abilities), "parameters": entry.model.parameters,
            "active_parameters": entry.model.active_parameters, "license": entry.license,
            "context": entry.context_length, "extended_context": entry.context.extended,
            "estimate_bytes": estimate(entry, context=served).total, "estimate_context": served,
            "repo": entry.quantization.repo, "generated": entry.quantization.generated is not None,
            "verified": entry.verified, "downloaded": entry.tag in on_disk}


def _view(manager) -> dict:
    settings, catalog = manager.settings, manager.catalog
    on_disk = {m.name for m in store.downloaded(settings, catalog)}
    problems = []
    if settings.catalog_paths:
        problems = [p.as_dict() for p in load_catalog(settings.catalog_paths, builtin=True).problems]
    families = [{"name": f.name, "description": f.description, "license": f.license, "model_card": f.model_card,
                 "kind": f.kind, "abilities": list(f.abilities), "default_size": f.default_size}
                for f in catalog.families.values()]
    return {"context": settings.context_length, "families": families,
            "entries": [_entry(e, settings.context_length, on_disk) for e in catalog.entries()],
            "problems": problems}


@router.get("/api/catalog", responses=documented(OLLAMA, CatalogView))
async def catalog_view(request: Request):
    return await asyncio.to_thread(_view, request.app.state.manager)


def mount_ui(app) -> None:
    """The single-page UI at /ui: static files shipped in the package, nothing fetched from elsewhere."""
    app.mount("/ui", StaticFiles(directory=UI_DIR, html=True), name="ui")
