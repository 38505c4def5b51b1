"""Hostile HTTP input: every route answers bad bodies with a 4xx in its own dialect, never a 500, a traceback or
a path of this machine; oversized bodies are refused while they stream in."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .fakes import offline_fake_app

ROUTES = ["/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens", "/api/chat",
          "/api/generate", "/api/show", "/api/pull", "/api/delete", "/v1/models/fake-a/load", "/v1/embeddings",
          "/api/embed", "/api/embeddings", "/v1/audio/transcriptions"]
MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    with offline_fake_app(tmp, max_tokens=8) as (client, _):  # /api/pull never reaches a network
        yield client, str(tmp)


def _send(client, path: str, body: bytes) -> httpx.Response:
    method = "DELETE" if path == "/api/delete" else "POST"
    return client.request(method, path, content=body, headers={"content-type": "application/json"})


def _assert_handled(response: httpx.Response, machine_path: str) -> None:
    assert response.status_code < 500 or response.status_code in (503, 504, 507), response.text[:300]
    assert "Traceback" not in response.text
    if response.status_code >= 400:  # an error never shows where things are on this machine
        assert machine_path not in response.text, response.text[:300]


# ---- the findings, one by one ------------------------------------------------------------------------------
CASES = [
    ("/v1/chat/completions", b'{"model":"fake-a","messages":' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested"),
    ("/api/chat", b'{"model":"fake-a","messages":' + b'{"a":' * 70 + b"1" + b"}" * 70 + b"}", "nested"),
    ("/v1/chat/completions", json.dumps({"model": "x" * 10_000, "messages": MSG}).encode(), "model"),
    ("/api/show", json.dumps({"model": "x" * 10_000}).encode(), "model"),
    ("/api/chat", json.dumps({"model": "a/" + "x" * 300, "messages": MSG}).encode(), "model"),
    ("/v1/chat/completions", json.dumps({"model": "fake-a", "seed": 2**64, "messages": MSG}).encode(), "seed"),
    ("/api/chat", b'{"model":"fake-a","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":NaN}}',
     "num_predict"),
    ("/api/chat", b'{"model":"fake-a","messages":[{"role":"user","content":"hi"}],"options":{"top_k":Infinity}}',
     "top_k"),
    ("/api/chat", json.dumps({"model": "fake-a", "messages": MSG, "options": {"repeat_penalty": 2**63}}).encode(),
     "repetition_penalty"),
    ("/v1/chat/completions", json.dumps({"model": "fake-a", "temperature": 2**63, "messages": MSG}).encode(),
     "temperature"),
    ("/v1/chat/completions", json.dumps({"model": "fake-a", "repetition_penalty": -1, "messages": MSG}).encode(),
     "repetition_penalty"),
    ("/v1/chat/completions", b'{"model":"fake-a","messages":[{"role":"user","content":"\\ud800"}]}', "Unicode"),
    ("/v1/messages", b'{"model":"fake-\\udfff","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}',
     "Unicode"),
    ("/api/chat", json.dumps({"model": "fake-a", "keep_alive": 1e18, "messages": MSG}).encode(), "keep_alive"),
    ("/api/chat", b'{"model":"fake-a","keep_alive":NaN,"messages":[{"role":"user","content":"hi"}]}', "keep_alive"),
    ("/v1/messages", json.dumps({"model": "fake-a", "max_tokens": 1e300, "messages": MSG}).encode(), "max_tokens"),
    ("/api/delete", json.dumps({"model": "../../../etc"}).encode(), "not found"),
    ("/api/chat", json.dumps({"model": "fake-a\x00", "messages": MSG}).encode(), "model"),
]


@pytest.mark.parametrize("path, body, needle", CASES)
def test_each_reported_hostile_request_is_a_4xx_naming_the_problem(hostile, path, body, needle):
    client, machine_path = hostile
    r = _send(client, path, body)
    _assert_handled(r, machine_path)
    assert 400 <= r.status_code < 500 and needle in r.text


def test_hostile_keep_alive_leaves_no_lasting_fault(hostile):
    client, _ = hostile
    for value in (1e18, -1e300, "999999999h", float("nan")):
        client.post("/api/chat", content=json.dumps({"model": "fake-a", "keep_alive": value, "messages": MSG}),
                    headers={"content-type": "application/json"})
    for path in ("/api/ps", "/v1/models", "/api/tags", "/v1/models/loaded"):
        assert client.get(path).status_code == 200


# ---- property-based: random bodies over every route -----------------------------------------------------------
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["\ud800", "fake-a", "fake-b", "demo", "../x", "", " ", "json", "high", "auto", "required",
                     "none", "-1", "5m", "user", "assistant", "tool", "system", "function", "enabled"]))
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                       max_leaves=12)
_MESSAGE = st.fixed_dictionaries({}, optional={
    "role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool", "developer"]), _SCALARS),
    "content": _VALUES, "tool_calls": _VALUES, "tool_call_id": _VALUES, "tool_name": _VALUES,
    "thinking": _VALUES, "images": _VALUES})
_KEYS = ["input", "encoding_format", "dimensions", "truncate", "images", "max_tokens", "max_completion_tokens",
         "temperature", "top_p", "top_k", "min_p", "seed", "stop", "n",
         "keep_alive", "tools", "tool_choice", "response_format", "format", "think", "thinking", "reasoning_effort",
         "options", "system", "prompt", "raw", "stop_sequences", "parallel_tool_calls", "stream_options",
         "repetition_penalty", "ignore_eos", "name", "insecure"]
_BODIES = st.fixed_dictionaries(
    {"model": st.one_of(st.sampled_from(["fake-a", "fake-b"]), _SCALARS)},
    optional={"messages": st.one_of(st.lists(_MESSAGE, max_size=3), _VALUES), "stream": st.booleans(),
              **{k: _VALUES for k in _KEYS}})


@pytest.mark.parametrize("path", ROUTES)
def test_random_bodies_never_cause_a_server_error(hostile, path):
    client, machine_path = hostile

    @settings(max_examples=60, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(body=_BODIES)
    def check(body):
        _assert_handled(_send(client, path, json.dumps(body).encode()), machine_path)

    check()


# ---- bodies are limited while they stream in -----------------------------------------------------------------
def test_an_oversized_chunked_body_is_refused_before_it_is_read_whole(models_dir):
    """A chunked body (no Content-Length) is answered 413 once it passes the limit: the server does not wait for
    (or hold) the rest. Sent over a raw socket, so we see how much had gone out when the answer came."""
    import select
    import socket

    from .server import Server

    with Server(models_dir, max_request_bytes=1_000_000) as srv:
        sock = socket.create_connection(("127.0.0.1", srv.settings.port))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        sent, answer, chunk = 0, b"", b"%x\r\n%s\r\n" % (65536, b" " * 65536)
        try:
            while sent < 200 * 2**20 and not answer:  # 200 MiB, if nothing answered
                sock.sendall(chunk)
                sent += 65536
                if select.select([sock], [], [], 0)[0]:
                    answer = sock.recv(65536)
        except (BrokenPipeError, ConnectionResetError):
            answer = answer or sock.recv(65536)
        finally:
            sock.close()
        assert answer.startswith(b"HTTP/1.1 413") and sent < 20 * 2**20
        declared = httpx.post(srv.url + "/api/chat", content=b"{" + b" " * 2_000_000 + b"}")
        assert declared.status_code == 413


# ---- disconnects, long prompts, time limits, SIGTERM ---------------------------------------------------------
def test_a_non_streaming_client_that_disconnects_frees_its_place(server):
    """The job stops at the next step instead of decoding to max_tokens for nobody."""
    import time

    body = {"model": "tiny-qwen3", "messages": MSG, "max_tokens": 1900, "ignore_eos": True,
            "reasoning_effort": "none"}
    httpx.post(server.url + "/v1/chat/completions", json={**body, "max_tokens": 1})  # loaded
    runner = server.manager.models["tiny-qwen3:s-f32"].runner
    before = runner.stats().get("cancelled", 0)
    started = time.perf_counter()
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/chat/completions", json=body, timeout=0.3)
    assert server.wait(lambda: runner.stats().get("cancelled", 0) > before, timeout=5)
    assert runner.stats()["running"] == 0 and time.perf_counter() - started < 1.5


def test_a_prompt_longer_than_the_context_is_refused_before_any_work(server):
    chat = {"model": "tiny-coder", "messages": [{"role": "user", "content": "the cat sat on the mat " * 400}]}
    r = httpx.post(server.url + "/v1/chat/completions", json=chat)  # over its 2,048 tokens
    assert r.status_code == 400 and "2048 tokens of context" in r.json()["error"]["message"]
    chat["messages"][0]["content"] = "the cat sat on the mat " * 100
    r = httpx.post(server.url + "/v1/chat/completions", json={**chat, "max_tokens": 1600})
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
    r = httpx.post(server.url + "/v1/chat/completions", json={**chat, "ignore_eos": True}, timeout=60)
    assert r.status_code == 200  # max_tokens not given: the answer fills the room left
    assert r.json()["usage"]["total_tokens"] == 2048 and r.json()["choices"][0]["finish_reason"] == "length"


def test_the_generation_timeout_covers_prompt_processing(server):
    """A deadline that passes while the prompt is prefilled (in small chunks here) ends the job there."""
    import asyncio

    from service.engine.job import ModelTraits, build_job
    from service.engine.request import GenerationRequest
    from service.errors import GenerationTimeout
    from service.runners import LoadSpec
    from service.runners.mlx_lm import open_runner

    httpx.post(server.url + "/v1/chat/completions", json={"model": "tiny", "messages": MSG, "max_tokens": 1})  # built

    async def main():
        runner = await open_runner(LoadSpec(name="t", path=server.manager.resolve("tiny").path, prefill_step_size=4))
        try:
            job = build_job(GenerationRequest(model="t", prompt="the cat sat on the mat " * 150, max_tokens=5),
                            ModelTraits("t"), max_tokens=100, timeout=0.03)
            with pytest.raises(GenerationTimeout):
                async for _ in runner.submit(job.start()):
                    pass
            return runner.stats()
        finally:
            await runner.close()

    stats = asyncio.run(main())
    assert stats["timed_out"] == 1 and stats.get("tokens", 0) == 0  # it never got to a first token


def test_sigterm_stops_a_busy_server_within_seconds(tmp_path, models_dir):
    import signal
    import subprocess
    import sys
    import threading
    import time

    from .server import TEST_CATALOG, free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--models-dir",
                             str(models_dir), "--catalog-path", str(TEST_CATALOG), "--default-model", "tiny-qwen3"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if any(m["id"].startswith("tiny-qwen3") for m in httpx.get(url + "/v1/models/loaded").json()["data"]):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        body = {"model": "tiny-qwen3", "messages": MSG, "max_tokens": 1900, "ignore_eos": True, "stream": True,
                "reasoning_effort": "none"}
        ended = []

        def client():
            with contextlib.suppress(httpx.HTTPError):  # the stream is cut by the shutdown: expected
                httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
            ended.append(True)

        busy = [threading.Thread(target=client) for _ in range(3)]
        for t in busy:
            t.start()
        time.sleep(0.3)
        started = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        assert time.perf_counter() - started < 10
        for t in busy:
            t.join(timeout=10)
        assert len(ended) == 3  # no client left hanging on a dead server
    finally:
        if proc.poll() is None:
            proc.kill()
