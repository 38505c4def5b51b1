"""The FastAPI application: middleware (request ids, API keys), error handlers, the three dialects."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import sys
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__
from ..catalog import Catalog, load_catalog
from ..config import Settings
from ..errors import BadRequest, NotFound, ServiceError, Unauthorized
from ..manager import ModelManager
from ..runners import Registry
from . import anthropic, audio, browse, hub, metrics, ollama, openai, ops
from .errors import error_response, request_id
from .metrics import RequestCounts

log = logging.getLogger("mlx_service")
OPEN_PATHS = {"/", "/ui"}


def _open(path: str) -> bool:
    """What needs no key: Ollama's liveness answer and the UI's static files (every data call they make does)."""
    return path in OPEN_PATHS or path.startswith("/ui/")


def _authorized(request: Request, keys: list[str]) -> bool:
    offered = request.headers.get("x-api-key", "")
    auth = request.headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        offered = offered or auth[7:].strip()
    ok = False
    for key in keys:  # constant-time per key, and every key is compared
        ok |= hmac.compare_digest(offered.encode(), key.encode())
    return ok


class Guard:
    """Request ids and API keys, as plain ASGI (Starlette's BaseHTTPMiddleware would put
    every streamed chunk through an extra task and queue)."""

    def __init__(self, app, settings: Settings):
        self.app, self.settings = app, settings

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        request = Request(scope)
        rid = request_id(request)
        try:
            keys = self.settings.keys
            if keys and not _open(scope["path"]) and not _authorized(request, keys):
                raise Unauthorized("invalid or missing API key: send `Authorization: Bearer <key>` or "
                                   "`x-api-key: <key>`")
        except ServiceError as exc:
            return await error_response(request, exc)(scope, receive, send)

        started, status = time.perf_counter(), [500]

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = MutableHeaders(scope=message)
                headers["x-request-id"] = rid
                headers["request-id"] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:  # counted once, as it ends (for /metrics); the route's template keeps the labels few
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            scope["app"].state.request_counts.add(scope["path"], endpoint, status[0], time.perf_counter() - started)


async def _preload(manager: ModelManager, name: str) -> None:
    try:
        await manager.load(name)
    except ServiceError as exc:
        log.warning("could not preload %s: %s", name, exc.message)


def create_app(settings: Settings, catalog: Catalog | None = None, preload: str | None = None,
               runners: Registry | None = None) -> FastAPI:
    """`preload`: a model to load in the background at start, so the first request does not wait for it;
    `runners`: which runner serves each catalog `loader` (default: the built-in registry)."""
    # The MLX thread runs Python between kernels; with the default 5 ms GIL switch interval the event loop
    # would wait up to 5 ms to send each chunk; 1 ms keeps streaming latency close to in-process decoding.
    sys.setswitchinterval(0.001)
    catalog = catalog or load_catalog(settings.catalog_paths or None).raise_for_problems()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        manager = ModelManager(settings, catalog, runners)
        app.state.manager = manager
        reaper = asyncio.create_task(manager.reap())
        warm = asyncio.create_task(_preload(manager, preload)) if preload else None
        try:
            yield
        finally:
            if warm:
                warm.cancel()
            reaper.cancel()
            await manager.unload_all()

    app = FastAPI(title="MLX Service", version=__version__, lifespan=lifespan, docs_url="/docs", redoc_url=None,
                  openapi_url="/openapi.json",
                  description="OpenAI, Anthropic and Ollama APIs over MLX models, from a declarative catalog.")
    app.state.settings = settings
    app.state.request_counts = RequestCounts()

    app.add_middleware(Guard, settings=settings)

    @app.exception_handler(ServiceError)
    async def service_error(request: Request, exc: ServiceError):
        manager = getattr(request.app.state, "manager", None)
        if manager is not None:
            manager.events.record("request_error", None, path=request.url.path, status=exc.status,
                                  error=exc.message[:300])
        return error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first["loc"] if p != "body") or "body"
        return error_response(request, BadRequest(f"{where}: {first['msg']}", param=where))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):
        if exc.status_code == 404:
            return error_response(request, NotFound(f"no such endpoint: {request.method} {request.url.path}"))
        error = BadRequest(str(exc.detail))
        error.status = exc.status_code
        return error_response(request, error)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(request, ServiceError(f"internal error: {type(exc).__name__}: {exc}"))

    app.include_router(openai.router)
    app.include_router(audio.router)
    app.include_router(anthropic.router)
    app.include_router(ollama.router)
    app.include_router(ops.router)
    app.include_router(metrics.router)
    app.include_router(hub.router)
    app.include_router(browse.router)
    browse.mount_ui(app)
    return app
