"""Pull throughput against a bare `snapshot_download`, and bytes fetched again after an interruption.

Both run in one process against the same local fake Hub (tests/fakehub.py) serving a generated repo. Targets:
throughput >= 0.95 of snapshot_download's; < 10% of already-downloaded bytes fetched again after a pull is
interrupted at 50%. Run: `make bench` or `.venv/bin/python bench/pull.py`.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
os.environ.pop("HF_HUB_OFFLINE", None)

from _report import table, write  # noqa: E402

from tests.fakehub import FakeHub, Repo  # noqa: E402

SIZE = 256 * 2**20
REPEAT = 3


def files() -> dict[str, bytes]:
    weights = os.urandom(SIZE // 2)
    return {"config.json": b'{"model_type": "llama", "architectures": ["LlamaForCausalLM"]}',
            "tokenizer.json": b"{}", "model-00001-of-00002.safetensors": weights,
            "model-00002-of-00002.safetensors": weights[::-1]}


def bare(hub: FakeHub, cache: Path) -> float:
    from huggingface_hub import snapshot_download

    start = time.perf_counter()
    snapshot_download("org/big", endpoint=hub.url, cache_dir=cache, allow_patterns=["*.json", "*.safetensors"])
    return time.perf_counter() - start


def ours(hub: FakeHub, cache: Path) -> float:
    from service.hub.pull import Puller

    puller = Puller(cache_dir=cache, endpoint=hub.url, offline=False)
    start = time.perf_counter()
    puller.pull(puller.plan("org/big"))
    return time.perf_counter() - start


def interrupted(hub: FakeHub, cache: Path) -> dict:
    from service.hub.pull import PullCancelled, Puller

    puller = Puller(cache_dir=cache, endpoint=hub.url, offline=False)
    plan = puller.plan("org/big")
    cancel = threading.Event()

    def halfway(event):
        if event.get("completed", 0) >= plan.total // 2:
            cancel.set()

    try:
        puller.pull(plan, halfway, cancel)
    except PullCancelled:
        pass
    blobs = cache / "models--org--big" / "blobs"
    had = sum(p.stat().st_size for p in blobs.iterdir() if p.is_file() and not p.name.endswith("lock"))
    before = sum(hub.bytes_sent.values())
    puller.pull(plan)
    again = sum(hub.bytes_sent.values()) - before
    refetched = again - (plan.total - had)
    return {"had_bytes": had, "fetched_after": again, "refetched_bytes": refetched,
            "refetched_pct": round(100 * max(refetched, 0) / had, 2)}


def main() -> None:
    with FakeHub() as hub:
        hub.repos["org/big"] = Repo(files())
        times = {"snapshot_download": [], "mlx-service pull": []}
        for i in range(REPEAT):
            for name, fn in (("snapshot_download", bare), ("mlx-service pull", ours))[:: 1 if i % 2 else -1]:
                with tempfile.TemporaryDirectory() as tmp:
                    times[name].append(fn(hub, Path(tmp)))
        with tempfile.TemporaryDirectory() as tmp:
            resume = interrupted(hub, Path(tmp))
    base = statistics.median(times["snapshot_download"])
    rows = [{"runner": name, "seconds": round(statistics.median(t), 3),
             "MB_per_s": round(SIZE / statistics.median(t) / 1e6, 1),
             "throughput_ratio": round(base / statistics.median(t), 3)} for name, t in times.items()]
    print(table(rows, ["runner", "seconds", "MB_per_s", "throughput_ratio"]))
    ok = rows[1]["throughput_ratio"] >= 0.95
    print(f"\nthroughput ratio {rows[1]['throughput_ratio']} (target >= 0.95: {'met' if ok else 'NOT met'})")
    print(f"interrupted at 50%: had {resume['had_bytes']:,} bytes, fetched {resume['fetched_after']:,} to finish, "
          f"{resume['refetched_pct']}% of what it had fetched again (target < 10%)")
    path = write("pull", {"rows": rows, "resume": resume, "size_bytes": SIZE})
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
