"""The prefix cache's SSD tier: the second turn of a 10,000-token conversation after a restart, against the same
turn with nothing cached (cold), on a ~60M generated model; and how fast a cached prefix is read back.

1. A server with an empty cache directory answers turn 1 (a ~10,000-token user message, 1 token out) and writes
   that prompt's KV cache to disk; it is stopped.
2. A new server on the same cache directory answers turn 2 (turn 1, its answer, a short new question): time to
   first token, against turn 2 sent to a third server whose cache directory is empty (cold).
3. Reading the cache file back (SHA-256 check, load, trim), as the warm server timed it: seconds per GB.
Targets (issue #11): warm >= 20x faster than cold; restore under 0.5 s per GB.
Run: `.venv/bin/python bench/prefix_disk.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, table, update_readme, write  # noqa: E402
from serve import start_service  # noqa: E402

TAG = "prefix-bench:60m-f32"
WORDS = "the river of light runs over the old stone bridge while a small cat reads about memory".split()


def turn(with_history: bool) -> list[dict]:
    history = [{"role": "user", "content": " ".join(WORDS[i % len(WORDS)] for i in range(4_700))}]  # ~10K tokens
    if with_history:
        history += [{"role": "assistant", "content": "yes"}, {"role": "user", "content": "And what next?"}]
    return history


def first_token(url: str, messages: list[dict]) -> tuple[float, dict]:
    start = time.perf_counter()
    r = httpx.post(url + "/v1/chat/completions", json={"model": TAG, "messages": messages, "max_tokens": 1},
                   timeout=1800)
    r.raise_for_status()
    return time.perf_counter() - start, r.json()["usage"]


def serve(cache: Path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLX_SERVICE_CACHE_DIR": str(cache),
           "MLX_SERVICE_CONTEXT_LENGTH": "16384", "MLX_SERVICE_BATCH_SIZE": "1"}
    return start_service(TAG, RESULTS / "serve-models", env)


def stop(proc) -> None:
    proc.terminate()
    proc.wait(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    warm, cold, prompt_tokens, cached_tokens, restore = [], [], 0, 0, []
    for _ in range(args.rounds):
        cache = Path(tempfile.mkdtemp(prefix="prefix-bench-"))
        try:
            proc, url = serve(cache)
            try:
                first_token(url, turn(False))
                deadline = time.time() + 600
                while time.time() < deadline:  # the write happens off the request's path: wait for it
                    model = next(m for m in httpx.get(url + "/api/stats").json()["models"] if m["name"] == TAG)
                    if model.get("prefix_cache", {}).get("disk", {}).get("writes"):
                        break
                    time.sleep(0.2)
            finally:
                stop(proc)
            proc, url = serve(cache)  # a restart: RAM is empty, the disk tier is not
            try:
                seconds, usage = first_token(url, turn(True))
                warm.append(seconds)
                prompt_tokens, cached_tokens = usage["prompt_tokens"], usage["prompt_tokens_details"]["cached_tokens"]
                runner = next(m for m in httpx.get(url + "/api/stats").json()["models"] if m["name"] == TAG)["runner"]
                read = runner["disk_read_bytes"]  # the server timed its own read: check, load, trim
                restore.append((runner["disk_read_ms"] / 1000 / (read / 2**30), read))
            finally:
                stop(proc)
            empty = Path(tempfile.mkdtemp(prefix="prefix-bench-cold-"))
            proc, url = serve(empty)
            try:
                cold.append(first_token(url, turn(True))[0])
            finally:
                stop(proc)
                shutil.rmtree(empty, ignore_errors=True)
        finally:
            shutil.rmtree(cache, ignore_errors=True)
    ratio = [c / w for c, w in zip(cold, warm)]
    row = {"prompt_tokens": prompt_tokens, "cached_tokens": cached_tokens,
           "cold_s": round(statistics.median(cold), 2), "after_restart_s": round(statistics.median(warm), 3),
           "speedup": f"{statistics.median(ratio):.1f}x", "target": ">= 20x",
           "restore_s_per_gb": round(statistics.median(s for s, _ in restore), 3), "restore_target": "< 0.5",
           "file_mb": round(restore[0][1] / 2**20, 1)}
    text = table([row], list(row)) + f"\n\n{args.rounds} rounds; model {TAG} (generated), float32 KV cache"
    print(text)
    path = write("prefix_disk", {"row": row, "cold": cold, "warm": warm, "restore": restore})
    print(f"\nwrote {path.relative_to(ROOT)}")
    update_readme("bench/prefix_disk.py", text)


if __name__ == "__main__":
    main()
