"""The SSD tier's cost to decoding: 8 streams decode while other requests keep finishing long prompts, whose KV
caches the server spills to disk, against the same work on a server whose SSD tier is off.

Two servers of the ~60M generated model run side by side (same settings but `MLX_SERVICE_CACHE_MAX_DISK_GB`: 8
or 0), measured in interleaved rounds (a new random order each round). In a round, 8 streams of `TOKENS` tokens
each are released together (Ollama API, greedy, end-of-sequence banned) while one more client sends a new
~600-token prompt a second (one token out): the spiller's prefills cost both servers the same, and only the
one with the SSD tier writes each finished prompt (24 KB of KV cache per token) while the streams decode.
Decode speed is what the server measured for each stream (eval_count / eval_duration), averaged over the 8.
Target (issue #11): spilling slows the streams by at most 5% (ratio >= 0.95). Ratios are medians of per-round
ratios with 95% bootstrap intervals. Run: `.venv/bin/python bench/spill.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, table, update_readme, write  # noqa: E402
from serve import interval, released_together, start_service  # noqa: E402

TAG = "prefix-bench:60m-f32"
STREAMS, TOKENS = 8, 96
PAUSE = 1.0  # seconds between the spiller's prompts
WORDS = "the river of light runs over an old stone bridge while a small cat reads about memory and time".split()


def stream(url: str, k: int) -> float:
    r = httpx.post(url + "/api/chat", timeout=600, json={
        "model": TAG, "stream": False, "messages": [{"role": "user", "content": f"{k}. Tell me a story."}],
        "options": {"temperature": 0, "num_predict": TOKENS, "ignore_eos": True}})
    r.raise_for_status()
    body = r.json()
    return body["eval_count"] / (body["eval_duration"] / 1e9)


def spiller(url: str, seed: int, stop: threading.Event, sent: list[int]) -> None:
    """New long prompts, one a second, until the streams are done: each one's cache is a new file. (Back to back,
    their prefills cut the streams to a quarter of their speed on both servers, hiding what the writes cost.)"""
    rng = random.Random(seed)
    while not stop.wait(PAUSE):
        text = " ".join(rng.choice(WORDS) for _ in range(280))  # ~600 tokens
        httpx.post(url + "/api/chat", timeout=600, json={
            "model": TAG, "stream": False, "messages": [{"role": "user", "content": text}],
            "options": {"temperature": 0, "num_predict": 1}}).raise_for_status()
        sent[0] += 1


def one_round(url: str, seed: int) -> tuple[float, int]:
    rates = [0.0] * STREAMS
    stop, sent = threading.Event(), [0]
    background = threading.Thread(target=spiller, args=(url, seed, stop, sent))

    def work(i: int):
        def run(go: threading.Barrier) -> None:
            go.wait()
            rates[i] = stream(url, seed * 100 + i)
        return run

    background.start()
    released_together([work(i) for i in range(STREAMS)])
    stop.set()
    background.join()
    return statistics.mean(rates), sent[0]


def disk_counts(url: str) -> tuple[int, int]:
    """(files written, caches skipped because the writer was behind) so far."""
    model = next(m for m in httpx.get(url + "/api/stats").json()["models"] if m["name"] == TAG)
    disk = model.get("prefix_cache", {}).get("disk", {})
    return disk.get("writes", 0), disk.get("skipped", 0)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()
    folders = {name: Path(tempfile.mkdtemp(prefix=f"spill-{name}-")) for name in ("on", "off")}
    servers = {}
    try:
        for name, folder in folders.items():
            env = {**os.environ, "PYTHONPATH": str(ROOT), "MLX_SERVICE_CACHE_DIR": str(folder),
                   "MLX_SERVICE_CACHE_MAX_DISK_GB": "8" if name == "on" else "0", "MLX_SERVICE_BATCH_SIZE": "9",
                   "MLX_SERVICE_CONTEXT_LENGTH": "4096"}
            servers[name] = start_service(TAG, RESULTS / "serve-models", env)
        urls = {name: url for name, (_, url) in servers.items()}
        for url in urls.values():
            one_round(url, 0)  # warm-up: compiled kernels, allocator
        rates: dict[str, list[float]] = {"on": [], "off": []}
        spills = {"on": 0, "off": 0}
        before = disk_counts(urls["on"])
        for r in range(1, args.rounds + 1):
            for name in random.Random(r).sample(list(urls), 2):
                rate, sent = one_round(urls[name], r)
                rates[name].append(rate)
                spills[name] += sent
        after = disk_counts(urls["on"])
        written, skipped = after[0] - before[0], after[1] - before[1]
    finally:
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=120)
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
    ratios = [on / off for on, off in zip(rates["on"], rates["off"])]
    row = {"streams": STREAMS, "tokens_each": TOKENS,
           "tok_s_per_stream_ssd_on": round(statistics.median(rates["on"]), 2),
           "tok_s_per_stream_ssd_off": round(statistics.median(rates["off"]), 2),
           "ratio": round(statistics.median(ratios), 3), "ratio_95ci": interval(ratios, 3), "target": ">= 0.95",
           "long_prompts_sent": spills["on"], "files_written": written, "skipped_writer_behind": skipped}
    text = (table([row], list(row)) + f"\n\n{args.rounds} interleaved rounds; model {TAG} (generated), "
            "float32 KV cache, ~600-token spilled prompts")
    print(text)
    path = write("spill", {"row": row, "rates": rates, "ratios": ratios})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/spill.py", text)


if __name__ == "__main__":
    main()
