"""Memory estimator vs measured peak memory, on generated models (bench/catalog/) of every kind.

Text (four architectures x {float32, bfloat16, 4-bit} x context): a fresh process loads the checkpoint through
mlx_lm.load, prefills a random prompt of `context - 16` tokens and decodes 16. Embedding (a BERT): one batch of
32 inputs of 128 or 512 tokens. Speech (a Whisper-tiny shape): 30 s of audio. Vision (a Qwen2-VL): one image of
448 or 896 pixels square, then 16 tokens. Each reports mx.get_peak_memory(); the estimate is
service.catalog.estimate for the same work. Target: every row within +-10%.
Run: `make bench` (or `.venv/bin/python bench/memory.py [--contexts 512 2048]`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from _report import RESULTS, bench_catalog, build, table, write  # noqa: E402

DECODE = 16
TOLERANCE = 0.10
EMBED_BATCH = 32  # the embedding runner's forward batch
SIZES = {"embedding": [128, 512], "speech": [30], "vision": [448, 896]}  # per kind (text: --contexts)


def worker(tag: str, context: int) -> dict:
    """Runs in its own process so that every peak starts from nothing. `context`: tokens for text models and
    per input for embedding models (a batch of EMBED_BATCH), the image's side in pixels for vision models, and
    seconds of audio for speech models."""
    import mlx.core as mx

    entry, path = build(tag, lambda e: RESULTS / "models" / e.tag.replace(":", "-"))
    mx.reset_peak_memory()
    mx.random.seed(0)
    kind = entry.family.kind
    if kind == "embedding":
        from mlx_vlm.embedding_loader import load_embedding_model

        model = load_embedding_model(path)
        ids = mx.random.randint(5, entry.model.architecture.vocab_size, (EMBED_BATCH, context))
        mx.eval(model(ids, attention_mask=mx.ones(ids.shape)).last_hidden_state)
    elif kind == "speech":
        import numpy as np
        from mlx_audio.stt.utils import load_model

        model = load_model(path)
        model.generate(np.zeros(16_000 * context, dtype=np.float32), condition_on_previous_text=False)
    elif kind == "vision":
        import mlx_vlm
        from PIL import Image

        model, processor = mlx_vlm.load(str(path))
        prompt = processor.tokenizer.apply_chat_template(
            [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}],
            add_generation_prompt=True, tokenize=False)
        for _ in mlx_vlm.stream_generate(model, processor, prompt, image=[Image.new("RGB", (context, context))],
                                         max_tokens=DECODE):
            pass
    else:
        import mlx_lm
        from mlx_lm.generate import generate_step

        model, _ = mlx_lm.load(str(path))
        prompt = mx.random.randint(0, entry.model.architecture.vocab_size, (context - DECODE,))
        for _ in generate_step(prompt, model, max_tokens=DECODE):
            pass
    return {"peak": mx.get_peak_memory()}


def measure(tag: str, context: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--worker", tag, str(context)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode:
        if "Currently only supports float32" in proc.stderr:  # MLX's CPU GatherMM (MoE) has no bf16 kernel
            return {"peak": None, "why": "MLX CPU backend: GatherMM supports float32 only"}
        raise RuntimeError(f"{tag} @ {context}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def estimate_for(entry, size: int):
    """The estimate of what `worker` ran: `size` is a context, an input length, an image's side or seconds."""
    from service.catalog import estimate

    if entry.family.kind == "vision":  # the prompt: the image's tokens (4 patches each) and a few words
        patch = dict(entry.model.architecture.extra_config)["vision_config"]["patch_size"]
        return estimate(entry, context=(size // patch) ** 2 // 4 + 32, image_pixels=size * size)
    return estimate(entry, context=size)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--contexts", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--worker", nargs=2, metavar=("TAG", "CONTEXT"))
    parser.add_argument("--reuse", action="store_true",
                        help="recompute the estimates against the peaks measured by the last run")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], int(args.worker[1]))))
        return

    cat = bench_catalog()
    entries = [e for e in cat.entries() if e.family.name.startswith("bench-") and e.family.name != "bench-serve"]
    jobs = [(e, c) for e in entries for c in SIZES.get(e.family.kind, args.contexts)]
    if args.reuse:
        previous = json.loads((RESULTS / "memory.json").read_text())
        measured = {(r["model"], r["context"]): r["measured_MiB"] * 2**20 for r in previous["rows"]}
        peaks = [measured.get((e.tag, c)) for e, c in jobs]
    else:
        for entry in entries:  # build checkpoints once, before the measured runs
            measure(entry.tag, 256 + DECODE)
        with ThreadPoolExecutor(args.jobs) as pool:
            peaks = list(pool.map(lambda job: measure(job[0].tag, job[1])["peak"], jobs))
    rows, skipped = [], set()
    for (entry, context), peak in zip(jobs, peaks):
        if peak is None:
            skipped.add(entry.tag)
            continue
        est = estimate_for(entry, context)
        error = est.total / peak - 1
        rows.append({"model": entry.tag, "context": context, "measured_MiB": round(peak / 2**20, 1),
                     "estimate_MiB": round(est.total / 2**20, 1), "weights": round(est.weights / 2**20, 1),
                     "kv": round(est.kv_cache / 2**20, 1), "activations": round(est.activations / 2**20, 1),
                     "error": f"{error:+.1%}", "ok": "yes" if abs(error) <= TOLERANCE else "NO", "_error": error})
    print(table(rows, ["model", "context", "measured_MiB", "estimate_MiB", "weights", "kv", "activations", "error",
                       "ok"]))
    for tag in sorted(skipped):
        print(f"{tag}: not measurable here (MLX's CPU GatherMM kernel supports float32 only)")
    worst = max(rows, key=lambda r: abs(r["_error"]))
    print(f"\nworst row: {worst['model']} @ {worst['context']}: {worst['error']} "
          f"({'within' if abs(worst['_error']) <= TOLERANCE else 'OUTSIDE'} +-{TOLERANCE:.0%})")
    measured_on = previous["machine"]["date"] if args.reuse else None
    path = write("memory", {"tolerance": TOLERANCE, "rows": rows, "worst": worst, "skipped": sorted(skipped),
                            "peaks_measured_on": measured_on or "this run"})
    print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
