"""Vision, embeddings and speech to text through the official SDKs, on generated models of each kind (a Qwen2-VL,
a BERT encoder, a Whisper whose decoder is scripted to say "hello world"), and every refusal in between."""

from __future__ import annotations

import base64
import io
import math
import shutil
import struct
import threading
import wave
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import anthropic
import httpx
import numpy as np
import ollama
import openai
import pytest
from PIL import Image

from .conformance import assert_documented
from .server import Server

TEXTS = ["the cat sat", "a river of light and stone under the moon", "yes"]


@pytest.fixture(scope="module")
def oai(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)


def png(size=(64, 64), color=(200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "PNG")
    return buf.getvalue()


def wav(seconds: float, rate: int = 16_000, channels: int = 1) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 440 * t) * 32767).astype(np.int16)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.repeat(tone, channels).tobytes())
    return buf.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


# ---- embeddings ---------------------------------------------------------------------------------------------
def test_openai_embeddings_are_pooled_as_the_catalog_says_and_batching_changes_nothing(oai, server):
    r = oai.embeddings.create(model="tiny-embed", input=TEXTS)
    vectors = [d.embedding for d in r.data]
    assert [d.index for d in r.data] == [0, 1, 2] and all(len(v) == 32 for v in vectors)
    assert all(abs(math.fsum(x * x for x in v) - 1) < 1e-5 for v in vectors)  # normalised
    for text, batched in zip(TEXTS, vectors):  # padding in a batch does not change a shorter input's vector
        alone = oai.embeddings.create(model="tiny-embed", input=text).data[0].embedding
        assert max(abs(a - b) for a, b in zip(alone, batched)) < 1e-5
    runner = server.manager.models["tiny-embed:s-f32"].runner
    ids = runner.tokenizer(TEXTS[1])["input_ids"]
    assert r.usage.prompt_tokens == sum(len(runner.tokenizer(t)["input_ids"]) for t in TEXTS)
    import mlx.core as mx  # mean pooling (the catalog's), computed by hand from the model's token states

    states = runner.model(mx.array([ids]), attention_mask=mx.ones((1, len(ids)))).last_hidden_state[0]
    mean = states.mean(axis=0)
    expected = (mean / mx.linalg.norm(mean)).tolist()
    assert max(abs(a - b) for a, b in zip(expected, vectors[1])) < 1e-5
    by_ids = oai.embeddings.create(model="tiny-embed", input=[ids]).data[0].embedding  # token arrays
    assert max(abs(a - b) for a, b in zip(by_ids, vectors[1])) < 1e-5


def test_dimensions_and_base64(oai, server):
    short = oai.embeddings.create(model="tiny-embed", input="the cat", dimensions=8).data[0].embedding
    assert len(short) == 8 and abs(math.fsum(x * x for x in short) - 1) < 1e-5  # Matryoshka: cut, renormalised
    raw = httpx.post(server.url + "/v1/embeddings", json={"model": "tiny-embed", "input": "the cat",
                                                          "encoding_format": "base64"}).json()
    packed = base64.b64decode(raw["data"][0]["embedding"])
    floats = struct.unpack(f"<{len(packed) // 4}f", packed)
    plain = oai.embeddings.create(model="tiny-embed", input="the cat", encoding_format="float").data[0].embedding
    assert max(abs(a - b) for a, b in zip(floats, plain)) < 1e-6


def test_ollama_embed_and_the_legacy_endpoint(server):
    client = ollama.Client(host=server.url)
    e = client.embed(model="tiny-embed", input=TEXTS[:2])
    assert len(e.embeddings) == 2 and len(e.embeddings[0]) == 32 and e.prompt_eval_count > 4
    legacy = client.embeddings(model="tiny-embed", prompt=TEXTS[0]).embedding
    assert max(abs(a - b) for a, b in zip(legacy, e.embeddings[0])) < 1e-5
    long = " ".join(["river"] * 300)  # past the 128 tokens this model reads
    assert len(client.embed(model="tiny-embed", input=long).embeddings[0]) == 32  # truncated, as Ollama does
    r = httpx.post(server.url + "/api/embed", json={"model": "tiny-embed", "input": long, "truncate": False})
    assert r.status_code == 400 and "tokens" in r.json()["error"]


@pytest.mark.parametrize("path, body, needle", [
    ("/v1/embeddings", {"model": "tiny", "input": "x"}, "is a text model: it cannot embed"),
    ("/v1/embeddings", {"model": "tiny-embed", "input": ""}, "empty"),
    ("/v1/embeddings", {"model": "tiny-embed", "input": ["x"] * 2049}, "at most 2048"),
    ("/v1/embeddings", {"model": "tiny-embed", "input": [1, 2, 10**6]}, "vocabulary"),
    ("/v1/embeddings", {"model": "tiny-embed", "input": "x", "dimensions": 64}, "at most 32"),
    ("/v1/embeddings", {"model": "tiny-embed", "input": "x", "encoding_format": "int8"}, "encoding_format"),
    ("/v1/embeddings", {"model": "tiny-embed", "input": {"a": 1}}, "input must be"),
    ("/v1/chat/completions", {"model": "tiny-embed", "messages": [{"role": "user", "content": "x"}]},
     "is an embedding model: it cannot generate text"),
    ("/api/embed", {"model": "tiny-whisper", "input": "x"}, "is a speech model"),
])
def test_embedding_refusals(server, path, body, needle):
    r = httpx.post(server.url + path, json=body)
    assert r.status_code == 400 and needle in r.text


# ---- speech to text -----------------------------------------------------------------------------------------
def test_openai_transcription_in_every_format(oai):
    r = oai.audio.transcriptions.create(model="tiny-whisper", file=("tone.wav", wav(1.0)))
    assert r.text == "hello world"  # the scripted decoder: the weights were really loaded and decoded
    verbose = oai.audio.transcriptions.create(model="tiny-whisper", file=("tone.wav", wav(1.0)),
                                              response_format="verbose_json", timestamp_granularities=["segment"])
    assert verbose.language == "en" and abs(verbose.duration - 1.0) < 1e-3
    assert [(s.start, s.end, s.text.strip()) for s in verbose.segments] == [(0.0, 1.0, "hello world")]
    srt = oai.audio.transcriptions.create(model="tiny-whisper", file=("tone.wav", wav(1.0)), response_format="srt")
    assert srt.strip() == "1\n00:00:00,000 --> 00:00:01,000\nhello world"
    vtt = oai.audio.transcriptions.create(model="tiny-whisper", file=("tone.wav", wav(1.0)), response_format="vtt")
    assert vtt.startswith("WEBVTT") and "00:00:00.000 --> 00:00:01.000" in vtt
    text = oai.audio.transcriptions.create(model="tiny-whisper", file=("tone.wav", wav(1.0)), response_format="text")
    assert text.strip() == "hello world"
    words = oai.audio.transcriptions.create(model="tiny-whisper", file=("tone.wav", wav(1.0)),
                                            response_format="verbose_json", timestamp_granularities=["word"])
    assert [w.word.strip() for w in words.words] == ["hello", "world"]
    assert oai.audio.translations.create(model="tiny-whisper", file=("tone.wav", wav(1.0))).text == "hello world"


def test_answers_of_every_kind_are_as_documented(server):
    document = httpx.get(server.url + "/openapi.json").text
    image = [{"role": "user", "content": [{"type": "text", "text": "Describe."},
                                          {"type": "image_url", "image_url": {"url": data_url(png())}}]}]
    jsons = [("/v1/embeddings", {"model": "tiny-embed", "input": TEXTS}),
             ("/v1/embeddings", {"model": "tiny-embed", "input": "yes", "encoding_format": "base64"}),
             ("/api/embed", {"model": "tiny-embed", "input": TEXTS}),
             ("/api/embeddings", {"model": "tiny-embed", "prompt": "yes"}),
             ("/v1/embeddings", {"model": "tiny-embed", "input": "yes", "dimensions": 0}),  # refused
             ("/v1/chat/completions", {"model": "tiny-vl", "max_tokens": 3, "messages": image})]
    statuses = []
    for path, body in jsons:
        r = httpx.post(server.url + path, json=body, timeout=120)
        statuses.append(r.status_code)
        assert_documented(r, "post", path, document)
    assert statuses == [200, 200, 200, 200, 400, 200]
    for fmt in ("json", "verbose_json", "text", "srt", "vtt"):
        r = httpx.post(server.url + "/v1/audio/transcriptions", data={"model": "tiny-whisper", "response_format": fmt},
                       files={"file": ("tone.wav", wav(1.0))}, timeout=120)
        assert r.status_code == 200
        assert_documented(r, "post", "/v1/audio/transcriptions", document)


def test_long_audio_is_decoded_in_30_second_windows_and_any_wav_is_resampled(oai):
    r = oai.audio.transcriptions.create(model="tiny-whisper", file=("long.wav", wav(65.0)),
                                        response_format="verbose_json")
    assert r.text == "hello world hello world hello world"
    assert [s.start for s in r.segments] == [0.0, 30.0, 60.0]
    stereo = oai.audio.transcriptions.create(model="tiny-whisper", file=("cd.wav", wav(1.0, 44_100, 2)))
    assert stereo.text == "hello world"


def test_transcription_refusals(server):
    url = server.url + "/v1/audio/transcriptions"

    def post(files, **data):
        return httpx.post(url, files=files, data={"model": "tiny-whisper", **data})

    r = post({"file": ("notes.wav", b"these are not samples")})
    assert r.status_code == 400 and "not WAV" in r.json()["error"]["message"]
    r = post({"file": ("talk.m4a", b"\x00\x00\x00\x18ftypM4A \x00\x00\x00\x00")})
    if shutil.which("ffmpeg") is None:
        assert r.status_code == 400 and "ffmpeg" in r.json()["error"]["message"]
    else:
        assert r.status_code == 400
    assert post({"file": ("a.wav", wav(0.5))}, response_format="mp3").status_code == 400
    for temperature in ("nan", "inf", "-1", "hot"):
        r = post({"file": ("a.wav", wav(0.5))}, temperature=temperature)
        assert r.status_code == 400 and r.json()["error"]["param"] == "temperature"
    assert post({"file": ("a.wav", wav(0.5))}, language="english!").status_code == 400
    assert httpx.post(url, data={"model": "tiny-whisper"}, files={"other": ("x", b"1")}).status_code == 400
    assert httpx.post(url, json={"model": "tiny-whisper"}).status_code == 400  # not multipart
    r = httpx.post(url, files={"file": ("a.wav", wav(0.5))}, data={"model": "tiny"})
    assert r.status_code == 400 and "is a text model: it cannot transcribe" in r.json()["error"]["message"]


def test_an_oversized_upload_is_413(models_dir):
    with Server(models_dir, max_audio_bytes=50_000) as srv:
        r = httpx.post(srv.url + "/v1/audio/transcriptions", files={"file": ("a.wav", wav(5.0))},
                       data={"model": "tiny-whisper"})
        assert r.status_code == 413 and "MLX_SERVICE_MAX_AUDIO_BYTES" in r.json()["error"]["message"]


# ---- vision -------------------------------------------------------------------------------------------------
def _ask(*images: bytes, text: str = "Describe.") -> list[dict]:
    parts = [{"type": "image_url", "image_url": {"url": data_url(i)}} for i in images]
    return [{"role": "user", "content": [{"type": "text", "text": text}, *parts]}]


def test_openai_chat_with_images_streams_and_counts_image_tokens(oai):
    plain = oai.chat.completions.create(model="tiny-vl", messages=_ask(), max_tokens=6)
    one = oai.chat.completions.create(model="tiny-vl", messages=_ask(png()), max_tokens=6)
    two = oai.chat.completions.create(model="tiny-vl", messages=_ask(png(), png((300, 200), (0, 90, 200))),
                                      max_tokens=6)
    assert plain.usage.prompt_tokens < one.usage.prompt_tokens < two.usage.prompt_tokens  # image tokens counted
    chunks = list(oai.chat.completions.create(model="tiny-vl", messages=_ask(png()), max_tokens=6, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == one.choices[0].message.content
    turns = _ask(png()) + [{"role": "assistant", "content": "red"}] + _ask(png((32, 32), (0, 200, 0)), text="And?")
    assert oai.chat.completions.create(model="tiny-vl", messages=turns, max_tokens=3).usage.prompt_tokens > \
        one.usage.prompt_tokens  # images across turns


def test_anthropic_and_ollama_images(server, oai):
    b64 = base64.b64encode(png()).decode()
    ant = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    block = {"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                       "data": b64}},
                                          {"type": "text", "text": "Describe."}]}
    m = ant.messages.create(model="tiny-vl", max_tokens=6, messages=[block])
    openai_tokens = oai.chat.completions.create(model="tiny-vl", messages=_ask(png()), max_tokens=6).usage
    assert m.usage.input_tokens == openai_tokens.prompt_tokens
    assert ant.messages.count_tokens(model="tiny-vl", messages=[block]).input_tokens == m.usage.input_tokens
    r = ollama.Client(host=server.url).chat(model="tiny-vl", messages=[
        {"role": "user", "content": "Describe.", "images": [b64]}], options={"num_predict": 4})
    assert r.prompt_eval_count == m.usage.input_tokens


def test_image_urls_are_fetched_with_limits(oai, models_dir):
    image = png()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = image if self.path == "/cat.png" else b"x" * 300_000
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    site = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{site.server_address[1]}"
    try:
        by_url = [{"role": "user", "content": [{"type": "text", "text": "Describe."},
                                               {"type": "image_url", "image_url": {"url": base + "/cat.png"}}]}]
        fetched = oai.chat.completions.create(model="tiny-vl", messages=by_url, max_tokens=6)
        inline = oai.chat.completions.create(model="tiny-vl", messages=_ask(image), max_tokens=6)
        assert fetched.choices[0].message.content == inline.choices[0].message.content
        with Server(models_dir, max_image_bytes=100_000) as small:
            big = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": base + "/big.png"}}]}]
            r = httpx.post(small.url + "/v1/chat/completions", json={"model": "tiny-vl", "messages": big})
            assert r.status_code == 413 and "MLX_SERVICE_MAX_IMAGE_BYTES" in r.json()["error"]["message"]
    finally:
        site.shutdown()


@pytest.mark.parametrize("content, status, needle", [
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}], 400, "not an image"),
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}], 400, "base64"),
    ([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}], 400, "http(s)"),
    ([{"type": "image_url", "image_url": {"url": "http://127.0.0.1:9/none.png"}}], 400, "could not fetch"),
    ([{"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}], 400, "/v1/audio/transcriptions"),
])
def test_bad_images_are_400s(server, content, status, needle):
    r = httpx.post(server.url + "/v1/chat/completions", json={"model": "tiny-vl",
                                                               "messages": [{"role": "user", "content": content}]})
    assert r.status_code == status and needle in r.text


def test_images_to_a_text_model_name_its_kind(server):
    b64 = base64.b64encode(png()).decode()
    r = httpx.post(server.url + "/api/chat", json={"model": "tiny", "messages": [
        {"role": "user", "content": "x", "images": [b64]}]})
    assert r.status_code == 400 and "is a text model: it cannot see images" in r.json()["error"]
    assert "vision" in ollama.Client(host=server.url).show("tiny-vl").capabilities


# ---- plain folders of every kind are typed by the detection rules and served ---------------------------------
def test_checkpoint_folders_of_each_kind_are_detected_and_served(models_dir, tmp_path, oai):
    oai.chat.completions.create(model="tiny-vl", messages=_ask(), max_tokens=1)  # each recipe built once
    oai.embeddings.create(model="tiny-embed", input="x")
    oai.audio.transcriptions.create(model="tiny-whisper", file=("a.wav", wav(0.5)))
    for name in ("tiny-vl", "tiny-embed", "tiny-whisper"):
        shutil.copytree(models_dir / "generated" / f"{name}-s-f32", tmp_path / "models" / f"my-{name[5:]}")
    with Server(tmp_path / "models") as srv:
        local = openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0)
        chat = local.chat.completions.create(model="my-vl", messages=_ask(png()), max_tokens=3)
        assert chat.usage.prompt_tokens > 25  # the image was seen: typed as a vision model by config.json
        assert len(local.embeddings.create(model="my-embed", input="the cat").data[0].embedding) == 32
        assert local.audio.transcriptions.create(model="my-whisper", file=("a.wav", wav(1.0))).text == "hello world"
        show = httpx.post(srv.url + "/api/show", json={"model": "my-whisper"}).json()
        assert show["details"]["format"] == "safetensors"


def test_a_client_that_leaves_stops_a_long_transcription_after_the_current_window(server):
    audio = wav(1800.0, rate=4000)  # 60 windows of 30 s, 14 MB
    httpx.post(server.url + "/v1/audio/transcriptions", files={"file": ("a.wav", wav(0.5))},
               data={"model": "tiny-whisper"})  # loaded
    runner = server.manager.models["tiny-whisper:s-f32"].runner
    before = runner.stats()["windows"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/audio/transcriptions", files={"file": ("a.wav", audio)},
                   data={"model": "tiny-whisper"}, timeout=0.3)
    assert server.wait(lambda: runner.worker.busy == 0, timeout=60)
    assert runner.stats()["windows"] - before < 60  # it stopped part-way, not after the whole file
