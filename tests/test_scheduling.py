"""The manager schedules runners: leases keep a model from being evicted, the queue is counted beyond the
batch, keep_alive 0 unloads after the last lease. Fake runners, no MLX."""

from __future__ import annotations

import asyncio

import pytest

from service.catalog import load_catalog
from service.config import load_settings
from service.errors import QueueFull
from service.manager import ModelManager

from .fakes import FakeRegistry, fake_models


def manager_for(tmp_path, capacity: int = 2, **settings) -> tuple[ModelManager, FakeRegistry]:
    models = fake_models(tmp_path / "models", "fake-a", "fake-b")
    registry = FakeRegistry(capacity)
    manager = ModelManager(load_settings(models_dir=str(models), **settings), load_catalog([]).catalog, registry)
    return manager, registry


def test_a_held_model_is_not_evicted_until_released(tmp_path):
    """What made count_tokens race an eviction: now every use of a model holds a lease."""
    async def main():
        manager, registry = manager_for(tmp_path, max_loaded_models=1)
        counting = await manager.lease("fake-a", generating=False)
        other = asyncio.ensure_future(manager.lease("fake-b"))
        await asyncio.sleep(0.2)
        assert not other.done() and list(manager.models) == ["fake-a"] and not registry.opened["fake-a"].closed
        await counting.release()
        lease_b = await asyncio.wait_for(other, 5)
        assert list(manager.models) == ["fake-b"] and registry.opened["fake-a"].closed
        await lease_b.release()

    asyncio.run(main())


def test_the_queue_counts_requests_beyond_the_batch(tmp_path):
    async def main():
        manager, _ = manager_for(tmp_path, capacity=2, max_queue=1)
        leases = [await manager.lease("fake-a") for _ in range(3)]  # two in the batch, one waiting
        served = manager.models["fake-a"]
        assert served.generating == 3 and served.waiting == 1
        with pytest.raises(QueueFull, match="1 requests waiting"):
            await manager.lease("fake-a")
        counted = await manager.lease("fake-a", generating=False)  # counting tokens never queues
        await leases[0].release()
        leases[0] = await manager.lease("fake-a")
        for lease in [*leases, counted]:
            await lease.release()
        assert served.generating == 0 and served.holds == 0

    asyncio.run(main())


def test_keep_alive_zero_unloads_after_the_last_lease(tmp_path):
    async def main():
        manager, registry = manager_for(tmp_path)
        first, second = await manager.lease("fake-a", 0), await manager.lease("fake-a", 0)
        await first.release()
        assert "fake-a" in manager.models  # still held by the second request
        await second.release()
        assert manager.models == {} and registry.opened["fake-a"].closed

    asyncio.run(main())


def test_concurrent_first_leases_open_one_runner(tmp_path):
    async def main():
        manager, registry = manager_for(tmp_path)
        leases = await asyncio.gather(*(manager.lease("fake-b") for _ in range(5)))
        assert manager.loads == 1 and sum(lease.waited_for_load for lease in leases) == 5
        for lease in leases:
            await lease.release()

    asyncio.run(main())
