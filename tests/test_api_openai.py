"""The OpenAI dialect through the official `openai` client against a real server."""

from __future__ import annotations

import httpx
import openai
import pytest

from .conftest import pick_stop

MSG = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_chat_non_streaming_counts_and_length(client, server):
    r = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.model == "tiny:s-f32"
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 12
    tokenizer = server.manager.models["tiny:s-f32"].runner.tokenizer
    prompt = tokenizer.apply_chat_template(MSG, add_generation_prompt=True, tokenize=False)
    assert r.usage.prompt_tokens == len(tokenizer.encode(prompt, add_special_tokens=False))
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12


def test_greedy_is_deterministic_and_stream_matches(client):
    a = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=20, temperature=0)
    b = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=20, temperature=0)
    assert a.choices[0].message.content == b.choices[0].message.content
    chunks = list(client.chat.completions.create(model="tiny", messages=MSG, max_tokens=20, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" and c.id == chunks[0].id for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == a.choices[0].message.content
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 20


def test_seeded_sampling_is_reproducible(client):
    kw = dict(model="tiny", messages=MSG, max_tokens=16, temperature=1.0, seed=123)
    assert client.chat.completions.create(**kw).choices[0].message.content == \
        client.chat.completions.create(**kw).choices[0].message.content


def test_stop_string_cuts_the_text(client):
    full = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=30, temperature=0)
    text = full.choices[0].message.content
    stop = pick_stop(text)
    r = client.chat.completions.create(model="tiny", messages=MSG, max_tokens=30, temperature=0, stop=[stop])
    assert r.choices[0].message.content == text[: text.index(stop)]
    assert r.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model="tiny", messages=MSG, max_tokens=30, temperature=0, stop=stop, stream=True) if c.choices)
    assert streamed == text[: text.index(stop)]


def test_legacy_completions(client):
    r = client.completions.create(model="tiny", prompt="once upon", max_tokens=5, temperature=0)
    assert r.object == "text_completion" and r.usage.completion_tokens == 5
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="tiny", prompt="once upon", max_tokens=5, temperature=0, stream=True))
    assert streamed == r.choices[0].text


def test_models_endpoints(client, server):
    ids = [m.id for m in client.models.list()]
    assert "tiny:s-f32" in ids and "tiny:s-f32b" in ids
    assert client.models.retrieve("tiny").id == "tiny:s-f32"
    loaded = httpx.get(server.url + "/v1/models/loaded").json()["data"]
    assert any(m["id"] == "tiny:s-f32" for m in loaded)


def test_explicit_load_and_unload(server):
    r = httpx.post(server.url + "/v1/models/tiny:s-f32b/load")
    assert r.status_code == 200 and "tiny:s-f32b" in server.manager.models
    r = httpx.post(server.url + "/v1/models/tiny:s-f32b/unload")
    assert r.json()["unloaded"] is True and "tiny:s-f32b" not in server.manager.models


@pytest.mark.parametrize(("kwargs", "exc", "needle"), [
    (dict(model="tiny", n=2), openai.BadRequestError, "n=1"),
    (dict(model="nope-model"), openai.NotFoundError, "not in the catalog"),
    (dict(model="tinny"), openai.NotFoundError, "did you mean 'tiny'"),
    (dict(model="some-org/not-here"), openai.NotFoundError, "pull it first"),
    (dict(model="qwen2.5-vl:7b"), openai.NotFoundError, "pull it first"),  # a vision model: served once pulled
    (dict(model="all-minilm"), openai.BadRequestError, "is an embedding model: it cannot generate text"),
    (dict(model="tiny", max_tokens=0), openai.BadRequestError, "max_tokens"),
    (dict(model="tiny", messages=[{"role": "wizard", "content": "x"}]), openai.BadRequestError, "role"),
    (dict(model="tiny", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]),
     openai.BadRequestError, "http(s) URLs"),
    (dict(model="tiny", messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {
        "url": "data:image/png;base64,iVBORw0KGgo="}}]}]), openai.BadRequestError, "is a text model: it cannot see"),
])
def test_errors_in_openai_dialect(client, kwargs, exc, needle):
    kwargs.setdefault("messages", MSG)
    with pytest.raises(exc) as err:
        client.chat.completions.create(max_tokens=kwargs.pop("max_tokens", 4), **kwargs)
    body = err.value.body
    assert needle in body["message"] and body["type"] and "param" in body and "code" in body


def test_not_downloaded_catalog_entry_says_how_to_pull(client):
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="qwen3:0.6b", messages=MSG, max_tokens=2)
    assert "mlx-service pull" in err.value.body["message"] and err.value.code == "model_not_found"


@pytest.mark.parametrize(("content", "status", "needle"), [
    (b"{not json", 400, "invalid JSON"),
    (b"", 400, "missing request body"),
    (b'{"model": "tiny", "messages": "hello"}', 400, "messages"),
    (b'{"model": "tiny", "messages": [], "max_tokens": 2}', 400, "messages"),
    (b'{"model": 5, "messages": [{"role": "user", "content": "x"}]}', 400, "model"),
    (b'{"model": "../../etc/passwd", "messages": [{"role": "user", "content": "x"}]}', 404, "not in the catalog"),
    (b'{"model": "a/..", "messages": [{"role": "user", "content": "x"}]}', 404, ""),
])
def test_bad_bodies_get_openai_errors(server, content, status, needle):
    r = httpx.post(server.url + "/v1/chat/completions", content=content, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert needle in r.json()["error"]["message"]
    assert set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_oversized_body_is_413(server):
    big = b'{"model": "tiny", "messages": [{"role": "user", "content": "' + b"x" * (9 * 2**20) + b'"}]}'
    r = httpx.post(server.url + "/v1/chat/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"


def test_unknown_route_is_404_in_dialect(server):
    r = httpx.get(server.url + "/v1/nothing")
    assert r.status_code == 404 and "error" in r.json() and "detail" not in r.json()
