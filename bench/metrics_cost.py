"""What observing costs: decode on the tiny generated model with usage, request counts, events and a scraper
reading `/metrics` and `/api/stats` every second, against the same server with all of that switched off
(`bench/_unobserved.py`: the recorders become no-ops and nothing scrapes).

Two servers run side by side and are measured in interleaved rounds (a new random order each round). Each
request asks for `TOKENS` tokens (OpenAI API, greedy, end-of-sequence banned) with a prompt of its own (no prefix
cache advantage); speed is tokens over the request's wall time as the client sees it, so the per-request work of
the middleware and the usage records is inside it. Target (issue #11): observed >= 0.98x of unobserved. The
ratio is the median of per-round ratios with a 95% bootstrap interval.
Run: `.venv/bin/python bench/metrics_cost.py [--rounds N]`.
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

from _report import RESULTS, table, update_readme, write  # noqa: E402
from serve import interval, start_service  # noqa: E402

TAG = "bench-serve:tiny-f32"
TOKENS = 128


def speed(client: httpx.Client, url: str, k: int) -> float:
    start = time.perf_counter()
    r = client.post(url + "/v1/chat/completions", json={
        "model": TAG, "messages": [{"role": "user", "content": f"{k}. Write a short story."}],
        "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True})
    r.raise_for_status()
    return r.json()["usage"]["completion_tokens"] / (time.perf_counter() - start)


def scrape(url: str, stop: threading.Event, count: list[int]) -> None:
    """A Prometheus scraper and a dashboard, at a far shorter interval than either usually uses."""
    with httpx.Client(timeout=30) as client:
        while not stop.wait(1.0):
            client.get(url + "/metrics").raise_for_status()
            client.get(url + "/api/stats").raise_for_status()
            count[0] += 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    models = RESULTS / "serve-models"
    servers = {"observed": start_service(TAG, models, env),
               "unobserved": start_service(TAG, models, env, launcher=(str(HERE / "_unobserved.py"),))}
    stop, scrapes = threading.Event(), [0]
    scraper = threading.Thread(target=scrape, args=(servers["observed"][1], stop, scrapes), daemon=True)
    rates: dict[str, list[float]] = {name: [] for name in servers}
    try:
        with httpx.Client(timeout=600) as client:
            for name, (_, url) in servers.items():
                for k in range(3):  # warm-up
                    speed(client, url, k)
            scraper.start()
            for r in range(args.rounds):
                for name in random.Random(r).sample(list(servers), 2):
                    rates[name].append(speed(client, servers[name][1], 1000 + r))
        stats = httpx.get(servers["observed"][1] + "/api/stats").json()
        counted = next(m for m in stats["models"] if m["name"] == TAG)["usage"]["requests"]
    finally:
        stop.set()
        for proc, _ in servers.values():
            proc.terminate()
            proc.wait(timeout=120)
    ratios = [o / u for o, u in zip(rates["observed"], rates["unobserved"])]
    row = {"tokens": TOKENS, "observed_tok_s": round(statistics.median(rates["observed"]), 1),
           "unobserved_tok_s": round(statistics.median(rates["unobserved"]), 1),
           "ratio": round(statistics.median(ratios), 3), "ratio_95ci": interval(ratios, 3), "target": ">= 0.98",
           "scrapes": scrapes[0], "requests_counted": counted}
    text = (table([row], list(row)) + f"\n\n{args.rounds} interleaved rounds; model {TAG} (generated); "
            "scrapes = /metrics + /api/stats pairs during the run")
    print(text)
    path = write("metrics_cost", {"row": row, "rates": rates, "ratios": ratios})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/metrics_cost.py", text)


if __name__ == "__main__":
    main()
