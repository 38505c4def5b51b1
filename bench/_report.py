"""Shared by the benchmark scripts: the benchmark catalog and its models, a printed table, a JSON file."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict:
    import os

    return {"platform": platform.platform(), "machine": platform.machine(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}


def table(rows: list[dict], columns: list[str]) -> str:
    cells = [columns] + [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write(name: str, payload: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps({"machine": machine(), **payload}, indent=2))
    return path


def update_readme(script: str, text: str) -> None:
    """Replace the section of bench/README.md headed by `script` (e.g. "bench/serve.py") with `text`, keeping
    the other sections and the notes written under its table."""
    readme = Path(__file__).resolve().parent / "README.md"
    m = machine()
    marker = f"## {script}"
    section = f"{marker} ({m['date']}, {m['machine']}, {m['cpus']} CPUs, {m['platform']})\n\n```\n{text}\n```\n"
    old = readme.read_text() if readme.exists() else "# Benchmarks\n\n"
    head, _, rest = old.partition(marker)
    after = rest.split("```", 2)[2].lstrip("\n") if rest.count("```") >= 2 else ""  # notes, later sections
    readme.write_text(head.rstrip() + "\n\n" + section + ("\n" + after if after else ""))


def bench_catalog():
    """The built-in catalog plus the benchmark models declared in bench/catalog/."""
    from service.catalog import load_catalog

    return load_catalog([Path(__file__).resolve().parent / "catalog"]).raise_for_problems()


def build(tag: str, folder_for):
    """(entry, checkpoint folder) of a generated benchmark model, built on first use at `folder_for(entry)`."""
    from service.recipes import build_checkpoint

    catalog = bench_catalog()
    entry = catalog.resolve(tag)
    return entry, build_checkpoint(entry, catalog.prompt_style(entry), folder_for(entry))
