"""Structured output's cost: decode speed with a JSON-schema grammar enforced, against the same model decoding
freely, in one run of MLX Service (Ollama API, greedy).

Every constrained request follows a schema that fixes its length: an object holding an array of exactly
`ITEMS` one-digit integers, so each answer is about the same number of tokens. Each free request decodes the
same number of tokens that its constrained twin produced (end-of-sequence banned), from the same prompt.
Decode speed is what the server measured (eval_count / eval_duration), so prefill and HTTP are left out.

Measured, in interleaved rounds (a new random order each round):
- one stream: constrained tok/s against free tok/s (target >= 0.90x);
- 8 concurrent streams, 4 constrained and 4 free: aggregate tok/s (all tokens / wall time from release to the
  last answer) against 8 free streams (target >= 0.85x).
Ratios are medians of per-round ratios with 95% bootstrap intervals. Run: `make bench` or
`.venv/bin/python bench/structured.py [--model 60m|tiny] [--rounds N]`.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, table, update_readme, write  # noqa: E402
from serve import interval, released_together, start_service  # noqa: E402

MODELS = {"tiny": "bench-serve:tiny-f32", "60m": "bench-serve:60m-f32"}
ITEMS = 48
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["digits"],
          "properties": {"digits": {"type": "array", "minItems": ITEMS, "maxItems": ITEMS,
                                    "items": {"type": "integer", "minimum": 0, "maximum": 9}}}}


def chat(url: str, tag: str, k: int, constrained: bool, tokens: int = 0) -> dict:
    body = {"model": tag, "stream": False, "messages": [{"role": "user", "content": f"{k}. List some digits."}],
            "options": {"temperature": 0, **({"num_predict": tokens, "ignore_eos": True} if tokens else {})}}
    if constrained:
        body["format"] = SCHEMA
    r = httpx.post(url + "/api/chat", json=body, timeout=600)
    r.raise_for_status()
    return r.json()


def rate(answer: dict) -> float:
    return answer["eval_count"] / (answer["eval_duration"] / 1e9)


def together(url: str, tag: str, jobs: list[tuple[int, bool, int]]) -> tuple[float, list[dict]]:
    """All requests released at once: (aggregate tokens/s, the answers)."""
    outs: list[dict] = [{} for _ in jobs]

    def run(i: int, job: tuple[int, bool, int], go) -> None:
        go.wait()
        outs[i] = chat(url, tag, *job)
        outs[i]["end"] = time.perf_counter()

    start = released_together([lambda go, i=i, j=j: run(i, j, go) for i, j in enumerate(jobs)])
    wall = max(o["end"] for o in outs) - start
    return sum(o["eval_count"] for o in outs) / wall, outs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="60m", choices=list(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    tag = MODELS[args.model]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLX_SERVICE_ENABLE_PREFIX_CACHE": "false"}
    proc, url = start_service(tag, RESULTS / "serve-models", env)
    try:
        import json

        lengths = {}
        for k in range(8):  # warm-up, and each prompt's constrained length, for its free twin
            answer = chat(url, tag, k, True)
            json.loads(answer["message"]["content"])  # the grammar held
            lengths[k] = answer["eval_count"]
        solo = {"constrained": [], "free": []}
        batch = {"half": [], "free": []}
        for _ in range(args.rounds):
            plan = ["solo-c", "solo-f", "batch-half", "batch-free"]
            random.shuffle(plan)
            for step in plan:
                if step == "solo-c":
                    solo["constrained"].append(rate(chat(url, tag, 0, True)))
                elif step == "solo-f":
                    solo["free"].append(rate(chat(url, tag, 0, False, lengths[0])))
                elif step == "batch-half":
                    batch["half"].append(together(url, tag, [(k, k % 2 == 0, 0 if k % 2 == 0 else lengths[k])
                                                             for k in range(8)])[0])
                else:
                    batch["free"].append(together(url, tag, [(k, False, lengths[k]) for k in range(8)])[0])
    finally:
        proc.terminate()
        proc.wait(timeout=30)

    solo_ratio = [c / f for c, f in zip(solo["constrained"], solo["free"])]
    batch_ratio = [h / f for h, f in zip(batch["half"], batch["free"])]
    rows = [
        {"case": "1 stream", "constrained_tps": round(statistics.median(solo["constrained"]), 1),
         "free_tps": round(statistics.median(solo["free"]), 1), "ratio": round(statistics.median(solo_ratio), 3),
         "ratio_ci": interval(solo_ratio, 3), "target": ">= 0.90"},
        {"case": "8 streams, 4 constrained", "constrained_tps": round(statistics.median(batch["half"]), 1),
         "free_tps": round(statistics.median(batch["free"]), 1), "ratio": round(statistics.median(batch_ratio), 3),
         "ratio_ci": interval(batch_ratio, 3), "target": ">= 0.85"},
    ]
    text = table([{**r, "ratio": f"{r['ratio']} [{r['ratio_ci'][0]}, {r['ratio_ci'][1]}]"} for r in rows],
                 ["case", "constrained_tps", "free_tps", "ratio", "target"])
    text += (f"\n\nmodel {tag}; each constrained answer is {ITEMS} digits in a JSON array "
             f"({statistics.median(lengths.values()):.0f} tokens), free twins decode as many; {args.rounds} rounds")
    print(text)
    path = write("structured", {"model": tag, "rows": rows, "solo": solo, "batch": batch, "lengths": lengths})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/structured.py", text)


if __name__ == "__main__":
    main()
