"""The runner boundary: the small protocol the manager schedules, and the registry that picks an implementation
by the catalog's `loader`. A new model kind or backend is a new runner registered here, not a branch elsewhere.

Implementations are named as `module:attribute` and imported only when a model of their loader is loaded, so
resolving, listing and the manager never import MLX."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Awaitable, Callable, Protocol, Union

from ..catalog.model import Embedding
from ..engine.embed import EmbeddingJob, EmbeddingResult
from ..engine.events import Event
from ..engine.job import Job
from ..engine.speech import Transcript, TranscriptionJob


@dataclass(frozen=True)
class LoadSpec:
    """What a runner needs to load one model: the checkpoint, the prompt style's facts, and the engine's
    batching and prefix-cache settings."""

    name: str
    path: Path
    chat_template: str | None = None
    override_template: bool = False
    stops: tuple[str, ...] = ()
    trust_remote_code: bool = False
    batch_size: int = 1  # requests decoded together; more wait in the runner's queue
    prefill_batch_size: int = 1
    prefill_step_size: int = 2048  # longest prefill chunk: the most a newcomer stalls the running streams
    cache_entries: int = 0  # prefix cache: entries kept (0 = off)
    cache_bytes: int = 0
    context_length: int = 0  # tokens a sequence may hold, prompt and answer (0: unchecked)
    embedding: Embedding | None = None  # an embedding model's pooling (None: the checkpoint's own)
    disk_cache_dir: Path | None = None  # the prefix cache's SSD tier (None: off)
    disk_cache_bytes: int = 0


class Runner(Protocol):
    """One loaded model, as the manager schedules it. What it does depends on its kind: a `Generator` (text,
    vision), an `Embedder` or a `Transcriber`; the API checks the model's kind before it asks."""

    name: str
    capacity: int  # jobs it runs at once
    memory_bytes: int  # what loading it took

    def stats(self) -> dict[str, int]: ...  # running, waiting, finished, cancelled, ...

    async def close(self) -> None: ...  # waits for running jobs, then frees the model


class Generator(Runner, Protocol):
    """`submit` returns the job's events; closing that iterator early cancels the job and returns once the
    runner has let go of it."""

    def submit(self, job: Job) -> AsyncIterator[Event]: ...

    async def count_tokens(self, job: Job) -> int: ...


class Embedder(Runner, Protocol):
    async def embed(self, job: EmbeddingJob) -> EmbeddingResult: ...


class Transcriber(Runner, Protocol):
    async def transcribe(self, job: TranscriptionJob) -> Transcript: ...


Opener = Callable[[LoadSpec], Awaitable[Runner]]


class Registry:
    """loader name -> how to open a runner for it (`module:attribute` of an async `open(spec)`, or the callable)."""

    def __init__(self, openers: dict[str, Union[str, Opener]]):
        self._openers = dict(openers)

    def supports(self, loader: str) -> bool:
        return loader in self._openers

    @property
    def loaders(self) -> list[str]:
        return sorted(self._openers)

    def opener(self, loader: str) -> Opener:
        found = self._openers[loader]
        if isinstance(found, str):
            module, _, attribute = found.partition(":")
            found = self._openers[loader] = getattr(importlib.import_module(module), attribute)
        return found


def default_registry() -> Registry:
    return Registry({"mlx-lm": "service.runners.mlx_lm:open_runner",
                     "mlx-vlm": "service.runners.mlx_vlm:open_runner",
                     "mlx-embeddings": "service.runners.embeddings:open_runner",
                     "mlx-audio": "service.runners.whisper:open_runner"})
