"""The three dialects as translations: body -> request, events -> response. Pure functions first, then the
real app with a fake runner and the official SDKs in-process (no uvicorn, no MLX)."""

from __future__ import annotations

import asyncio
import json

import anthropic
import httpx
import ollama
import openai
import pytest

from service.api import anthropic as anthropic_api
from service.api import ollama as ollama_api
from service.api import openai as openai_api
from service.engine.events import Done, FinishReason, Result, TextDelta, Usage
from service.errors import BadRequest, GenerationTimeout

from .conftest import VALID_FAMILY
from .fakes import FakeRunner, fake_app

MSG = [{"role": "user", "content": "hello there"}]


# ---- body -> request -------------------------------------------------------------------------------------
def test_openai_chat_body_to_request():
    req = openai_api.chat_request(openai_api.ChatRequest(
        model="m", messages=[{"role": "developer", "content": "be brief"}, *MSG], temperature=0.3, top_k=5,
        seed=9, stop="x", max_completion_tokens=7, stream=True))
    assert [(m.role, m.content) for m in req.messages] == [("system", "be brief"), ("user", "hello there")]
    assert (req.sampling.temperature, req.sampling.top_k, req.sampling.seed, req.sampling.top_p) == (0.3, 5, 9, None)
    assert req.stop == ["x"] and req.max_tokens == 7 and req.stream


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_openai_zero_max_tokens_is_refused_not_replaced(field):
    with pytest.raises(BadRequest, match=field):
        openai_api.chat_request(openai_api.ChatRequest(model="m", messages=MSG, **{field: 0}))
    with pytest.raises(BadRequest, match="max_tokens"):
        openai_api.completion_request(openai_api.CompletionRequest(model="m", prompt="p", max_tokens=0))
    assert openai_api.completion_request(openai_api.CompletionRequest(model="m", prompt="p")).max_tokens == 16


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 1.5}, {"top_k": -2}, {"min_p": 2},
                                 {"repetition_penalty": 0}])
def test_sampling_out_of_range_is_a_400_naming_the_field(bad):
    with pytest.raises(BadRequest, match=next(iter(bad))):
        openai_api.chat_request(openai_api.ChatRequest(model="m", messages=MSG, **bad))


def test_ollama_options_are_checked_and_renamed():
    body = ollama_api.ChatRequest(model="m", messages=MSG, options={"repeat_penalty": 1.1, "num_predict": -1})
    req = ollama_api.chat_request(body)
    assert req.sampling.repetition_penalty == 1.1 and req.max_tokens is None and req.stream
    for options in ({"temperature": "hot"}, {"temperature": float("nan")}, {"num_predict": 1.5}):
        with pytest.raises(BadRequest, match="options."):
            ollama_api.chat_request(ollama_api.ChatRequest(model="m", messages=MSG, options=options))


def test_anthropic_body_to_request():
    body = anthropic_api.MessagesRequest(model="m", max_tokens=5, system="sys", stop_sequences=["z"],
                                         messages=[*MSG, {"role": "user", "content": [{"type": "text", "text": "?"}]}])
    req = anthropic_api.messages_request(body)
    assert [(m.role, m.content) for m in req.messages] == [("system", "sys"), ("user", "hello there\n\n?")]
    with pytest.raises(BadRequest, match="max_tokens"):
        anthropic_api.messages_request(body.model_copy(update={"max_tokens": 0}))


# ---- events -> response ----------------------------------------------------------------------------------
VIEWS = [lambda: openai_api.OpenAIView("m", chat=True, include_usage=True),
         lambda: openai_api.OpenAIView("m", chat=False), lambda: anthropic_api.AnthropicView("m"),
         lambda: ollama_api.OllamaView("m", chat=True), lambda: ollama_api.OllamaView("m", chat=False)]


async def _events(*events):
    for event in events:
        yield event


@pytest.mark.parametrize("reason", list(FinishReason))
@pytest.mark.parametrize("make", VIEWS)
def test_every_finish_reason_renders_in_every_view(make, reason):
    done = Done(reason, Usage(3, 2, 1))
    result = Result(text="hi", done=done)
    body = json.dumps(make().complete(result))
    chunks = asyncio.run(_collect(make().stream(_events(TextDelta("hi"), done))))
    assert "hi" in body and any("hi" in c for c in chunks)


async def _collect(stream):
    return [chunk async for chunk in stream]


def test_finish_names_per_dialect():
    tool = Result(text="", done=Done(FinishReason.TOOL_CALLS))
    assert openai_api.OpenAIView("m", chat=True).complete(tool)["choices"][0]["finish_reason"] == "tool_calls"
    assert anthropic_api.AnthropicView("m").complete(tool)["stop_reason"] == "tool_use"
    assert ollama_api.OllamaView("m", chat=True).complete(tool)["done_reason"] == "stop"
    seq = Result(text="", done=Done(FinishReason.STOP_SEQUENCE, stop_sequence="##"))
    assert anthropic_api.AnthropicView("m").complete(seq)["stop_sequence"] == "##"


# ---- the app with a fake runner ----------------------------------------------------------------------------
@pytest.fixture
def app(tmp_path):
    with fake_app(tmp_path, max_tokens=50) as (client, registry):
        yield client, registry


def test_sdks_over_a_fake_runner(app):
    client, registry = app
    oai = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=client, max_retries=0)
    r = oai.chat.completions.create(model="fake-a", messages=MSG, max_tokens=3, temperature=0.25)
    assert r.choices[0].message.content == "Hello from the " and r.choices[0].finish_reason == "length"
    assert r.usage.prompt_tokens == 2 and r.usage.completion_tokens == 3
    job = registry.opened["fake-a"].jobs[-1]
    assert job.sampling.temperature == 0.25 and job.sampling.top_p == 1.0 and job.max_tokens == 3
    chunks = list(oai.chat.completions.create(model="fake-a", messages=MSG, stream=True, stop=["fake"]))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello from the "
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert registry.opened["fake-a"].jobs[-1].max_tokens == 50  # MLX_SERVICE_MAX_TOKENS, applied once

    ant = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=client, max_retries=0)
    m = ant.messages.create(model="fake-a", max_tokens=2, messages=MSG)
    assert m.content[0].text == "Hello from " and m.stop_reason == "max_tokens"
    with ant.messages.stream(model="fake-a", max_tokens=100, messages=MSG, stop_sequences=["runner"]) as s:
        assert s.get_final_text() == "Hello from the fake "
        assert s.get_final_message().stop_reason == "stop_sequence"
    assert ant.messages.count_tokens(model="fake-a", messages=MSG).input_tokens == 2

    oll = ollama.Client(host="http://testserver")
    oll._client = client  # the ollama package builds its own httpx.Client; this one runs the app in-process
    parts = list(oll.chat(model="fake-a", messages=MSG, stream=True, options={"num_predict": 2}))
    assert "".join(p.message.content for p in parts) == "Hello from " and parts[-1].done_reason == "length"
    assert oll.generate(model="fake-b", prompt="hi there").response == "Hello from the fake runner . "


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": MSG, "stream": True}),
    ("/v1/messages", {"messages": MSG, "max_tokens": 9, "stream": True}),
    ("/api/chat", {"messages": MSG}),
])
def test_an_error_after_the_first_event_ends_the_stream_in_its_dialect(app, monkeypatch, path, body):
    client, _ = app
    monkeypatch.setattr(FakeRunner, "script", [TextDelta("partial"), GenerationTimeout("took too long")])
    r = client.post(path, json={"model": "fake-a", **body})
    assert r.status_code == 200 and "partial" in r.text and "took too long" in r.text
    if path.startswith("/v1/chat"):
        assert r.text.rstrip().endswith("data: [DONE]")
    elif path == "/v1/messages":
        assert "event: error" in r.text and "timeout_error" in r.text
    else:
        assert json.loads(r.text.splitlines()[-1]) == {"error": "took too long"}


def test_an_error_before_the_first_event_is_an_error_response(app, monkeypatch):
    client, _ = app
    monkeypatch.setattr(FakeRunner, "script", [BadRequest("the template said no")])
    r = client.post("/v1/chat/completions", json={"model": "fake-a", "messages": MSG, "stream": True})
    assert r.status_code == 400 and r.json()["error"]["message"] == "the template said no"
    r = client.post("/v1/messages", json={"model": "fake-a", "messages": MSG, "max_tokens": 3})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"
    assert client.app.state.manager.models["fake-a"].holds == 0  # the lease was released


def test_a_name_is_resolved_once_per_request(app, monkeypatch):
    client, _ = app
    import service.manager as manager_module

    calls = []
    real = manager_module.resolve_target
    monkeypatch.setattr(manager_module, "resolve_target", lambda *a: calls.append(a[-1]) or real(*a))
    for path, body in (("/api/chat", {"messages": MSG, "stream": False}), ("/v1/chat/completions", {"messages": MSG}),
                       ("/v1/messages", {"messages": MSG, "max_tokens": 2})):
        assert client.post(path, json={"model": "fake-b", **body}).status_code == 200
    assert calls == ["fake-b"]  # the first request resolved it; loaded, the name is a dictionary lookup


def test_an_ambiguous_name_is_the_same_400_everywhere(tmp_path, write):
    first = VALID_FAMILY.replace("name: testfam", "name: amb").replace("size: 1b", "size: x-1b").replace(
        "default_size: 1b", "default_size: x-1b")
    second = VALID_FAMILY.replace("name: testfam", "name: amb-x").replace("test-org/testfam-1b-4bit", "test-org/b")
    layers = [write(first, "b/one.yaml").parent, write(second, "c/two.yaml").parent]
    with fake_app(tmp_path, catalog_paths=layers) as (client, _):
        answers = [client.post("/api/show", json={"model": "amb-x-1b"}),
                   client.post("/api/chat", json={"model": "amb-x-1b", "messages": MSG}),
                   client.post("/v1/chat/completions", json={"model": "amb-x-1b", "messages": MSG}),
                   client.post("/v1/messages", json={"model": "amb-x-1b", "messages": MSG, "max_tokens": 1}),
                   client.post("/v1/messages/count_tokens", json={"model": "amb-x-1b", "messages": MSG})]
    assert [r.status_code for r in answers] == [400] * 5
    assert all("amb-x:1b-4bit" in r.text and "amb:x-1b-4bit" in r.text for r in answers)


def test_unknown_loader_is_not_supported_yet(tmp_path):
    with fake_app(tmp_path) as (client, registry):  # fake runners only for mlx-lm
        r = client.post("/api/embed", json={"model": "all-minilm", "input": "x"})
    assert r.status_code == 400 and "not supported yet" in r.json()["error"]
    assert registry.opened == {}


def test_listing_needs_no_runner_import(app):
    client, _ = app
    names = [m["id"] for m in client.get("/v1/models").json()["data"]]
    assert "fake-a" in names and "fake-b" in names
    assert httpx.codes.OK == client.get("/api/ps").status_code
