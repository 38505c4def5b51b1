"""Serving overhead, side by side in one run: raw mlx_lm.stream_generate in-process, mlx_lm.server (the peer),
and MLX Service through its OpenAI, Anthropic and Ollama APIs - same generated models, greedy, same prompt,
same number of tokens (end-of-sequence is banned everywhere, so every run decodes exactly N tokens).

Reports decode tokens/s, time to first token (loaded model) and peak RSS, each as a ratio to raw, plus load
time against mlx_lm.load. Targets: >= 0.90 of raw tokens/s on the tiny model, >= 0.98 on the 0.5B one, TTFT
within 5 ms of raw, load within 10% of mlx_lm.load.
Run: `make bench` or `.venv/bin/python bench/serve.py [--models tiny]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, build, machine, table, write  # noqa: E402

MODELS = {"tiny": ("bench-serve:tiny-f32", 256), "0.5b": ("bench-serve:0.5b-f32", 48)}
MESSAGES = [{"role": "user", "content": "Write a short story about a cat who learns to read."}]
REPEAT = 3


def rss_peak(pid: int | None = None) -> int:
    status = Path(f"/proc/{pid or 'self'}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) * 1024


def raw(path: str, tokens: int) -> dict:
    """In-process baseline (runs in its own process, so its RSS is its own)."""
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_sampler

    loads, model, tokenizer = [], None, None
    for _ in range(REPEAT + 1):  # the first load pays one-time imports and cold files; compare warm loads
        if model is not None:
            model = tokenizer = None  # free the previous copy first, as a server's unload does
            gc.collect()
            mx.clear_cache()
        start = time.perf_counter()
        model, tokenizer = mlx_lm.load(path)
        mx.eval(model.parameters())
        loads.append(time.perf_counter() - start)
    load = statistics.median(loads[1:])
    eos = mx.array(list(tokenizer.eos_token_ids))

    def ban(_tokens, logits):
        logits[..., eos] = -mx.inf
        return logits

    runs = []
    for _ in range(REPEAT + 1):
        t0 = time.perf_counter()  # like a server, raw pays for the chat template and tokenization too
        prompt = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
        ids = mx.array(tokenizer.encode(prompt, add_special_tokens=False))
        stamps = [time.perf_counter() for _ in stream_generate(
            model, tokenizer, ids, max_tokens=tokens, sampler=make_sampler(0.0), logits_processors=[ban])]
        runs.append((stamps[0] - t0, (len(stamps) - 1) / (stamps[-1] - stamps[0])))
    runs = runs[1:]  # the first run warms up kernels
    return {"load_s": load, "ttft_s": statistics.median(r[0] for r in runs),
            "tps": statistics.median(r[1] for r in runs), "rss": rss_peak()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up")


def timed_stream(client: httpx.Client, method: str, url: str, body: dict, headers: dict,
                 parse) -> tuple[float, float, int]:
    """(time to first token, decode tokens/s, tokens) measured by the client (one kept-alive connection, as
    SDK clients use; a fresh httpx client per request costs tens of milliseconds on its own)."""
    stamps, count = [], 0
    t0 = time.perf_counter()
    with client.stream(method, url, json=body, headers=headers, timeout=600) as r:
        for line in r.iter_lines():
            got = parse(line)
            if got is None:
                continue
            text, final = got
            if text:
                stamps.append(time.perf_counter())
            if final is not None:
                count = final
    return stamps[0] - t0, (count - 1) / (stamps[-1] - stamps[0]), count


def openai_parse(line: str):
    if not line.startswith("data: ") or line == "data: [DONE]":
        return None
    data = json.loads(line[6:])
    usage = (data.get("usage") or {}).get("completion_tokens")
    text = data["choices"][0]["delta"].get("content") if data.get("choices") else None
    return text, usage


def anthropic_parse(line: str):
    if not line.startswith("data: "):
        return None
    data = json.loads(line[6:])
    if data["type"] == "content_block_delta":
        return data["delta"]["text"], None
    if data["type"] == "message_delta":
        return None, data["usage"]["output_tokens"]
    return None


def ollama_parse(line: str):
    if not line.strip():
        return None
    data = json.loads(line)
    return data["message"]["content"], data.get("eval_count") if data.get("done") else None


def measure_api(url: str, api: str, model: str, tokens: int, eos_ids: list[int]) -> dict:
    if api == "openai":
        body = {"model": model, "messages": MESSAGES, "max_tokens": tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True}
        args = ("POST", url + "/v1/chat/completions", body, {}, openai_parse)
    elif api == "peer":
        body = {"model": "default_model", "messages": MESSAGES, "max_tokens": tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True},
                "logit_bias": {str(i): -1e9 for i in eos_ids}}
        args = ("POST", url + "/v1/chat/completions", body, {}, openai_parse)
    elif api == "anthropic":
        body = {"model": model, "messages": MESSAGES, "max_tokens": tokens, "stream": True, "ignore_eos": True}
        args = ("POST", url + "/v1/messages", body, {"anthropic-version": "2023-06-01"}, anthropic_parse)
    else:
        body = {"model": model, "messages": MESSAGES, "stream": True,
                "options": {"num_predict": tokens, "temperature": 0, "ignore_eos": True}}
        args = ("POST", url + "/api/chat", body, {}, ollama_parse)
    with httpx.Client() as client:
        timed_stream(client, *args)  # warm-up (and, for the peer, its lazy load)
        runs = [timed_stream(client, *args) for _ in range(REPEAT)]
    counts = {r[2] for r in runs}
    return {"ttft_s": statistics.median(r[0] for r in runs), "tps": statistics.median(r[1] for r in runs),
            "tokens": sorted(counts)}


def bench_model(size: str, models_dir: Path) -> list[dict]:
    tag, tokens = MODELS[size]
    from service.locate import generated_dir

    _, path = build(tag, lambda entry: generated_dir(models_dir, entry))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, __file__, "--raw", str(path), str(tokens)], capture_output=True,
                          text=True, env=env, check=True)
    base = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = [{"model": size, "runner": "raw mlx_lm.stream_generate", **base, "tokens": [tokens]}]
    from transformers import AutoTokenizer

    eos_ids = [AutoTokenizer.from_pretrained(str(path)).convert_tokens_to_ids("<|im_end|>")]

    port = free_port()
    peer = subprocess.Popen([sys.executable, "-m", "mlx_lm", "server", "--model", str(path), "--port", str(port),
                             "--log-level", "WARNING"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_up(f"http://127.0.0.1:{port}/health", peer)
        rows.append({"model": size, "runner": "mlx_lm.server", **measure_api(
            f"http://127.0.0.1:{port}", "peer", tag, tokens, eos_ids), "rss": rss_peak(peer.pid)})
    finally:
        peer.terminate()
        peer.wait()

    port = free_port()
    ours = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--models-dir",
                             str(models_dir), "--catalog-path", str(HERE / "catalog"), "--default-model", tag],
                            env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_up(url + "/", ours)
        deadline = time.time() + 600  # let the start-up preload finish (imports included), then time a reload
        while tag not in [m["id"] for m in httpx.get(url + "/v1/models/loaded").json()["data"]]:
            if time.time() > deadline:
                raise RuntimeError(f"{tag} was not preloaded")
            time.sleep(0.2)
        loads = []
        with httpx.Client(timeout=600) as client:
            for _ in range(REPEAT):
                client.post(url + f"/v1/models/{tag}/unload")
                t0 = time.perf_counter()
                client.post(url + f"/v1/models/{tag}/load").raise_for_status()
                loads.append(time.perf_counter() - t0)
        load = statistics.median(loads)
        for api in ("openai", "anthropic", "ollama"):
            row = {"model": size, "runner": f"mlx-service ({api})", **measure_api(url, api, tag, tokens, eos_ids)}
            row["load_s"] = load if api == "openai" else None
            rows.append(row)
        for row in rows[-3:]:
            row["rss"] = rss_peak(ours.pid)
    finally:
        ours.terminate()
        ours.wait()
    for row in rows:
        row["tps_ratio"] = round(row["tps"] / base["tps"], 3)
        row["ttft_delta_ms"] = round((row["ttft_s"] - base["ttft_s"]) * 1e3, 2)
        row["rss_ratio"] = round(row["rss"] / base["rss"], 2)
        row["load_ratio"] = round(row["load_s"] / base["load_s"], 3) if row.get("load_s") else None
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--raw", nargs=2, metavar=("PATH", "TOKENS"))
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    args = parser.parse_args()
    if args.raw:
        print(json.dumps(raw(args.raw[0], int(args.raw[1]))))
        return
    models_dir = RESULTS / "serve-models"
    rows = [row for size in args.models for row in bench_model(size, models_dir)]
    shown = [{**r, "tps": round(r["tps"], 1), "ttft_ms": round(r["ttft_s"] * 1e3, 2),
              "rss_MiB": round(r["rss"] / 2**20), "load_ms": round(r["load_s"] * 1e3, 1) if r.get("load_s") else ""}
             for r in rows]
    columns = ["model", "runner", "tps", "tps_ratio", "ttft_ms", "ttft_delta_ms", "rss_MiB", "rss_ratio", "load_ms",
               "load_ratio"]
    text = table(shown, columns)
    print(text)
    path = write("serve", {"rows": rows})
    print(f"\nwrote {path.relative_to(ROOT)}")
    readme = HERE / "README.md"
    m = machine()
    section = (f"## bench/serve.py ({m['date']}, {m['machine']}, {m['cpus']} CPUs, {m['platform']})\n\n"
               f"```\n{text}\n```\n")
    old = readme.read_text() if readme.exists() else "# Benchmarks\n\n"
    marker = "## bench/serve.py"
    head = old.split(marker)[0].rstrip() + "\n\n"
    tail = old.split(marker, 1)[1].split("\n## ", 1)[1] if marker in old and "\n## " in old.split(marker, 1)[1] else ""
    readme.write_text(head + section + (("\n## " + tail) if tail else ""))


if __name__ == "__main__":
    main()
