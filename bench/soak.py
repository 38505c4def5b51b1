"""Memory over time: mixed traffic against one `mlx-service serve` process, its RSS sampled.

Clients in three dialects (OpenAI, Anthropic, Ollama), streaming and not, with tools and JSON schemas, token
counts and listings; some streams are dropped part-way (a disconnect), some requests are refused (a 400).
RSS is read from the server process every few seconds. After warm-up (the first fifth of the run, when caches
fill), the target is RSS flat within +-5%: the drift from the end of warm-up to the end of the run, and the
trend (least squares, MiB per hour) are reported.

Run: `.venv/bin/python bench/soak.py [--minutes 30] [--clients 3]` (the issue's soak is 30 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
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
from serve import free_port, wait_up  # noqa: E402

MODEL = "tiny-coder"  # a generated test model with tools; small, so the run measures the server, not MLX
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["ok"],
          "properties": {"ok": {"type": "boolean"}}}
TOOLS = [{"type": "function", "function": {"name": "get_time", "description": "the time",
                                           "parameters": {"type": "object", "properties": {},
                                                          "additionalProperties": False}}}]


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS:")) / 1024
    except OSError:  # macOS
        return int(subprocess.check_output(["ps", "-o", "rss=", "-p", str(pid)]).strip()) / 1024


def one_request(client: httpx.Client, rng: random.Random, counts: dict) -> None:
    words = " ".join(rng.choice(["cat", "river", "stone", "light", "code", "test"]) for _ in range(rng.randint(3, 40)))
    messages = [{"role": "user", "content": words}]
    kind = rng.choice(["openai", "openai-stream", "openai-drop", "openai-tools", "openai-schema", "anthropic",
                       "anthropic-stream", "anthropic-count", "ollama", "ollama-stream", "ollama-drop", "bad",
                       "listing"])
    max_tokens = rng.randint(1, 48)
    if kind.startswith("openai"):
        body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": "stream" in kind
                or "drop" in kind}
        if kind == "openai-tools":
            body |= {"tools": TOOLS, "tool_choice": "required"}
        if kind == "openai-schema":
            body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": SCHEMA}}
        path = "/v1/chat/completions"
    elif kind.startswith("anthropic"):
        body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "stream": kind.endswith("stream")}
        path = "/v1/messages/count_tokens" if kind.endswith("count") else "/v1/messages"
    elif kind.startswith("ollama"):
        body = {"model": MODEL, "messages": messages, "stream": kind != "ollama",
                "options": {"num_predict": max_tokens}}
        path = "/api/chat"
    elif kind == "bad":
        body = {"model": MODEL, "messages": messages, "temperature": -3}
        path = rng.choice(["/v1/chat/completions", "/api/chat"])
    else:
        client.get(rng.choice(["/v1/models", "/api/ps", "/api/tags", "/v1/models/loaded"]))
        counts[kind] = counts.get(kind, 0) + 1
        return
    if "drop" in kind:  # read a little of the stream, then hang up
        with client.stream("POST", path, json=body) as r:
            for i, _ in enumerate(r.iter_lines()):
                if i >= 2:
                    break
    else:
        r = client.post(path, json=body)
        if r.status_code >= 500:
            counts["server_errors"] = counts.get("server_errors", 0) + 1
    counts[kind] = counts.get(kind, 0) + 1


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--clients", type=int, default=3)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between RSS samples")
    args = parser.parse_args()
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "service.cli", "serve", "--port", str(port), "--models-dir",
                               str(RESULTS / "soak-models"), "--catalog-path", str(ROOT / "tests" / "catalog"),
                               "--default-model", MODEL], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    samples: list[tuple[float, float]] = []
    counts: dict[str, int] = {}
    stop = threading.Event()
    try:
        wait_up(url + "/", server)
        httpx.post(url + "/v1/chat/completions", json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                                       "max_tokens": 1}, timeout=300)

        def client_loop(seed: int) -> None:
            rng = random.Random(seed)
            with httpx.Client(base_url=url, timeout=120) as client:
                while not stop.is_set():
                    try:
                        one_request(client, rng, counts)
                    except httpx.HTTPError:
                        counts["client_errors"] = counts.get("client_errors", 0) + 1

        threads = [threading.Thread(target=client_loop, args=(i,), daemon=True) for i in range(args.clients)]
        for t in threads:
            t.start()
        start = time.monotonic()
        end = start + args.minutes * 60
        while time.monotonic() < end and server.poll() is None:
            samples.append((time.monotonic() - start, rss_mib(server.pid)))
            time.sleep(args.every)
        stop.set()
        for t in threads:
            t.join(timeout=150)
    finally:
        server.terminate()
        server.wait(timeout=60)

    warm = [s for s in samples if s[0] >= args.minutes * 60 / 5]
    if len(warm) < 2:
        raise SystemExit("too few samples after warm-up: run longer")
    base, last = warm[0][1], statistics.mean(r for _, r in warm[-3:])
    xs, ys = [t for t, _ in warm], [r for _, r in warm]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)  # MiB per second
    row = {"minutes": args.minutes, "clients": args.clients, "requests": sum(v for k, v in counts.items()
                                                                            if not k.endswith("errors")),
           "server_errors": counts.get("server_errors", 0), "rss_start_mib": round(samples[0][1], 1),
           "rss_after_warmup_mib": round(base, 1), "rss_end_mib": round(last, 1),
           "rss_max_mib": round(max(ys), 1), "drift_pct": round(100 * (last - base) / base, 2),
           "trend_mib_per_hour": round(slope * 3600, 2), "target": "drift within +-5%"}
    text = table([row], list(row))
    text += "\n\nrequests by kind: " + json.dumps(dict(sorted(counts.items())))
    print(text)
    path = write("soak", {"row": row, "counts": counts, "samples": samples})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/soak.py", text)


if __name__ == "__main__":
    main()
