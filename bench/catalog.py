"""Catalog load/validate time (built-in and a synthetic 5,000-entry catalog) and name resolution per call.

Targets: built-in catalog ready in < 200 ms at service start, 5,000 entries < 2 s, resolution < 20 µs.
Run: `make bench` (or `.venv/bin/python bench/catalog.py`).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _report import table, write  # noqa: E402

FAMILY = """\
schema_version: 1
family:
  name: syn{i}
  description: Synthetic family {i}.
  license: mit
  model_card: https://example.com/syn{i}
  kind: text
  loader: mlx-lm
  abilities: [chat, generate, tools]
  prompt_style: chatml-tools
  context_length: 32768
  default_size: s0
  models:
{models}"""
MODEL = """\
    - size: s{s}
      parameters: {params}
      architecture: {{model_type: llama, architectures: [LlamaForCausalLM], num_hidden_layers: 32, hidden_size: 4096,
                     num_attention_heads: 32, num_key_value_heads: 8, intermediate_size: 14336, vocab_size: 128256}}
      default_quantization: 4bit
      quantizations:
{quants}"""
QUANT = ("        - {{name: {bits}bit, repo: syn-org/syn{i}-s{s}-{bits}bit, bits: {bits}, group_size: 64, "
         "mode: affine}}\n")


def synthetic(folder: Path, entries: int, sizes: int = 4, bits=(2, 3, 4, 6, 8)) -> int:
    per_family = sizes * len(bits)
    families = entries // per_family
    for i in range(families):
        models = "".join(
            MODEL.format(s=s, params=(s + 1) * 1_000_000_000,
                         quants="".join(QUANT.format(i=i, s=s, bits=b) for b in bits))
            for s in range(sizes))
        (folder / f"syn{i}.yaml").write_text(FAMILY.format(i=i, models=models))
    return families * per_family


def timed(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def service_start(cache_dir: str) -> float:
    """Seconds from a fresh interpreter's first import of the catalog package to a ready catalog."""
    code = ("import time; t = time.perf_counter(); from service.catalog import load_catalog; "
            "load_catalog([]).raise_for_problems(); print(time.perf_counter() - t)")
    env = {**os.environ, "MLX_SERVICE_CACHE_DIR": cache_dir, "PYTHONPATH": str(ROOT)}
    runs = [float(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                                 check=True).stdout) for _ in range(5)]
    return statistics.median(runs)


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MLX_SERVICE_CACHE_DIR"] = str(Path(tmp) / "cache")
        from service.catalog import load_catalog

        def row(what, seconds, target_ms, unit="ms"):
            scale = 1e3 if unit == "ms" else 1e6
            target = None if target_ms is None else target_ms * scale / 1e3
            rows.append({"measure": what, "value": round(seconds * scale, 2), "unit": unit, "target": target,
                         "ok": "-" if target is None else "yes" if seconds * 1e3 < target_ms else "NO"})

        builtin = load_catalog([], cache=False).raise_for_problems()
        n = len(builtin.entries())
        cold_dirs = iter(range(10_000))

        def cold(paths):
            """A changed catalog at service start: parse + fast validation, empty layer cache."""
            os.environ["MLX_SERVICE_CACHE_DIR"] = str(Path(tmp) / f"cold-{next(cold_dirs)}")
            try:
                return load_catalog(paths)
            finally:
                os.environ["MLX_SERVICE_CACHE_DIR"] = str(Path(tmp) / "cache")

        row(f"built-in ({n} entries): lint (parse + reference validator)",
            timed(lambda: load_catalog([], cache=False), 5), None)
        cold([])  # compiles the fast validator once (cached for later starts)
        row(f"built-in ({n} entries): changed files (parse + fast validator)", timed(lambda: cold([]), 5), 200)
        load_catalog([])  # fills the layer cache
        row(f"built-in ({n} entries): unchanged (layer cache)", timed(lambda: load_catalog([]), 20), 200)
        row("service start, fresh process: import + load, layer cache warm", service_start(str(Path(tmp) / "cache")),
            200)

        folder = Path(tmp) / "synthetic"
        folder.mkdir()
        count = synthetic(folder, 5000)
        result = load_catalog([folder], cache=False)
        assert not result.problems, result.problems[:3]
        row(f"synthetic ({count} entries): lint (parse + reference validator)",
            timed(lambda: load_catalog([folder], cache=False), 3), None)
        row(f"synthetic ({count} entries): changed files (parse + fast validator)",
            timed(lambda: cold([folder]), 3), 2000)
        load_catalog([folder])
        row(f"synthetic ({count} entries): unchanged (layer cache)", timed(lambda: load_catalog([folder]), 5), 2000)

        catalog = result.catalog
        names = [e.tag for e in catalog.entries()][:2000] + ["qwen3", "QWEN3:8B", "mlx-community/Qwen3-8B-4bit",
                                                             "syn7:s2", "deepseek-r1"]

        def resolve_all():
            for name in names:
                catalog.resolve(name)

        number = 20
        total = timeit.timeit(resolve_all, number=number)
        calls = number * len(names)
        row("resolve a name (hit), per call", total / calls, 0.020, "us")
        misses = ["qwen3:8bb", "llama3.9", "zzz"]
        per_miss = timeit.timeit(lambda: [_miss(catalog, m) for m in misses], number=3) / (3 * len(misses))
        row("resolve an unknown name (did-you-mean), per call", per_miss, None)

    print(table(rows, ["measure", "value", "unit", "target", "ok"]))
    path = write("catalog", {"rows": rows})
    print(f"\nwrote {path.relative_to(ROOT)}")


def _miss(catalog, name):
    try:
        catalog.resolve(name)
    except LookupError:
        pass


if __name__ == "__main__":
    main()
