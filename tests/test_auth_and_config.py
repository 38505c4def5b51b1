"""API keys (both header styles, constant-time compare, `/` stays open) and settings errors at start."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import anthropic
import httpx
import ollama
import openai
import pytest

from .server import Server

MSG = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def secured(models_dir):
    with Server(models_dir, api_keys="k-one, k-two") as srv:
        yield srv


def test_openai_bearer(secured):
    ok = openai.OpenAI(base_url=secured.url + "/v1", api_key="k-two", max_retries=0)
    assert ok.chat.completions.create(model="tiny", messages=MSG, max_tokens=2).usage.completion_tokens == 2
    bad = openai.OpenAI(base_url=secured.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as err:
        bad.models.list()
    assert err.value.code == "invalid_api_key"


def test_anthropic_x_api_key(secured):
    ok = anthropic.Anthropic(base_url=secured.url, api_key="k-one", max_retries=0)
    assert ok.messages.create(model="tiny", max_tokens=2, messages=MSG).usage.output_tokens == 2
    bad = anthropic.Anthropic(base_url=secured.url, api_key="nope", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as err:
        bad.messages.create(model="tiny", max_tokens=2, messages=MSG)
    assert err.value.body["error"]["type"] == "authentication_error"


def test_ollama_with_and_without_key(secured):
    with pytest.raises(ollama.ResponseError) as err:
        ollama.Client(host=secured.url).list()
    assert err.value.status_code == 401
    client = ollama.Client(host=secured.url, headers={"Authorization": "Bearer k-one"})
    assert isinstance(client.list().models, list)


def test_root_stays_open(secured):
    assert httpx.get(secured.url + "/").status_code == 200
    assert httpx.get(secured.url + "/api/version").status_code == 401


def run_serve(*args, env=None):
    return subprocess.run([sys.executable, "-m", "service.cli", "serve", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


@pytest.mark.parametrize(("args", "env", "needle"), [
    (["--port", "99999"], {}, "invalid setting port"),
    ([], {"MLX_SERVICE_MAX_LOADED_MODELS": "zero"}, "invalid setting max_loaded_models"),
    ([], {"MLX_SERVICE_KEEP_ALIVE": "soon"}, "invalid setting keep_alive"),
    ([], {"MLX_SERVICE_MAX_MEMORY_GB": "-1"}, "invalid setting max_memory_gb"),
    (["--batch-size", "0"], {}, "invalid setting batch_size"),
    ([], {"MLX_SERVICE_PREFILL_STEP_SIZE": "lots"}, "invalid setting prefill_step_size"),
])
def test_invalid_settings_stop_the_start_with_one_line(args, env, needle):
    proc = run_serve(*args, env=env)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr


def test_flags_beat_environment():
    from service.config import load_settings

    os.environ["MLX_SERVICE_PORT"] = "9001"
    try:
        assert load_settings().port == 9001
        assert load_settings(port=9002).port == 9002
    finally:
        del os.environ["MLX_SERVICE_PORT"]


def test_serve_with_defaults_falls_back_to_the_generated_demo(tmp_path):
    """What `make run` does on a machine without the default model: serve the demo, offline."""
    from .server import free_port

    port = free_port()
    env = {**os.environ, "MLX_SERVICE_MODELS_DIR": str(tmp_path), "MLX_SERVICE_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "service.cli", "serve"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if any(m["name"] == "demo:tiny-f32" for m in httpx.get(url + "/api/ps").json()["models"]):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        reply = httpx.post(url + "/api/generate", json={"model": "demo", "prompt": "hi", "stream": False,
                                                       "options": {"num_predict": 3}}).json()
        assert reply["done"] and reply["eval_count"] == 3
    finally:
        proc.terminate()
        err = proc.communicate(timeout=30)[1]
    assert "qwen3:0.6b-4bit is not downloaded; serving the generated demo model instead" in err
    assert (tmp_path / "generated" / "demo-tiny-f32" / "config.json").is_file()
