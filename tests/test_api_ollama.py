"""The Ollama dialect through the official `ollama` client against a real server."""

from __future__ import annotations

import httpx
import ollama
import pytest


@pytest.fixture(scope="module")
def client(server):
    return ollama.Client(host=server.url)


def test_chat_stream_and_final_line(client):
    parts = list(client.chat(model="tiny", messages=[{"role": "user", "content": "hi"}], stream=True,
                             options={"num_predict": 6, "temperature": 0}))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    final = parts[-1]
    assert final.done_reason == "length" and final.eval_count == 6 and final.prompt_eval_count > 0
    assert final.total_duration >= final.eval_duration > 0
    whole = client.chat(model="tiny", messages=[{"role": "user", "content": "hi"}],
                        options={"num_predict": 6, "temperature": 0}, stream=False)
    assert whole.message.content == "".join(p.message.content for p in parts)


def test_load_duration_is_the_load_only(client, server):
    client.generate(model="tiny", prompt="", keep_alive=0)  # unloads
    first = client.generate(model="tiny", prompt="once", options={"num_predict": 2})
    loaded = httpx.get(server.url + "/v1/models/loaded").json()["data"]
    seconds = next(m["load_seconds"] for m in loaded if m["id"] == "tiny:s-f32")
    assert first.load_duration == pytest.approx(seconds * 1e9, abs=1e5) and first.load_duration > 0
    assert first.total_duration >= first.load_duration + first.prompt_eval_duration + first.eval_duration
    again = client.generate(model="tiny", prompt="once", options={"num_predict": 2})
    assert again.load_duration == 0


def test_generate(client):
    r = client.generate(model="tiny", prompt="once", options={"num_predict": 4, "temperature": 0})
    assert r.done and r.eval_count == 4 and r.done_reason == "length"
    raw = client.generate(model="tiny", prompt="once", raw=True, options={"num_predict": 4, "temperature": 0})
    assert raw.prompt_eval_count < r.prompt_eval_count  # no chat template around a raw prompt


def test_show_cataloged_model_before_download(client):
    info = client.show("qwen3:30b-a3b")
    assert "thinking" in info.capabilities and "tools" in info.capabilities and "completion" in info.capabilities
    mi = info.modelinfo
    assert mi["general.architecture"] == "qwen3_moe"
    assert mi["qwen3_moe.block_count"] == 48 and mi["qwen3_moe.attention.head_count_kv"] == 4
    assert mi["qwen3_moe.context_length"] == 40960 and mi["qwen3_moe.expert_count"] == 128
    assert info.details.parameter_size == "30.5B" and info.details.quantization_level == "Q4"
    assert "temperature" in info.parameters and '"<|im_end|>"' in info.parameters
    assert info.license == "apache-2.0"


def test_show_reports_presence(server):
    r = httpx.post(server.url + "/api/show", json={"model": "qwen3:8b"}).json()
    assert r["mlx_service"]["downloaded"] is False and r["mlx_service"]["repo"] == "mlx-community/Qwen3-8B-4bit"
    httpx.post(server.url + "/api/generate", json={"model": "tiny", "prompt": ""})
    r = httpx.post(server.url + "/api/show", json={"model": "tiny"}).json()
    assert r["mlx_service"]["downloaded"] is True and "im_start" in r["template"]


def test_tags_and_ps(client):
    client.generate(model="tiny", prompt="x", options={"num_predict": 1})
    names = [m.model for m in client.list().models]
    assert "tiny:s-f32" in names
    running = client.ps().models
    assert any(m.model == "tiny:s-f32" and m.size > 0 for m in running)


def test_empty_prompt_loads_and_keep_alive_zero_unloads(server, client):
    r = client.generate(model="tiny:s-f32b", prompt="")
    assert r.done_reason == "load" and "tiny:s-f32b" in server.manager.models
    r = client.generate(model="tiny:s-f32b", prompt="", keep_alive=0)
    assert r.done_reason == "unload" and "tiny:s-f32b" not in server.manager.models
    r = client.chat(model="tiny:s-f32b", messages=[{"role": "user", "content": "x"}], keep_alive=0,
                    options={"num_predict": 2})
    assert r.done and server.wait(lambda: "tiny:s-f32b" not in server.manager.models)


def test_errors_in_ollama_dialect(client, server):
    with pytest.raises(ollama.ResponseError) as err:
        client.chat(model="nope-model", messages=[{"role": "user", "content": "x"}])
    assert err.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as err:
        client.show("nope-model")
    assert err.value.status_code == 404
    r = httpx.post(server.url + "/api/chat", json={"model": "tiny", "messages": [{"role": "user", "content": "x"}],
                                                  "keep_alive": "forever-ish"})
    assert r.status_code == 400 and "keep_alive" in r.json()["error"]
    r = httpx.post(server.url + "/api/chat", json={"model": "tiny", "messages": "x"})
    assert r.status_code == 400 and set(r.json()) == {"error"}
    r = httpx.post(server.url + "/api/generate", json={"model": "tiny", "prompt": "x", "options": {"top_k": "many"}})
    assert r.status_code == 400 and "top_k" in r.json()["error"]


def test_root_and_version(server):
    assert httpx.get(server.url + "/").text == "Ollama is running"
    assert httpx.head(server.url + "/").status_code == 200
    assert "version" in httpx.get(server.url + "/api/version").json()


def test_show_of_a_loaded_generated_model_says_where_it_is(server):
    import httpx

    body = {"model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 1}}
    httpx.post(server.url + "/api/generate", json=body).raise_for_status()  # "tiny" now names a loaded model
    shown = httpx.post(server.url + "/api/show", json={"model": "tiny"}).json()["mlx_service"]
    assert shown["downloaded"] and shown["path"].endswith("tiny-s-f32")
