"""The prefix cache's SSD tier: kept across restarts, checked on read, cleared on request."""

from __future__ import annotations

import httpx

from .server import Server

LONG = [{"role": "user", "content": "the river of light runs over the old stone bridge " * 40}]  # > 256 tokens


def _ask(srv: Server) -> dict:
    r = httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny", "messages": LONG, "max_tokens": 4},
                   timeout=60)
    assert r.status_code == 200
    return r.json()


def _flush(srv: Server) -> None:
    srv.manager.models["tiny:s-f32"].runner.disk_cache.flush()


def test_a_restart_keeps_long_prefixes_and_a_corrupt_file_is_recomputed(models_dir, tmp_path, caplog):
    cache = tmp_path / "cache"
    with Server(models_dir, cache_dir=str(cache)) as first:
        cold = _ask(first)
        assert cold["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        _flush(first)
    files = list((cache / "prefix").glob("*.safetensors"))
    assert len(files) == 1
    with Server(models_dir, cache_dir=str(cache)) as second:
        warm = _ask(second)
        assert warm["usage"]["prompt_tokens_details"]["cached_tokens"] >= cold["usage"]["prompt_tokens"] - 1
        assert warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]  # same answer
        stats = httpx.get(second.url + "/api/stats").json()
        disk = next(m for m in stats["models"] if m["name"] == "tiny:s-f32")["prefix_cache"]["disk"]
        assert disk["hits"] == 1 and disk["bytes"] > 0
    data = files[0].read_bytes()
    files[0].write_bytes(data[: len(data) // 2] + bytes(len(data) - len(data) // 2))  # damaged
    with Server(models_dir, cache_dir=str(cache)) as third:
        again = _ask(third)
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # recomputed, not trusted
        assert again["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
        assert "dropping prefix-cache file" in caplog.text and "checksum" in caplog.text
        _flush(third)
        runner = third.manager.models["tiny:s-f32"].runner.stats()
        assert runner["disk_dropped"] == 1 and runner["disk_writes"] == 1
        assert files[0].read_bytes() == data  # written anew, whole
        assert httpx.post(third.url + "/api/cache/clear").json() == {"cleared": True}
        assert not list((cache / "prefix").glob("*.safetensors"))
        assert _ask(third)["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # RAM tier cleared too


def test_short_prompts_stay_in_ram_only(models_dir, tmp_path):
    with Server(models_dir, cache_dir=str(tmp_path / "c")) as srv:
        httpx.post(srv.url + "/v1/chat/completions", json={"model": "tiny", "messages": [
            {"role": "user", "content": "hi"}], "max_tokens": 2})
        _flush(srv)
        assert not list((tmp_path / "c" / "prefix").glob("*.safetensors"))


def _kv_cache(tokens: int):
    import mlx.core as mx
    from mlx_lm.models.cache import KVCache

    layers = [KVCache() for _ in range(2)]
    for layer in layers:
        layer.update_and_fetch(mx.random.normal((1, 2, tokens, 8)), mx.random.normal((1, 2, tokens, 8)))
    mx.eval([layer.state for layer in layers])  # as a finished job's cache is
    return layers


def test_truncated_files_orphans_and_foreign_classes_are_never_used(tmp_path, caplog):
    import mlx.core as mx
    import pytest

    from service.runners.disk_cache import DiskPromptCache

    tokens = list(range(300))
    disk = DiskPromptCache(tmp_path, "model-a", max_bytes=1 << 30)
    disk.store(tokens, _kv_cache(300))
    disk.flush()
    cache, common = disk.fetch(tokens + [7, 8])
    assert common == 300 and cache[0].offset == 300
    (file,) = tmp_path.glob("*.safetensors")
    file.write_bytes(file.read_bytes()[:-100])  # truncated
    assert disk.fetch(tokens) is None and disk.counts["disk_dropped"] == 1 and not file.exists()
    assert "dropping prefix-cache file" in caplog.text
    disk.close()

    orphan = tmp_path / f"{disk.key}-0123.partial.safetensors"  # a crash mid-write
    orphan.write_bytes(b"half")
    reopened = DiskPromptCache(tmp_path, "model-a", max_bytes=1 << 30)
    assert not orphan.exists()
    reopened.close()

    from service.runners import disk_cache

    arrays = {"0.0": mx.zeros((1,))}
    metadata = {"0": "{}", "1.0": "os", "2.0": ""}  # names a class that is not a KV cache
    with pytest.raises(ValueError, match="unknown cache class"):
        disk_cache._prompt_cache(arrays, metadata)


def test_a_writer_that_falls_behind_skips_caches_instead_of_holding_them(tmp_path, monkeypatch):
    import threading

    import mlx_lm.models.cache as mlx_cache

    from service.runners.disk_cache import MAX_PENDING, DiskPromptCache

    release, save = threading.Event(), mlx_cache.save_prompt_cache
    monkeypatch.setattr(mlx_cache, "save_prompt_cache", lambda *a, **k: (release.wait(30), save(*a, **k)))
    disk = DiskPromptCache(tmp_path, "model-a", max_bytes=1 << 30)
    for i in range(10):
        disk.store([i] * 300, _kv_cache(300))
        assert disk._writes.qsize() <= MAX_PENDING  # never more finished caches held than this
    skipped = disk.counts["disk_skipped"]
    assert skipped >= 10 - 1 - MAX_PENDING
    release.set()
    disk.flush()
    assert disk.counts["disk_writes"] == 10 - skipped == len(list(tmp_path.glob("*.safetensors")))
    disk.close()


def test_a_prompt_finished_inside_a_batch_is_written_while_another_stream_decodes(models_dir, tmp_path):
    """A batch hands out a finished sequence's cache as lazy slices on the runner's stream: they are computed
    before the writer thread gets them (it could not, and would wait for ever)."""
    import threading

    with Server(models_dir, cache_dir=str(tmp_path / "c")) as srv:
        busy = threading.Thread(target=lambda: httpx.post(srv.url + "/v1/chat/completions", timeout=120, json={
            "model": "tiny", "messages": [{"role": "user", "content": "go"}], "max_tokens": 1500,
            "ignore_eos": True}))
        busy.start()
        assert srv.wait(lambda: srv.manager.models.get("tiny:s-f32") is not None
                        and srv.manager.models["tiny:s-f32"].runner.stats().get("running") == 1, timeout=30)
        _ask(srv)  # joins the running stream's batch
        runner = srv.manager.models["tiny:s-f32"].runner
        assert runner.stats()["peak_running"] == 2
        assert srv.wait(lambda: runner.stats()["disk_writes"] == 1, timeout=30)  # while the other still decodes
        assert busy.is_alive()
        busy.join()
        runner.disk_cache.flush()
        assert runner.stats()["disk_writes"] == 2  # and the long stream's own cache once it ended
        assert len(list((tmp_path / "c" / "prefix").glob("*.safetensors"))) == 2
