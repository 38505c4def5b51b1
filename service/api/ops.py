"""Operator endpoints (MLX Service's own, in no other API's dialect): the event log."""

from __future__ import annotations

from fastapi import APIRouter, Request

from ..errors import ServiceError
from .common import number

router = APIRouter()


@router.get("/api/events")
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
