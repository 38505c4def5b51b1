"""Model manager behaviour through a real server: budget, eviction, single load, keep_alive, queue, cancel."""

from __future__ import annotations

import json
import shutil
import threading
import time

import anthropic
import httpx
import mlx.core as mx
import openai
import pytest

from .server import Server

MSG = [{"role": "user", "content": "hello there"}]


def chat(srv: Server, model: str = "tiny", **kw) -> httpx.Response:
    body = {"model": model, "messages": MSG, "max_tokens": 4, **kw}
    return httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)


def test_two_models_under_a_budget_that_fits_one(models_dir):
    with Server(models_dir, batch_size=1) as probe:
        need = probe.manager.resolve("tiny").estimate_bytes
    with Server(models_dir, max_memory_gb=need * 1.5 / 2**30, batch_size=1) as srv:
        assert chat(srv, "tiny:s-f32").status_code == 200
        assert chat(srv, "tiny:s-f32b").status_code == 200
        assert list(srv.manager.models) == ["tiny:s-f32b"]  # the first was evicted (LRU, idle)
        assert chat(srv, "tiny:s-f32").status_code == 200
        assert list(srv.manager.models) == ["tiny:s-f32"]


def test_batch_is_lowered_to_fit_the_budget(models_dir):
    with Server(models_dir, batch_size=1) as probe:
        one = probe.manager.resolve("tiny")
    with Server(models_dir, batch_size=4) as probe:
        four = probe.manager.resolve("tiny")
    kv = (four.estimate_bytes - one.estimate_bytes) / 3  # the KV cache of one more sequence
    assert four.parallel == 4 and kv > 0
    with Server(models_dir, batch_size=4, max_memory_gb=(one.estimate_bytes + 1.5 * kv) / 2**30) as srv:
        assert chat(srv).status_code == 200
        served = srv.manager.models["tiny:s-f32"]
        assert served.target.parallel == 2 and served.runner.capacity == 2
        assert httpx.get(srv.url + "/v1/models/loaded").json()["data"][0]["batch_size"] == 2


def test_model_that_cannot_fit_is_refused_without_evicting(models_dir):
    with Server(models_dir, batch_size=1) as probe:
        need = probe.manager.resolve("tiny").estimate_bytes
    with Server(models_dir, max_memory_gb=need * 0.5 / 2**30) as srv:
        r = chat(srv)
        assert r.status_code == 507 and "MLX_SERVICE_MAX_MEMORY_GB" in r.json()["error"]["message"]
        assert r.headers["x-should-retry"] == "false" and srv.manager.models == {}


def test_max_loaded_models(models_dir):
    with Server(models_dir, max_loaded_models=1) as srv:
        chat(srv, "tiny:s-f32"), chat(srv, "tiny:s-f32b")
        assert list(srv.manager.models) == ["tiny:s-f32b"]


def test_concurrent_first_requests_load_once(models_dir):
    with Server(models_dir) as srv:
        results = []
        threads = [threading.Thread(target=lambda: results.append(chat(srv).status_code)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [200] * 4 and srv.manager.loads == 1


def test_unload_frees_memory(models_dir):
    with Server(models_dir) as srv:
        before = mx.get_active_memory()
        httpx.post(srv.url + "/api/generate", json={"model": "tiny", "prompt": ""})
        loaded = mx.get_active_memory()
        assert loaded - before >= 139584 * 4  # the float32 weights
        httpx.post(srv.url + "/api/generate", json={"model": "tiny", "prompt": "", "keep_alive": 0})
        assert srv.manager.models == {}
        assert mx.get_active_memory() - before < 139584 * 4 / 2


def test_idle_timeout_unloads(models_dir):
    with Server(models_dir, model_idle_timeout_sec=0.5) as srv:
        assert chat(srv).status_code == 200
        assert srv.wait(lambda: srv.manager.models == {}, timeout=5)


def test_keep_alive_forever_survives_idle_timeout(models_dir):
    with Server(models_dir, model_idle_timeout_sec=0.3) as srv:
        assert chat(srv, keep_alive=-1).status_code == 200
        time.sleep(1.2)
        assert "tiny:s-f32" in srv.manager.models


def test_failed_load_reports_and_frees(models_dir, tmp_path):
    broken = tmp_path / "models"
    shutil.copytree(models_dir, broken, dirs_exist_ok=True)
    folder = broken / "broken-model"
    folder.mkdir()
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "vocab_size": 512, "rms_norm_eps": 1e-5}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}garbage")
    with Server(broken) as srv:
        before = mx.get_active_memory()
        r = chat(srv, "broken-model")
        assert r.status_code == 500 and "loading broken-model" in r.json()["error"]["message"]
        assert srv.manager.models == {} and mx.get_active_memory() - before < 2**20
        assert chat(srv).status_code == 200  # the service is fine afterwards


def test_queue_full(models_dir):
    with Server(models_dir, max_queue=0, max_tokens=100000, context_length=32768, batch_size=1) as srv:
        body = {"model": "tiny", "messages": MSG, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as first:
            lines = first.iter_lines()  # keep the iterator: dropping it closes the stream (a disconnect)
            next(lines)
            r = chat(srv)
            assert r.status_code == 503 and r.headers["retry-after"] == "1"
            client = anthropic.Anthropic(base_url=srv.url, api_key="x", max_retries=0)
            with pytest.raises(anthropic.OverloadedError):
                client.messages.create(model="tiny", max_tokens=2, messages=MSG)
            oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.InternalServerError):
                oai.chat.completions.create(model="tiny", messages=MSG, max_tokens=2)


def test_disconnect_cancels_within_a_step(models_dir):
    with Server(models_dir, max_tokens=100000, context_length=32768) as srv:
        body = {"model": "tiny", "messages": MSG, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            for _ in range(3):
                next(lines)
        served = srv.manager.models["tiny:s-f32"]
        assert srv.wait(lambda: served.runner.stats().get("cancelled") == 1 and served.holds == 0, timeout=30)
        assert served.generating == 0 and served.runner.stats()["running"] == 0
        assert chat(srv).status_code == 200  # the slot is free for the next request


def test_generation_timeout(models_dir):
    with Server(models_dir, max_tokens=1000000, context_length=32768, generation_timeout=0.3) as srv:
        r = chat(srv, max_tokens=None, ignore_eos=True)
        assert r.status_code == 504 and "GENERATION_TIMEOUT" in r.json()["error"]["message"]
        body = {"model": "tiny", "messages": MSG, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=60) as resp:
            data = [line for line in resp.iter_lines() if line.startswith("data: ")]
        assert data[-1] == "data: [DONE]" and "error" in json.loads(data[-2][6:])


def test_prefix_cache_reuses_the_conversation(models_dir):
    story = [{"role": "user", "content": "Tell me the story of the cat and the library, " * 4}]
    with Server(models_dir) as srv:
        oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        first = oai.chat.completions.create(model="tiny", messages=story, max_tokens=8, temperature=0)
        follow = story + [{"role": "assistant", "content": first.choices[0].message.content},
                          {"role": "user", "content": "and then?"}]
        second = oai.chat.completions.create(model="tiny", messages=follow, max_tokens=8, temperature=0)
        assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1
        # another question shares only the chat template's header: recomputing it is cheaper than a copy
        other = oai.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                            max_tokens=2, temperature=0)
        assert other.usage.prompt_tokens_details.cached_tokens == 0
    with Server(models_dir, enable_prefix_cache=False) as srv:
        oai = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        again = oai.chat.completions.create(model="tiny", messages=follow, max_tokens=8, temperature=0)
        assert again.usage.prompt_tokens_details.cached_tokens == 0
        assert again.choices[0].message.content == second.choices[0].message.content  # same result either way
