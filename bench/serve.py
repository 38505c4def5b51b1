"""Serving overhead, side by side in one run: raw mlx_lm.stream_generate in-process, mlx_lm.server (the peer),
and MLX Service through its OpenAI, Anthropic and Ollama APIs - same generated models, greedy, same prompt,
same number of tokens (end-of-sequence is banned everywhere, so every run decodes exactly N tokens).

All runners stay up for the whole run and are measured in interleaved rounds, in a new random order each
round (so no runner always follows the one whose threads are still winding down); every ratio is the median
of per-round ratios against the raw run of the same round, with a 95% bootstrap interval. On a small, shared
machine the speed drifts by tens of percent over a minute, and pairing the runs cancels part of that. Every
request gets its own prompt of the same token length, so no server answers from its prefix cache what raw has
to compute. Time to first token is measured on one-token requests: with random weights, how many tokens pass
before the first printable text is luck of the prompt, and one token makes every runner do the same work.

Reports decode tokens/s, time to first token (loaded model) and peak RSS, each against raw, plus load time
against mlx_lm.load (as the client sees it over HTTP and as the server measured it). Targets: >= 0.90 of raw
tokens/s on the tiny model, >= 0.98 on the 0.5B one, TTFT within 5 ms of raw, load within 10% of mlx_lm.load.
Run: `make bench` or `.venv/bin/python bench/serve.py [--models tiny] [--rounds N]`.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, build, table, update_readme, write  # noqa: E402

# tag, tokens decoded per run, measured rounds, load rounds
MODELS = {"tiny": ("bench-serve:tiny-f32", 128, 48, 25), "0.5b": ("bench-serve:0.5b-f32", 24, 10, 5)}


def prompts(tokenizer, count: int) -> list[list[dict]]:
    """`count` different chats that are the same number of tokens long: every request gets its own, so no
    server serves one from its prefix cache while raw cannot, and every runner prefills the same amount."""
    def chat(k: int) -> list[dict]:
        return [{"role": "user", "content": f"{k}. Write a short story about a cat who learns to read."}]

    def length(k: int) -> int:
        text = tokenizer.apply_chat_template(chat(k), add_generation_prompt=True, tokenize=False)
        return len(tokenizer.encode(text, add_special_tokens=False))

    want, out, k = length(100), [], 100
    while len(out) < count:
        if k == 1000:  # longer numbers are other token counts
            raise ValueError(f"only {len(out)} prompts of {want} tokens; {count} were asked for")
        if length(k) == want:
            out.append(chat(k))
        k += 1
    return out


def rss_peak(pid: int | None = None) -> int:
    status = Path(f"/proc/{pid or 'self'}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM"))) * 1024


def timings(t0: float, stamps: list[float], count: int) -> dict:
    """The same arithmetic for every runner. `stamps`: when each piece of text became visible. A streaming
    detokenizer shows a token's text only once it is whole (often a few tokens later), so time to first token
    is time to first text, and decode speed is counted between the first and the last text."""
    tps = (count - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else None
    return {"ttft_s": stamps[0] - t0, "tps": tps, "tokens": count}


# ---- raw: a child process that answers one JSON command per line ------------------------------------------
def raw_main(path: str) -> None:
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.generate import stream_generate
    from mlx_lm.sample_utils import make_sampler

    model, tokenizer = mlx_lm.load(path)  # pays the one-time imports and cold files; later loads are timed
    mx.eval(model.parameters())
    eos = mx.array(list(tokenizer.eos_token_ids))

    def ban(_tokens, logits):
        logits[..., eos] = -mx.inf
        return logits

    for line in sys.stdin:
        op = json.loads(line)
        if op["op"] == "load":
            model = tokenizer = None  # free the previous copy first, as a server's unload does
            gc.collect()
            mx.clear_cache()
            start = time.perf_counter()
            model, tokenizer = mlx_lm.load(path)
            mx.eval(model.parameters())
            out = {"load_s": time.perf_counter() - start}
        elif op["op"] == "gen":
            t0 = time.perf_counter()  # like a server, raw pays for the chat template and tokenization too
            prompt = tokenizer.apply_chat_template(op["messages"], add_generation_prompt=True, tokenize=False)
            ids = mx.array(tokenizer.encode(prompt, add_special_tokens=False))
            count, stamps = 0, []  # stamped when text appears, as a client sees it (see Http.generate)
            for response in stream_generate(model, tokenizer, ids, max_tokens=op["tokens"],
                                            sampler=make_sampler(0.0), logits_processors=[ban]):
                count += 1
                if response.text:
                    stamps.append(time.perf_counter())
            out = timings(t0, stamps, count)
        else:
            out = {"rss": rss_peak()}
        print(json.dumps(out), flush=True)


class Raw:
    def __init__(self, path: Path, env: dict):
        self.proc = subprocess.Popen([sys.executable, __file__, "--raw", str(path)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)

    def call(self, **op) -> dict:
        self.proc.stdin.write(json.dumps(op) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the raw runner exited")
        return json.loads(line)

    def generate(self, msgs: list[dict], tokens: int) -> dict:
        return self.call(op="gen", messages=msgs, tokens=tokens)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


# ---- HTTP runners -----------------------------------------------------------------------------------------
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


def released_together(work: list) -> float:
    """Run each `work(go)` on a thread of its own; each sets itself up and waits at `go`, so all start at once.
    Returns when they were released (the time measured is the server's, not the clients' set-up)."""
    go = threading.Barrier(len(work) + 1)
    threads = [threading.Thread(target=w, args=(go,)) for w in work]
    for t in threads:
        t.start()
    go.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    return start


def consume(lines, parse) -> tuple[list[float], list[str], int]:
    """One streamed response, read as a client would: when each piece of text arrived, the pieces, and the
    token count the server reported at the end."""
    stamps, texts, count = [], [], 0
    for line in lines:
        got = parse(line)
        if got is None:
            continue
        text, final = got
        if text:
            stamps.append(time.perf_counter())
            texts.append(text)
        if final is not None:
            count = final
    return stamps, texts, count


class Http:
    """One API of one server, over one kept-alive connection (as SDK clients use; a fresh connection per
    request costs milliseconds on its own)."""

    def __init__(self, url: str, api: str, model: str, eos_ids: list[int]):
        self.client = httpx.Client(timeout=600)
        self.url, self.api, self.model, self.eos_ids = url, api, model, eos_ids

    def _request(self, msgs: list[dict], tokens: int):
        if self.api == "openai":
            return ("/v1/chat/completions", {
                "model": self.model, "messages": msgs, "max_tokens": tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}, "ignore_eos": True}, {}, openai_parse)
        if self.api == "peer":
            return ("/v1/chat/completions", {
                "model": "default_model", "messages": msgs, "max_tokens": tokens, "temperature": 0,
                "stream": True, "stream_options": {"include_usage": True},
                "logit_bias": {str(i): -1e9 for i in self.eos_ids}}, {}, openai_parse)
        if self.api == "anthropic":
            return ("/v1/messages", {"model": self.model, "messages": msgs, "max_tokens": tokens, "stream": True,
                                     "ignore_eos": True}, {"anthropic-version": "2023-06-01"}, anthropic_parse)
        return ("/api/chat", {"model": self.model, "messages": msgs, "stream": True,
                              "options": {"num_predict": tokens, "temperature": 0, "ignore_eos": True}},
                {}, ollama_parse)

    def generate(self, msgs: list[dict], tokens: int) -> dict:
        """Time to first token, decode tokens/s and token count, measured by the client."""
        path, body, headers, parse = self._request(msgs, tokens)
        t0 = time.perf_counter()
        with self.client.stream("POST", self.url + path, json=body, headers=headers) as r:
            r.raise_for_status()
            stamps, _, count = consume(r.iter_lines(), parse)
        return timings(t0, stamps, count)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(url: str, proc: subprocess.Popen, timeout: float = 600) -> None:
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


def start_peer(path: Path, env: dict) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mlx_lm", "server", "--model", str(path), "--port", str(port),
                             "--log-level", "WARNING"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_up(url + "/health", proc)
    return proc, url


def start_service(tag: str, models_dir: Path, env: dict,
                  launcher: tuple[str, ...] = ("-m", "service.cli")) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, *launcher, "serve", "--port", str(port), "--models-dir",
                             str(models_dir), "--catalog-path", str(HERE / "catalog"), "--default-model", tag],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_up(url + "/", proc)
    deadline = time.time() + 600  # let the start-up preload finish (imports included)
    while loaded(url, tag) is None:
        if time.time() > deadline:
            raise RuntimeError(f"{tag} was not preloaded")
        time.sleep(0.2)
    return proc, url


def loaded(url: str, tag: str) -> dict | None:
    return next((m for m in httpx.get(url + "/v1/models/loaded").json()["data"] if m["id"] == tag), None)


# ---- one model --------------------------------------------------------------------------------------------
def bench_model(size: str, models_dir: Path, rounds: int) -> list[dict]:
    tag, tokens, default_rounds, load_rounds = MODELS[size]
    rounds = rounds or default_rounds
    from transformers import AutoTokenizer

    from service.locate import generated_dir

    _, path = build(tag, lambda entry: generated_dir(models_dir, entry))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    eos_ids = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    raw = Raw(path, env)
    procs = []
    try:
        peer, peer_url = start_peer(path, env)
        procs.append(peer)
        ours, url = start_service(tag, models_dir, env)
        procs.append(ours)
        runners = {"raw mlx_lm.stream_generate": raw, "mlx_lm.server": Http(peer_url, "peer", tag, eos_ids)}
        runners |= {f"mlx-service ({api})": Http(url, api, tag, eos_ids) for api in ("openai", "anthropic", "ollama")}
        names = list(runners)
        chats = iter(prompts(tokenizer, 2 * len(names) * (rounds + 1)))
        for runner in runners.values():  # warm-up (and, for the peer, its lazy load)
            runner.generate(next(chats), tokens)
            runner.generate(next(chats), 1)
        runs: dict[str, list[dict]] = {name: [] for name in names}
        shuffle = random.Random(0).shuffle
        for r in range(rounds):
            order = list(names)
            shuffle(order)
            for name in order:
                first = runners[name].generate(next(chats), 1)
                runs[name].append({**runners[name].generate(next(chats), tokens), "ttft_s": first["ttft_s"]})
            print(f"  {size} round {r + 1}/{rounds}: " + ", ".join(
                f"{name.split()[-1]} {runs[name][-1]['tps']:.1f}" for name in names), file=sys.stderr)
        loads = measure_loads(raw, url, tag, load_rounds)
        rows = []
        for name in names:
            base, mine = runs[names[0]], runs[name]
            ratios = [m["tps"] / b["tps"] for m, b in zip(mine, base)]
            deltas = [(m["ttft_s"] - b["ttft_s"]) * 1e3 for m, b in zip(mine, base)]
            rows.append({
                "model": size, "runner": name, "tokens": sorted({m["tokens"] for m in mine}), "runs": mine,
                "tps": statistics.median(m["tps"] for m in mine), "tps_ratio": round(statistics.median(ratios), 3),
                "tps_ratio_ci": interval(ratios, 3), "ttft_s": statistics.median(m["ttft_s"] for m in mine),
                "ttft_delta_ms": round(statistics.median(deltas), 2), "ttft_delta_ms_ci": interval(deltas, 1)})
        rows[0]["rss"] = raw.call(op="rss")["rss"]
        rows[1]["rss"] = rss_peak(peer.pid)
        for row in rows[2:]:
            row["rss"] = rss_peak(ours.pid)
        rows[0].update(load_s=statistics.median(loads["raw"]), load_ratio=1.0, loads=loads)
        server = [s / b for s, b in zip(loads["server"], loads["raw"])]
        rows[2].update(load_s=statistics.median(loads["http"]),
                       load_ratio=round(statistics.median(h / b for h, b in zip(loads["http"], loads["raw"])), 3),
                       load_server_s=statistics.median(loads["server"]),
                       load_server_ratio=round(statistics.median(server), 3),
                       load_server_ratio_ci=interval(server, 3))
        for row in rows:
            row["rss_ratio"] = round(row["rss"] / rows[0]["rss"], 2)
        return rows
    finally:
        raw.close()
        for proc in procs:
            proc.terminate()
            proc.wait()


def interval(values: list[float], digits: int) -> list[float]:
    """95% bootstrap interval of the median: how far this run's noise could have moved it."""
    pick, n = random.Random(1).choices, len(values)
    medians = sorted(statistics.median(pick(values, k=n)) for _ in range(2000))
    return [round(medians[50], digits), round(medians[1949], digits)]


def measure_loads(raw: Raw, url: str, tag: str, rounds: int) -> dict[str, list[float]]:
    """Reload timings, interleaved: mlx_lm.load in the raw process; the service's load as the HTTP client sees
    it and as the server measured it (the same load, without the request's round trip)."""
    out = {"raw": [], "http": [], "server": []}

    def ours(client: httpx.Client) -> None:
        client.post(url + f"/v1/models/{tag}/unload").raise_for_status()
        t0 = time.perf_counter()
        client.post(url + f"/v1/models/{tag}/load").raise_for_status()
        out["http"].append(time.perf_counter() - t0)
        out["server"].append(loaded(url, tag)["load_seconds"])

    with httpx.Client(timeout=600) as client:
        for r in range(rounds):  # alternate who goes first
            if r % 2:
                ours(client)
            out["raw"].append(raw.call(op="load")["load_s"])
            if not r % 2:
                ours(client)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--raw", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=0, help="measured rounds per model (default: per model)")
    args = parser.parse_args()
    if args.raw:
        raw_main(args.raw)
        return
    models_dir = RESULTS / "serve-models"
    rows = [row for size in args.models for row in bench_model(size, models_dir, args.rounds)]

    def ms(seconds):
        return round(seconds * 1e3, 1) if seconds is not None else ""

    def ci(row, key):
        return f"{row[key]} [{row[key + '_ci'][0]}, {row[key + '_ci'][1]}]" if key + "_ci" in row else row[key]

    shown = [{**r, "tps": round(r["tps"], 1 if r["tps"] >= 100 else 2), "tps_ratio": ci(r, "tps_ratio"),
              "ttft_delta_ms": ci(r, "ttft_delta_ms"), "ttft_ms": round(r["ttft_s"] * 1e3, 2),
              "rss_MiB": round(r["rss"] / 2**20), "load_ms": ms(r.get("load_s")),
              "server_load_ms": ms(r.get("load_server_s")),
              "load_ratio": r.get("load_ratio", ""),
              "server_load_ratio": ci(r, "load_server_ratio") if "load_server_ratio" in r else ""}
             for r in rows]
    columns = ["model", "runner", "tps", "tps_ratio", "ttft_ms", "ttft_delta_ms", "rss_MiB", "rss_ratio", "load_ms",
               "load_ratio", "server_load_ms", "server_load_ratio"]
    text = table(shown, columns)
    print(text)
    path = write("serve", {"rows": rows})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/serve.py", text)


if __name__ == "__main__":
    main()
