"""Model manager: resolve names through the catalog, open a runner per model under a memory budget,
keep_alive/idle unloading, LRU eviction, one load per model however many requests ask at once, and a bounded
queue per model. It schedules runners through `runners.Registry` and never imports a backend."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio

from .catalog import AmbiguousModel, Catalog, Entry, UncatalogedRepo
from .catalog import ModelNotFound as CatalogNotFound
from .catalog.detect import UndetectableModel
from .catalog.memory import fit_parallel
from .config import Settings
from .engine.job import Job, ModelTraits, build_job
from .engine.request import GenerationRequest
from .errors import (
    BadRequest,
    LoadFailed,
    MemoryBudgetExceeded,
    ModelNotDownloaded,
    ModelNotFound,
    QueueFull,
    ServiceError,
    UnsupportedModel,
)
from .events import EventLog
from .keepalive import parse_keep_alive
from .locate import generated_dir, local_folder, locate
from .runners import LoadSpec, Registry, Runner, default_registry
from .usage import ModelUsage

log = logging.getLogger("mlx_service.manager")
GiB = 2**30


@dataclass
class Target:
    """A request's model, resolved once: what it is, where it is, what runs it, and what it costs."""

    name: str  # the tag we report (family:size-quant, repo id, or local folder name)
    entry: Entry | None
    path: Path | None
    kind: str
    loader: str
    estimate_bytes: int  # weights + the KV cache of `parallel` sequences of `context_length` tokens
    context_length: int
    parallel: int = 1  # sequences decoded together: the batch size that fits the memory budget
    trust_remote_code: bool = False


@dataclass
class Served:
    """A loaded model and its bookkeeping."""

    target: Target
    runner: Runner
    keep_alive: float
    load_seconds: float = 0.0  # from the request to a loaded model (Ollama's load_duration)
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.monotonic)
    expires_at: float = math.inf
    generating: int = 0  # generations submitted and not finished: in the batch or waiting for a place
    holds: int = 0  # every lease (generations and token counts): a held model is never evicted
    usage: ModelUsage = field(default_factory=ModelUsage)

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def waiting(self) -> int:
        return max(0, self.generating - self.runner.capacity)


MAX_NAME = 256  # the longest model name looked up: longer ones are no catalog name, repo id or folder
# Engine settings that may change while the service runs (POST /api/engine/config); the second set needs each
# loaded model's runner rebuilt, which happens in the background while the old runner keeps serving.
RUNTIME_SETTINGS = frozenset({"max_tokens", "max_loaded_models", "max_queue", "generation_timeout", "keep_alive",
                              "model_idle_timeout_sec", "enable_prefix_cache", "cache_max_entries",
                              "cache_max_memory_gb", "cache_max_disk_gb", "batch_size", "prefill_batch_size",
                              "prefill_step_size"})
REBUILD_SETTINGS = frozenset({"enable_prefix_cache", "cache_max_entries", "cache_max_memory_gb", "cache_max_disk_gb",
                              "batch_size", "prefill_batch_size", "prefill_step_size"})
GENERATES = frozenset({"text", "vision", "audio"})  # kinds whose runners generate text (chat, completion)


def require_kind(target: Target, kinds: frozenset[str] | set[str], action: str) -> None:
    """A 400 naming the model's kind when a request asks it for something of another kind."""
    if target.kind not in kinds:
        article = "an" if target.kind[:1] in "aeiou" else "a"
        raise BadRequest(f'"{target.name}" is {article} {target.kind} model: it cannot {action}', param="model")


def resolve_target(settings: Settings, catalog: Catalog, name: str) -> Target:
    """What `name` means here: a catalog entry, an uncataloged repo in the cache, or a MODELS_DIR folder.
    The same answer for every endpoint: unknown is a 404 with suggestions, ambiguous a 400 with candidates."""
    if not isinstance(name, str) or not name.strip():
        raise BadRequest("`model` is required", param="model")
    if len(name) > MAX_NAME or not name.isprintable():
        raise BadRequest(f"`model` must be a printable name of at most {MAX_NAME} characters", param="model")
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
    context = min(entry.context_length, settings.context_length)
    # The largest batch up to MLX_SERVICE_BATCH_SIZE whose KV caches fit the budget (as Ollama lowers its
    # parallel count); a model that does not fit with one sequence is refused when it is loaded.
    plan = fit_parallel(entry, context, settings.max_memory_gb * GiB, settings.batch_size,
                        settings.prefill_batch_size)
    return Target(entry.tag, entry, locate(settings.models_dir, entry).path, entry.family.kind, entry.family.loader,
                  plan.total, context, plan.parallel, entry.family.trust_remote_code)


def _local_target(settings: Settings, catalog: Catalog, name: str, folder: Path) -> Target:
    try:
        config = json.loads((folder / "config.json").read_text())
        kind = catalog.detect(config)
    except (OSError, ValueError, UndetectableModel) as exc:
        raise UnsupportedModel(f"cannot tell what kind of model {name!r} is: {exc}") from None
    weights = sum(p.stat().st_size for p in folder.glob("*.safetensors"))
    context = min(int(config.get("max_position_embeddings") or 4096), settings.context_length)
    return Target(name, None, folder, kind.kind, kind.loader, int(weights * 1.2), context, settings.batch_size)


class Lease:
    """One request's hold on a loaded model; `release` once the request is over."""

    def __init__(self, manager: ModelManager, served: Served, generating: bool, waited_for_load: bool):
        self.manager, self.served, self.generating = manager, served, generating
        self.waited_for_load = waited_for_load  # this request paid for the load (Ollama's load_duration)
        self._released = False

    async def release(self) -> None:
        """Idempotent, and finishes even when the caller's task is being cancelled."""
        if not self._released:
            self._released = True
            with anyio.CancelScope(shield=True):
                await self.manager._release(self)

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.release()


class ModelManager:
    def __init__(self, settings: Settings, catalog: Catalog, runners: Registry | None = None):
        self.settings = settings
        self.catalog = catalog
        self.runners = runners or default_registry()
        self.events = EventLog()
        self.failed: dict[str, str] = {}  # models whose last load failed: the error, until a load succeeds
        self.pulls: dict[str, dict] = {}  # running pulls (HTTP): their latest progress
        self.pull_cancels: dict[str, threading.Event] = {}  # ... and how to stop each (DELETE /api/pull)
        self._rebuilding: dict[str, asyncio.Task] = {}  # models whose runner is being rebuilt for new settings
        self.models: dict[str, Served] = {}
        self._names: dict[str, str] = {}  # request spellings already resolved to a loaded model's name
        self._closing: dict[str, Served] = {}  # unloading: still holding memory until their runner closed
        self._loading: dict[str, asyncio.Future] = {}
        self._changed = asyncio.Condition()
        self.loads = 0  # completed loads, for tests and reporting

    # ---- names ----------------------------------------------------------------------------------------------
    def resolve(self, name: str) -> Target:
        """Resolve a request's model name; a name already seen for a loaded model costs one dict lookup."""
        known = self._names.get(name) if isinstance(name, str) else None
        if known is not None and known in self.models:
            return self.models[known].target
        return resolve_target(self.settings, self.catalog, name)

    def traits(self, target: Target) -> ModelTraits:
        entry = target.entry
        if entry is None:  # typed by the detection rules: a vision checkpoint sees images, nothing more is assumed
            return ModelTraits(target.name, frozenset({"chat", "generate"} | ({"vision"} if target.kind == "vision"
                                                                             else set())), target.kind)
        return ModelTraits.of(target.name, entry.family, self.catalog.prompt_style(entry))

    def job(self, req: GenerationRequest, target: Target) -> Job:
        """`req` as a job for `target`, refused (400) if it asks what the model cannot do. Built before the
        model is loaded, so a refusal costs no load; its clock starts when it is submitted (`Job.start`)."""
        require_kind(target, GENERATES, "generate text: use a chat or text model")
        return build_job(req, self.traits(target), max_tokens=self.settings.max_tokens,
                         timeout=self.settings.generation_timeout)

    # ---- leases ---------------------------------------------------------------------------------------------
    async def lease(self, name: str, keep_alive: float | None = None, *, generating: bool = True,
                    target: Target | None = None) -> Lease:
        """Resolve `name` once (unless the caller did: `target`), load it if needed, and hold it. A generation
        beyond the batch and MLX_SERVICE_MAX_QUEUE waiting ones is refused with 503."""
        target = target or self.resolve(name)
        served, waited = await self._load(target, keep_alive)
        if len(self._names) >= 1024:  # names match case-insensitively: spellings are many, keep few
            self._names.clear()
        self._names[name] = served.name
        if generating:
            limit = served.runner.capacity + self.settings.max_queue
            if served.generating >= limit:
                raise QueueFull(f"{served.name} has {served.waiting} requests waiting (MLX_SERVICE_MAX_QUEUE="
                                f"{self.settings.max_queue}) behind a full batch of {served.runner.capacity}: "
                                "try again shortly", retry_after=1)
            served.generating += 1
        served.holds += 1
        return Lease(self, served, generating, waited)

    async def _release(self, lease: Lease) -> None:
        served = lease.served
        served.holds -= 1
        if lease.generating:
            served.generating -= 1
        served.last_used = time.monotonic()
        served.expires_at = served.last_used + served.keep_alive
        if served.keep_alive == 0 and served.holds == 0 and self.models.get(served.name) is served:
            await self.unload(served.name, reason="keep_alive")
        async with self._changed:
            self._changed.notify_all()

    # ---- loading --------------------------------------------------------------------------------------------
    async def load(self, name: str, keep_alive: float | None = None) -> Served:
        served, _ = await self._load(self.resolve(name), keep_alive)
        return served

    async def _load(self, target: Target, keep_alive: float | None) -> tuple[Served, bool]:
        """(the loaded model, whether this call waited for its load)."""
        started = time.perf_counter()
        served = self.models.get(target.name)
        if served is not None:
            if keep_alive is not None:
                served.keep_alive = keep_alive
            return served, False
        pending = self._loading.get(target.name)
        if pending is None:
            pending = asyncio.get_running_loop().create_future()
            self._loading[target.name] = pending
            try:
                served = await self._open(target, keep_alive, started)
                pending.set_result(served)
            except BaseException as exc:
                pending.set_exception(exc)
                pending.exception()  # retrieved: the other waiters re-raise it themselves
                raise
            finally:
                self._loading.pop(target.name, None)
            return served, True
        served = await asyncio.shield(pending)
        if keep_alive is not None:
            served.keep_alive = keep_alive
        return served, True

    async def _open(self, target: Target, keep_alive: float | None, started: float) -> Served:
        """`started`: when the request arrived, so the load time reported covers making room and building a
        generated checkpoint too."""
        if not self.runners.supports(target.loader):
            raise UnsupportedModel(f"{target.name} is a {target.kind} model ({target.loader}); this version of "
                                   f"MLX Service runs {', '.join(self.runners.loaders)} models - not supported yet")
        budget = self.settings.max_memory_gb * GiB
        if target.estimate_bytes > budget:
            self.events.record("refused", target.name, reason="memory budget", estimate_bytes=target.estimate_bytes,
                               budget_bytes=int(budget))
            raise MemoryBudgetExceeded(
                f"{target.name} needs about {target.estimate_bytes / GiB:.2f} GiB at {target.context_length} tokens "
                f"of context, more than MLX_SERVICE_MAX_MEMORY_GB ({self.settings.max_memory_gb:g} GiB): raise the "
                "budget, lower MLX_SERVICE_CONTEXT_LENGTH, or pick a smaller quantization")
        await self._make_room(target)
        spec = await self._spec(target)
        try:
            runner = await self.runners.opener(target.loader)(spec)
        except ServiceError as exc:
            self.events.record("load_failed", target.name, error=exc.message)
            self.failed[target.name] = exc.message
            raise
        except Exception as exc:
            log.warning("loading %s from %s failed: %s", target.name, spec.path, exc)
            reason = str(exc).replace(str(spec.path), "<model folder>")  # the client is told what, not where
            self.events.record("load_failed", target.name, error=f"{type(exc).__name__}: {reason}")
            self.failed[target.name] = f"{type(exc).__name__}: {reason}"
            raise LoadFailed(f"loading {target.name} failed: {type(exc).__name__}: {reason} (the server log has "
                             "the details)") from None
        took = time.perf_counter() - started
        target = replace(target, path=spec.path)  # a generated checkpoint has one now
        served = Served(target, runner, self.default_keep_alive if keep_alive is None else keep_alive, took)
        served.expires_at = time.monotonic() + served.keep_alive
        self.models[target.name] = served
        self.loads += 1
        self.failed.pop(target.name, None)
        self.events.record("load", target.name, seconds=round(took, 3), memory_bytes=runner.memory_bytes,
                           estimate_bytes=target.estimate_bytes, batch=runner.capacity, model_kind=target.kind)
        return served

    async def _spec(self, target: Target) -> LoadSpec:
        path, entry = target.path, target.entry
        style = self.catalog.prompt_style(entry) if entry else None
        if path is None and entry is not None and entry.quantization.generated is not None:
            from .recipes import build_checkpoint

            path = await asyncio.to_thread(build_checkpoint, entry, style,
                                           generated_dir(self.settings.models_dir, entry))
        if path is None:
            raise ModelNotDownloaded(f"model {target.name!r} is not downloaded: pull it first "
                                     f"(`mlx-service pull {target.name}` or POST /api/pull)")
        s = self.settings
        return LoadSpec(
            name=target.name, path=path,
            chat_template=style.chat_template if style else None,
            override_template=bool(style and style.override_template),
            stops=tuple(style.stop) if style else (), trust_remote_code=target.trust_remote_code,
            batch_size=target.parallel, prefill_batch_size=s.prefill_batch_size,
            prefill_step_size=s.prefill_step_size,
            cache_entries=s.cache_max_entries if s.enable_prefix_cache else 0,
            cache_bytes=int(s.cache_max_memory_gb * GiB), context_length=target.context_length,
            embedding=entry.family.embedding if entry else None,
            disk_cache_dir=s.cache_dir / "prefix" if s.enable_prefix_cache and s.cache_max_disk_gb > 0 else None,
            disk_cache_bytes=int(s.cache_max_disk_gb * GiB))

    def _used_bytes(self) -> int:
        return sum(s.target.estimate_bytes for s in [*self.models.values(), *self._closing.values()])

    async def _make_room(self, target: Target) -> None:
        """Evict least-recently-used idle models until `target` fits; wait while the others are busy."""
        budget = self.settings.max_memory_gb * GiB
        deadline = time.monotonic() + self.settings.generation_timeout
        while True:
            if (self._used_bytes() + target.estimate_bytes <= budget
                    and len(self.models) + len(self._closing) < self.settings.max_loaded_models):
                return
            idle = [s for s in self.models.values() if s.holds == 0]
            if idle:
                victim = min(idle, key=lambda s: (s.keep_alive == math.inf, s.last_used))
                log.info("evicting %s to make room for %s", victim.name, target.name)
                await self.unload(victim.name, reason="lru" if len(self.models) + len(self._closing)
                                  >= self.settings.max_loaded_models else "memory", instead=target.name)
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise QueueFull(f"no room to load {target.name}: every loaded model is busy", retry_after=5)
            async with self._changed:
                try:
                    await asyncio.wait_for(self._changed.wait(), timeout=min(remaining, 1.0))
                except asyncio.TimeoutError:
                    pass

    def served(self, name: str) -> Served | None:
        """A loaded (or unloading) model by its served name."""
        return self.models.get(name) or self._closing.get(name)

    def states(self) -> dict[str, str]:
        """Every model the manager knows of right now: loading, ready, unloading, or error (its last load)."""
        out = {name: "error" for name in self.failed}
        out.update({name: "loading" for name in self._loading})
        out.update({name: "ready" for name in self.models})
        out.update({name: "reloading" for name in self._rebuilding})
        out.update({name: "unloading" for name in self._closing})
        return out

    # ---- settings at runtime -------------------------------------------------------------------------------
    @property
    def default_keep_alive(self) -> float:
        """KEEP_ALIVE when set, else MODEL_IDLE_TIMEOUT_SEC (read each time: both can change at runtime)."""
        s = self.settings
        return parse_keep_alive(s.keep_alive) if s.keep_alive else float(s.model_idle_timeout_sec)

    @property
    def rebuilding(self) -> list[str]:
        return sorted(self._rebuilding)

    def engine_config(self) -> dict:
        return {name: getattr(self.settings, name) for name in sorted(RUNTIME_SETTINGS)}

    def configure(self, changes: dict) -> list[str]:
        """Apply `changes` (validated as a whole first: nothing changes unless all are valid) to the next
        request; returns the models whose runners are being rebuilt for them."""
        from pydantic import ValidationError

        unknown = sorted(set(changes) - RUNTIME_SETTINGS)
        if unknown:
            raise BadRequest(f"not an engine setting that can change at runtime: {', '.join(unknown)} (these can: "
                             f"{', '.join(sorted(RUNTIME_SETTINGS))})", param=unknown[0])
        try:
            checked = type(self.settings)(**{**self.settings.model_dump(), **changes})
        except ValidationError as exc:
            first = exc.errors()[0]
            name = str(first["loc"][0]) if first["loc"] else "settings"
            raise BadRequest(f"{name}: {first['msg']}", param=name) from None
        rebuild = any(getattr(self.settings, k) != getattr(checked, k) for k in changes if k in REBUILD_SETTINGS)
        for name in changes:
            setattr(self.settings, name, getattr(checked, name))
        self._names.clear()  # resolved targets carry the batch that fit: resolve again
        self.events.record("configured", None, changes={k: getattr(self.settings, k) for k in changes})
        if not rebuild:
            return []
        names = [n for n in self.models if n not in self._rebuilding]
        for name in names:
            self._rebuilding[name] = asyncio.ensure_future(self._rebuild(self.models[name]))
        return names

    async def _rebuild(self, served: Served) -> None:
        """A new runner with the current settings; requests move to it once it is loaded, and the old one closes
        after the jobs it is running. Both are in memory meanwhile."""
        try:
            target = resolve_target(self.settings, self.catalog, served.name)
            target = replace(target, path=target.path or served.target.path)
            runner = await self.runners.opener(target.loader)(await self._spec(target))
            old, served.runner, served.target = served.runner, runner, replace(target, path=served.target.path)
            self.events.record("rebuilt", served.name, batch=runner.capacity)
            await old.close()
        except Exception as exc:  # the old runner keeps serving
            self.events.record("rebuild_failed", served.name, error=f"{type(exc).__name__}: {exc}"[:300])
        finally:
            self._rebuilding.pop(served.name, None)

    # ---- unloading ------------------------------------------------------------------------------------------
    async def unload(self, name: str, reason: str = "request", **details) -> bool:
        """Unload a model by any of its names; waits only for that model's running requests. `reason`: one of
        events.UNLOAD_REASONS, recorded with the unload."""
        served = self.models.pop(name, None)
        if served is None:
            try:
                served = self.models.pop(self.resolve(name).name, None)
            except ServiceError:
                served = None
        if served is None:
            return False
        self._names = {k: v for k, v in self._names.items() if v != served.name}
        self._closing[served.name] = served
        try:
            await served.runner.close()
        finally:
            self._closing.pop(served.name, None)
        self.events.record("unload", served.name, reason=reason, **details)
        async with self._changed:
            self._changed.notify_all()
        return True

    async def unload_all(self) -> None:
        await asyncio.gather(*(self.unload(name, reason="shutdown") for name in list(self.models)))

    async def reap(self) -> None:
        """Unload idle models whose keep_alive ran out (runs every half second)."""
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for served in list(self.models.values()):
                if served.holds == 0 and served.expires_at <= now:
                    await self.unload(served.name, reason="idle")
