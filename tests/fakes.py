"""A fake runner (no MLX, no threads) and an in-process app around it, for testing the dialects and the
manager's scheduling without uvicorn or a model."""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.catalog import load_catalog
from service.config import load_settings
from service.engine.events import Done, FinishReason, TextDelta, Timings, Usage
from service.engine.job import Job
from service.runners import LoadSpec, Registry

LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512,
         "max_position_embeddings": 1024}


class FakeRunner:
    """Answers each job with the words of `reply`, one text event per word, up to the job's max_tokens,
    honouring its stop strings; or, when `script` is set, with exactly those events (an exception is raised)."""

    reply = "Hello from the fake runner ."
    script: list | None = None

    def __init__(self, spec: LoadSpec, capacity: int = 2):
        self.name, self.spec, self.capacity, self.memory_bytes = spec.name, spec, capacity, 1000
        self.jobs: list[Job] = []
        self.gate: asyncio.Event | None = None  # when set, count_tokens and submit wait for it
        self.closed = False

    async def submit(self, job: Job):
        self.jobs.append(job)
        if self.gate is not None:
            await self.gate.wait()
        if self.script is not None:
            for event in self.script:
                if isinstance(event, BaseException):
                    raise event
                yield event
            return
        pieces = [w + " " for w in self.reply.split()][: job.max_tokens]
        text, reason, matched = "", FinishReason.LENGTH if len(pieces) == job.max_tokens else FinishReason.STOP, None
        for piece in pieces:
            hits = [s for s in job.stop if s in text + piece]
            if hits:
                matched, reason = hits[0], FinishReason.STOP_SEQUENCE
                piece = (text + piece)[: (text + piece).index(matched)][len(text):]
            if piece:
                text += piece
                yield TextDelta(piece)
            if matched:
                break
        yield Done(reason, Usage(self._count(job), len(pieces), 0), Timings(0.0, 0.01, 0.02), matched)

    def _count(self, job: Job) -> int:
        return sum(len(m["content"].split()) for m in job.chat.messages) if job.chat else len(job.prompt.split())

    async def count_tokens(self, job: Job) -> int:
        if self.gate is not None:
            await self.gate.wait()
        return self._count(job)

    def stats(self) -> dict[str, int]:
        return {"running": 0, "waiting": 0}

    async def close(self) -> None:
        self.closed = True


class FakeRegistry(Registry):
    """Opens FakeRunners for the mlx-lm loader and remembers them by name."""

    def __init__(self, capacity: int = 2):
        self.opened: dict[str, FakeRunner] = {}

        async def open_fake(spec: LoadSpec) -> FakeRunner:
            await asyncio.sleep(0.01)  # a load takes time: concurrent requests arrive while it runs
            runner = self.opened[spec.name] = FakeRunner(spec, capacity)
            return runner

        super().__init__({"mlx-lm": open_fake})


def fake_models(root: Path, *names: str) -> Path:
    """MODELS_DIR with plain llama checkpoint folders (the weights are never read by a fake runner)."""
    for name in names:
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text(json.dumps(LLAMA))
        (folder / "model.safetensors").write_bytes(b"")
    return root


@contextmanager
def fake_app(tmp_path: Path, catalog_paths: list[Path] | None = None, capacity: int = 2, **settings):
    """(TestClient, FakeRegistry): the real app, its lifespan run, with fake runners; models fake-a, fake-b."""
    models = fake_models(tmp_path / "models", "fake-a", "fake-b")
    registry = FakeRegistry(capacity)
    app = create_app(load_settings(models_dir=str(models), **settings),
                     load_catalog(catalog_paths or []).raise_for_problems(), runners=registry)
    with TestClient(app) as client:
        yield client, registry


@contextmanager
def offline_fake_app(tmp_path: Path, **settings):
    """`fake_app` whose Hub client is offline, for tests that send arbitrary bodies to /api/pull too."""
    from service.hub import store
    from service.hub.pull import Puller

    store.use_puller(Puller(cache_dir=tmp_path / "hub", offline=True))
    try:
        with fake_app(tmp_path, **settings) as (client, registry):
            yield client, registry
    finally:
        store.use_puller(None)
