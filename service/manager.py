"""Model manager: resolve names through the catalog, load on demand under a memory budget, keep_alive/idle
unloading, LRU eviction, one load per model however many requests ask at once, and a bounded wait queue."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .catalog import AmbiguousModel, Catalog, Entry, ResolveError, UncatalogedRepo, estimate
from .catalog import ModelNotFound as CatalogNotFound
from .catalog.detect import UndetectableModel
from .catalog.model import Sampling
from .config import Settings
from .engine import model as engine_model
from .engine.decode import count_tokens, decode
from .engine.types import Completion, GenerationRequest
from .engine.worker import MLXWorker
from .errors import (
    BadRequest,
    LoadFailed,
    MemoryBudgetExceeded,
    ModelNotDownloaded,
    ModelNotFound,
    QueueFull,
    UnsupportedModel,
)
from .keepalive import parse_keep_alive
from .locate import generated_dir, local_folder, locate

log = logging.getLogger("mlx_service.manager")
GiB = 2**30


@dataclass
class Target:
    """A request's model, resolved: what it is, where it is, and what it costs."""

    name: str  # the tag we report (family:size-quant, repo id, or local folder name)
    entry: Entry | None
    path: Path | None
    estimate_bytes: int
    context_length: int
    trust_remote_code: bool = False


@dataclass
class Served:
    """A loaded model and its bookkeeping."""

    target: Target
    handle: engine_model.ModelHandle
    keep_alive: float
    load_seconds: float = 0.0  # from the request to a loaded model (Ollama's load_duration)
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    expires_at: float = math.inf
    active: int = 0
    waiting: int = 0
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def name(self) -> str:
        return self.target.name


def resolve_target(settings: Settings, catalog: Catalog, name: str) -> Target:
    """What `name` means here: a catalog entry, an uncataloged repo in the cache, or a MODELS_DIR folder."""
    if not name or not name.strip():
        raise BadRequest("`model` is required", param="model")
    try:
        found = catalog.resolve(name)
    except AmbiguousModel as exc:
        raise BadRequest(str(exc), param="model") from None
    except CatalogNotFound as exc:
        folder = local_folder(settings.models_dir, name.strip())
        if folder is None:
            raise ModelNotFound(str(exc)) from None
        return _local_target(settings, catalog, name.strip(), folder)
    if isinstance(found, UncatalogedRepo):
        located = locate(settings.models_dir, found)
        if located.path is None:
            raise ModelNotDownloaded(f"model {found.repo!r} is not downloaded: pull it first "
                                     f"(`mlx-service pull {found.repo}` or POST /api/pull)")
        return _local_target(settings, catalog, found.repo, located.path)
    entry = found
    if entry.family.loader != "mlx-lm":
        raise UnsupportedModel(f"{entry.tag} is a {entry.family.kind} model ({entry.family.loader}); this "
                               "version of MLX Service serves text models (mlx-lm) only - not supported yet")
    context = min(entry.context_length, settings.context_length)
    est = estimate(entry, context=context)
    located = locate(settings.models_dir, entry)
    return Target(entry.tag, entry, located.path, est.total, context, entry.family.trust_remote_code)


def _local_target(settings: Settings, catalog: Catalog, name: str, folder: Path) -> Target:
    try:
        config = json.loads((folder / "config.json").read_text())
        kind = catalog.detect(config)
    except (OSError, ValueError, UndetectableModel) as exc:
        raise UnsupportedModel(f"cannot tell what kind of model {name!r} is: {exc}") from None
    if kind.loader != "mlx-lm":
        raise UnsupportedModel(f"{name} is a {kind.kind} model ({kind.loader}): not supported yet")
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    context = min(int(config.get("max_position_embeddings") or 4096), settings.context_length)
    return Target(name, None, folder, int(weights * 1.2), context)


class ModelManager:
    def __init__(self, settings: Settings, catalog: Catalog, worker: MLXWorker | None = None):
        self.settings = settings
        self.catalog = catalog
        self.worker = worker or MLXWorker()
        self.models: dict[str, Served] = {}
        self._loading: dict[str, asyncio.Future] = {}
        self._changed = asyncio.Condition()
        self.default_keep_alive = (parse_keep_alive(settings.keep_alive) if settings.keep_alive
                                   else float(settings.model_idle_timeout_sec))
        self.loads = 0  # completed loads, for tests and /metrics-style reporting
        self.cancelled = 0

    def resolve(self, name: str) -> Target:
        return resolve_target(self.settings, self.catalog, name)

    def sampling_defaults(self, target: Target) -> Sampling:
        return target.entry.family.sampling if target.entry else Sampling()

    # ---- loading ----------------------------------------------------------------------------------------
    def _loaded(self, name: str) -> Served | None:
        """The loaded model `name` refers to, found without touching the disk (the per-request fast path)."""
        served = self.models.get(name)
        if served is None:
            try:
                found = self.catalog.resolve(name)
            except ResolveError:
                return None
            served = self.models.get(found.tag)
        return served

    def is_loaded(self, name: str) -> bool:
        return self._loaded(name) is not None

    async def load(self, name: str, keep_alive: float | None = None) -> Served:
        served = self._loaded(name)
        started = time.perf_counter()
        if served is None:
            target = self.resolve(name)
            served = self.models.get(target.name)
        if served is not None:
            if keep_alive is not None:
                served.keep_alive = keep_alive
            return served
        pending = self._loading.get(target.name)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[target.name] = pending
            try:
                served = await self._load(target, keep_alive, started)
                pending.set_result(served)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: the other waiters re-raise it themselves
                raise
            finally:
                self._loading.pop(target.name, None)
            return served
        return await asyncio.shield(pending)

    async def _load(self, target: Target, keep_alive: float | None, started: float) -> Served:
        """`started`: when the request for it arrived, so that the load time reported covers resolving the name,
        making room and building a generated checkpoint too."""
        budget = self.settings.max_memory_gb * GiB
        if target.estimate_bytes > budget:
            raise MemoryBudgetExceeded(
                f"{target.name} needs about {target.estimate_bytes / GiB:.2f} GiB at {target.context_length} tokens "
                f"of context, more than MLX_SERVICE_MAX_MEMORY_GB ({self.settings.max_memory_gb:g} GiB): raise the "
                "budget, lower MLX_SERVICE_CONTEXT_LENGTH, or pick a smaller quantization")
        await self._make_room(target)
        path = target.path
        entry = target.entry
        style = self.catalog.prompt_style(entry) if entry else None
        if path is None and entry is not None and entry.quantization.generated is not None:
            from .recipes import build_checkpoint

            dest = generated_dir(self.settings.models_dir, entry)
            path = await self.worker.run(lambda: build_checkpoint(entry, style, dest))
        if path is None:
            raise ModelNotDownloaded(f"model {target.name!r} is not downloaded: pull it first "
                                     f"(`mlx-service pull {target.name}` or POST /api/pull)")
        cache_entries = self.settings.cache_max_entries if self.settings.enable_prefix_cache else 0
        try:
            handle = await self.worker.run(lambda: engine_model.load(
                target.name, path,
                chat_template=style.chat_template if style else None,
                override_template=bool(style and style.override_template),
                stops=list(style.stop) if style else [],
                trust_remote_code=target.trust_remote_code,
                cache_entries=cache_entries,
                cache_bytes=int(self.settings.cache_max_memory_gb * GiB)))
        except Exception as exc:
            log.warning("loading %s failed: %s", target.name, exc)
            raise LoadFailed(f"loading {target.name} from {path} failed: {type(exc).__name__}: {exc}") from None
        took = time.perf_counter() - started
        served = Served(target, handle, self.default_keep_alive if keep_alive is None else keep_alive, took)
        served.expires_at = time.monotonic() + served.keep_alive
        self.models[target.name] = served
        self.loads += 1
        log.info("loaded %s in %.2f s (%d MiB)", target.name, took,
                 handle.active_bytes // 2**20)
        return served

    async def _make_room(self, target: Target) -> None:
        """Evict least-recently-used idle models until `target` fits; wait while the others are busy."""
        budget = self.settings.max_memory_gb * GiB
        deadline = time.monotonic() + self.settings.generation_timeout
        while True:
            used = sum(s.target.estimate_bytes for s in self.models.values())
            if used + target.estimate_bytes <= budget and len(self.models) < self.settings.max_loaded_models:
                return
            idle = [s for s in self.models.values() if s.active == 0 and s.waiting == 0]
            if idle:
                victim = min(idle, key=lambda s: (s.keep_alive == math.inf, s.last_used))
                log.info("evicting %s to make room for %s", victim.name, target.name)
                await self.unload(victim.name)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise QueueFull(f"no room to load {target.name}: every loaded model is busy", retry_after=5)
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))
                except asyncio.TimeoutError:
                    pass

    async def unload(self, name: str) -> bool:
        served = self.models.pop(name, None)
        if served is None:
            try:
                served = self.models.pop(self.resolve(name).name, None)
            except Exception:
                served = None
        if served is None:
            return False
        handle, served.handle = served.handle, None
        del handle
        await self.worker.run(engine_model.free)
        log.info("unloaded %s", served.name)
        async with self._changed:
            self._changed.notify_all()
        return True

    async def unload_all(self) -> None:
        for name in list(self.models):
            await self.unload(name)

    async def reap(self) -> None:
        """Unload idle models whose keep_alive ran out (runs every half second)."""
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for served in list(self.models.values()):
                if served.active == 0 and served.waiting == 0 and served.expires_at <= now:
                    await self.unload(served.name)

    # ---- serving ----------------------------------------------------------------------------------------
    @asynccontextmanager
    async def use(self, name: str, keep_alive: float | None = None):
        """Hold a loaded model for one request: bounded queue, one generation at a time per model."""
        served = await self.load(name, keep_alive)
        if served.waiting >= self.settings.max_queue and (served.active or served.turn.locked()):
            raise QueueFull(f"{served.name} has {served.waiting} requests waiting (MLX_SERVICE_MAX_QUEUE="
                            f"{self.settings.max_queue}): try again shortly", retry_after=1)
        served.waiting += 1
        try:
            await served.turn.acquire()
        finally:
            served.waiting -= 1
        served.active += 1
        try:
            yield served
        finally:
            served.active -= 1
            served.turn.release()
            served.last_used = time.monotonic()
            if keep_alive is not None:
                served.keep_alive = keep_alive
            served.expires_at = served.last_used + served.keep_alive
            if served.keep_alive == 0 and served.active == 0 and served.waiting == 0:
                await self.unload(served.name)
            async with self._changed:
                self._changed.notify_all()

    async def generate(self, served: Served, req: GenerationRequest, emit, cancel: threading.Event) -> Completion:
        limit = min(req.max_tokens or self.settings.max_tokens, self.settings.max_tokens)
        deadline = time.perf_counter() + self.settings.generation_timeout
        defaults = self.sampling_defaults(served.target)
        handle = served.handle
        try:
            result = await self.worker.run(lambda: decode(handle, req, defaults, limit, emit, cancel, deadline))
        finally:
            if cancel.is_set():
                self.cancelled += 1
        return result

    async def count_tokens(self, served: Served, req: GenerationRequest) -> int:
        handle = served.handle
        return await self.worker.run(lambda: count_tokens(handle, req))
