"""Continuous batching, side by side in one run: MLX Service (OpenAI API) and mlx_lm.server (its own batching
on) serving the same generated model, greedy, end-of-sequence banned so every request decodes exactly N tokens.

Measured, in interleaved rounds (a new random order of runners and concurrency levels each round):
- aggregate decode throughput at 1, 2, 4, 8 and 16 concurrent streams: every stream starts at once (clients
  made beforehand, released by a barrier), each with its own prompt of the same token length; aggregate =
  streams x N / wall time (requests released to last token received), the same arithmetic for both servers;
- time to first token of a one-token request that joins a batch of 7 running streams;
- greedy output of each of 8 batched requests against the same request decoded alone (MLX Service);
- afterwards, the ceiling of the 8-stream row: bare mlx-lm `BatchGenerator` in-process, same prompts and tokens.
Ratios are medians of per-round ratios with 95% bootstrap intervals, as in bench/serve.py.

Then, MLX Service alone: a short request to model B while model A generates 240 tokens (B is loaded while A
runs), against A's time; and the threading choice, measured on bare mlx-lm `BatchGenerator`s: two models
stepped on one thread in turn, against one thread each.

Targets (the engine issue): 8 concurrent >= 1.1x mlx_lm.server and >= 4x our own single stream; 16 concurrent
>= mlx_lm.server; 2 concurrent >= 1.6x single; B in under a third of A's time; batched greedy output equal to
alone (or the difference explained). Run: `make bench` or `.venv/bin/python bench/concurrency.py [--models
tiny 60m] [--rounds N]`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, build, table, update_readme, write  # noqa: E402
from serve import consume, interval, loaded, openai_parse, prompts, released_together, start_peer, start_service  # noqa: E402

# tag, tokens per request, rounds
MODELS = {"tiny": ("bench-serve:tiny-f32", 128, 6), "60m": ("bench-serve:60m-f32", 48, 5)}
LEVELS = [1, 2, 4, 8, 16]


class Server:
    """One OpenAI-style server; every stream gets its own connection, as concurrent clients have."""

    def __init__(self, name: str, url: str, body: dict):
        self.name, self.url, self.body = name, url, body

    def stream(self, msgs: list[dict], tokens: int, out: dict, client: httpx.Client | None = None,
               go: threading.Barrier | None = None) -> None:
        body = {**self.body, "messages": msgs, "max_tokens": tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        client = client or httpx.Client(timeout=600)
        if go is not None:
            go.wait()
        with client, client.stream("POST", self.url + "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            stamps, text, count = consume(r.iter_lines(), openai_parse)
        out.update(text="".join(text), tokens=count, first=stamps[0] if stamps else None, end=time.perf_counter())

    def together(self, chats: list[list[dict]], tokens: int) -> tuple[float, list[dict]]:
        """All streams at once: (aggregate tokens/s, each stream's result). The clients are made first and
        released together, so the time measured is the server's, not the clients' set-up."""
        outs = [{} for _ in chats]
        start = released_together([lambda go, c=c, o=o: self.stream(c, tokens, o, httpx.Client(timeout=600), go)
                                   for c, o in zip(chats, outs)])
        wall = max(o["end"] for o in outs) - start
        return sum(o["tokens"] for o in outs) / wall, outs

    def join_ttft(self, running: list[list[dict]], joiner: list[dict], tokens: int) -> float:
        """Time to first token of a one-token request sent once `running` streams are all decoding."""
        outs = [{} for _ in running]
        threads = [threading.Thread(target=self.stream, args=(c, tokens, o)) for c, o in zip(running, outs)]
        for t in threads:
            t.start()
        deadline = time.time() + 600
        while not all(o.get("first") or o.get("end") for o in outs) and time.time() < deadline:
            time.sleep(0.005)
        mine: dict = {}
        start = time.perf_counter()
        self.stream(joiner, 1, mine)
        for t in threads:
            t.join()
        return mine["first"] - start


def bench_model(size: str, models_dir: Path, rounds: int) -> dict:
    tag, tokens, default_rounds = MODELS[size]
    rounds = rounds or default_rounds
    from transformers import AutoTokenizer

    from service.locate import generated_dir

    _, path = build(tag, lambda entry: generated_dir(models_dir, entry))
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    peer_proc, peer_url = start_peer(path, env)
    # No prefix cache for us: every prompt is new anyway, and the batched greedy run below must recompute the
    # prompts that the run alone cached.
    ours_proc, ours_url = start_service(tag, models_dir, {**env, "MLX_SERVICE_ENABLE_PREFIX_CACHE": "false"})
    try:
        servers = [Server("mlx-service", ours_url, {"model": tag, "ignore_eos": True}),
                   Server("mlx_lm.server", peer_url, {"model": "default_model",
                                                     "logit_bias": {str(i): -1e9 for i in eos}})]
        per_round = 2 * (sum(LEVELS) + 8)  # both servers: every level, and 7 running + 1 joining
        pool = iter(prompts(tokenizer, 2 * sum(LEVELS) + rounds * per_round + 8 + 24))  # distinct, equal length
        for server in servers:  # warm-up, including each batch size once
            for level in LEVELS:
                server.together([next(pool) for _ in range(level)], 4)
        agg = {(s.name, c): [] for s in servers for c in LEVELS}
        joins = {s.name: [] for s in servers}
        shuffle = random.Random(0).shuffle
        for r in range(rounds):
            work = [(s, c) for s in servers for c in LEVELS] + [(s, "join") for s in servers]
            shuffle(work)
            for server, level in work:
                if level == "join":
                    joins[server.name].append(server.join_ttft([next(pool) for _ in range(7)], next(pool), tokens))
                else:
                    agg[server.name, level].append(server.together([next(pool) for _ in range(level)], tokens)[0])
            print(f"  {size} round {r + 1}/{rounds}: " + ", ".join(
                f"{s.name} x{c} {agg[s.name, c][-1]:.0f}" for s in servers for c in (1, 8, 16)), file=sys.stderr)
        rows = []
        for c in LEVELS:
            ours, peer, single = agg["mlx-service", c], agg["mlx_lm.server", c], agg["mlx-service", 1]
            vs_peer = [o / p for o, p in zip(ours, peer)]
            vs_single = [o / s for o, s in zip(ours, single)]
            rows.append({"model": size, "streams": c, "tokens": tokens, "ours_tps": statistics.median(ours),
                         "peer_tps": statistics.median(peer), "vs_peer": round(statistics.median(vs_peer), 2),
                         "vs_peer_ci": interval(vs_peer, 2), "vs_single": round(statistics.median(vs_single), 2),
                         "vs_single_ci": interval(vs_single, 2), "ours_runs": ours, "peer_runs": peer})
        join = {name: {"ttft_ms": round(statistics.median(v) * 1e3, 1), "runs": v} for name, v in joins.items()}
        chats = [next(pool) for _ in range(8)]
        alone = [servers[0].together([c], tokens)[1][0]["text"] for c in chats]
        batched = [o["text"] for o in servers[0].together(chats, tokens)[1]]
        same = [a == b for a, b in zip(alone, batched)]
        first_diff = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
                      for a, b, s in zip(alone, batched, same) if not s]
        batch = loaded(ours_url, tag)["batch_size"]
    finally:
        for proc in (peer_proc, ours_proc):
            proc.terminate()
            proc.wait()
    bare = [ceiling(path, tokenizer, [next(pool) for _ in range(8)], tokens) for _ in range(3)]
    return {"rows": rows, "join": join, "greedy_equal": sum(same), "greedy_total": len(same),
            "greedy_first_difference_chars": first_diff, "batch_size": batch,
            "ceiling_8_tps": statistics.median(bare), "ceiling_runs": bare}


def ceiling(path: Path, tokenizer, chats: list[list[dict]], tokens: int) -> float:
    """Bare mlx-lm BatchGenerator in this process, no server: the 8 prompts inserted at once, each decoding
    `tokens` with end-of-sequence not stopping it. No server built on mlx-lm's batching can beat this row."""
    import mlx_lm
    from mlx_lm.generate import BatchGenerator, StopSequences

    model = mlx_lm.load(str(path))[0]
    prompts = [tokenizer.encode(tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False),
                                add_special_tokens=False) for c in chats]
    gen = BatchGenerator(model, completion_batch_size=32, prefill_batch_size=8)
    start = time.perf_counter()
    gen.insert(prompts, max_tokens=[tokens] * len(prompts), stop_sequences=[StopSequences()] * len(prompts))
    finished = 0
    while finished < len(prompts):
        finished += sum(r.finish_reason is not None for r in gen.next_generated())
    return len(prompts) * tokens / (time.perf_counter() - start)


def two_models(models_dir: Path) -> dict:
    """A short request to model B while model A generates 240 tokens (B not loaded before: loaded meanwhile)."""
    a_tag, b_tag = "bench-serve:60m-f32", "bench-serve:tiny-f32"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc, url = start_service(a_tag, models_dir, env)
    try:
        msgs = [{"role": "user", "content": "Write a long story."}]
        runs = []
        for _ in range(3):
            httpx.post(url + f"/v1/models/{b_tag}/unload", timeout=60)
            a: dict = {}
            a_server = Server("a", url, {"model": a_tag, "ignore_eos": True})
            thread = threading.Thread(target=a_server.stream, args=(msgs, 240, a))
            start = time.perf_counter()
            thread.start()
            while not a.get("first") and thread.is_alive():  # A is decoding
                time.sleep(0.005)
            b_start = time.perf_counter()
            b: dict = {}
            Server("b", url, {"model": b_tag, "ignore_eos": True}).stream(msgs, 8, b)
            b_time = b["end"] - b_start
            thread.join()
            a_time = a["end"] - start
            runs.append({"a_s": round(a_time, 3), "b_s": round(b_time, 3), "ratio": round(b_time / a_time, 3)})
        return {"runs": runs, "ratio": statistics.median(r["ratio"] for r in runs)}
    finally:
        proc.terminate()
        proc.wait()


def threading_choice(models_dir: Path, steps: int = 60) -> dict:
    """Two models decoding batches of 8 at once: stepped in turn on one thread, or one thread each. Measured
    on bare BatchGenerators, so only the threading differs. Aggregate decode steps per second."""
    import mlx.core as mx
    import mlx_lm
    from mlx_lm.generate import BatchGenerator

    from service.locate import generated_dir

    paths = [build(tag, lambda e: generated_dir(models_dir, e))[1] for tag in ("bench-serve:60m-f32",) * 2]
    models = [mlx_lm.load(str(p))[0] for p in paths]

    def generator(model, stream):
        gen = BatchGenerator(model, completion_batch_size=8, stream=stream)
        gen.insert([[1 + i, 2, 3, 4] for i in range(8)], max_tokens=[10**6] * 8)
        return gen

    def interleaved() -> float:
        stream = mx.new_stream(mx.default_device())
        gens = [generator(m, stream) for m in models]
        for gen in gens:
            gen.next_generated()
        start = time.perf_counter()
        for _ in range(steps):
            for gen in gens:
                gen.next_generated()
        return 2 * steps / (time.perf_counter() - start)

    def threaded() -> float:
        ready, go = threading.Barrier(3), threading.Event()

        def run(model):
            stream = mx.new_stream(mx.default_device())
            gen = generator(model, stream)
            gen.next_generated()
            ready.wait()
            go.wait()
            for _ in range(steps):
                gen.next_generated()

        threads = [threading.Thread(target=run, args=(m,)) for m in models]
        for t in threads:
            t.start()
        ready.wait()
        start = time.perf_counter()
        go.set()
        for t in threads:
            t.join()
        return 2 * steps / (time.perf_counter() - start)

    runs = [(interleaved(), threaded()) for _ in range(3)]
    ratios = [t / i for i, t in runs]
    return {"interleaved_steps_per_s": statistics.median(i for i, _ in runs),
            "threaded_steps_per_s": statistics.median(t for _, t in runs), "threaded_vs_interleaved": ratios}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=0, help="measured rounds per model (default: per model)")
    args = parser.parse_args()
    models_dir = RESULTS / "serve-models"
    results = {size: bench_model(size, models_dir, args.rounds) for size in args.models}
    both = two_models(models_dir)
    threads = threading_choice(models_dir)

    def ci(row, key):
        return f"{row[key]} [{row[key + '_ci'][0]}, {row[key + '_ci'][1]}]"

    rows = [{**r, "ours_tps": round(r["ours_tps"], 1), "peer_tps": round(r["peer_tps"], 1),
             "vs_peer": ci(r, "vs_peer"), "vs_single": ci(r, "vs_single")}
            for res in results.values() for r in res["rows"]]
    text = table(rows, ["model", "streams", "tokens", "ours_tps", "peer_tps", "vs_peer", "vs_single"])
    notes = []
    for size, res in results.items():
        join = res["join"]
        notes.append(f"{size}: bare mlx-lm BatchGenerator, 8 streams in-process (the ceiling of the 8-stream row): "
                     f"{res['ceiling_8_tps']:.1f} tok/s")
        notes.append(f"{size}: batch size {res['batch_size']}; one-token request joining 7 running streams, time to "
                     f"first token: mlx-service {join['mlx-service']['ttft_ms']} ms, mlx_lm.server "
                     f"{join['mlx_lm.server']['ttft_ms']} ms; greedy output in a batch of 8 equal to alone: "
                     f"{res['greedy_equal']}/{res['greedy_total']}"
                     + (f" (first difference at characters {res['greedy_first_difference_chars']})"
                        if res["greedy_first_difference_chars"] else ""))
    notes.append(f"two models: 8 tokens from B (loaded meanwhile) while A decodes 240: B took {both['ratio']:.3f} of "
                 f"A's time ({', '.join(str(r['b_s']) + ' s of ' + str(r['a_s']) + ' s' for r in both['runs'])})")
    notes.append(f"threading, two 60m models decoding batches of 8 at once: one thread each "
                 f"{threads['threaded_steps_per_s']:.1f} steps/s, stepped in turn on one thread "
                 f"{threads['interleaved_steps_per_s']:.1f} steps/s (ratios "
                 f"{', '.join(f'{x:.2f}' for x in threads['threaded_vs_interleaved'])})")
    text += "\n\n" + "\n".join(notes)
    print(text)
    path = write("concurrency", {"models": results, "two_models": both, "threading": threads})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/concurrency.py", text)


if __name__ == "__main__":
    main()
