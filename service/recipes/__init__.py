"""Build `generated` catalog entries from their recipe: random-weight checkpoints that load through the real
loaders (mlx-lm, mlx-vlm, mlx-audio), one builder per loader.

They make tests, benchmarks and the offline demo independent of the Hub. The weights come from the loader's own
model classes, the tokenizer is a byte-level BPE trained on a small built-in corpus (`tokenizer.py`), and chat
models get their prompt style's template. Everything is written to a temporary folder and renamed into place,
so a failed build never leaves a folder that looks complete.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from pathlib import Path

from ..catalog import Entry, PromptStyle

COMPLETE_MARKER = "config.json"
# loader -> module that writes a checkpoint of that loader's kind into a folder: `write(folder, entry, style)`
BUILDERS = {"mlx-lm": "text", "mlx-embeddings": "embedding", "mlx-audio": "speech", "mlx-vlm": "vision"}


def build_checkpoint(entry: Entry, style: PromptStyle | None, dest: Path) -> Path:
    """Build the checkpoint of a `generated` entry at `dest` (replacing nothing that is already complete)."""
    if entry.quantization.generated is None:
        raise ValueError(f"{entry.tag} is not a generated entry")
    if (dest / COMPLETE_MARKER).is_file():
        return dest
    builder = BUILDERS.get(entry.family.loader)
    if builder is None:
        raise ValueError(f"{entry.tag}: no recipe builds {entry.family.loader} checkpoints")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.partial-", dir=dest.parent))
    try:
        importlib.import_module(f"{__name__}.{builder}").write(work, entry, style)
        try:
            work.rename(dest)
        except OSError:  # someone else finished first; theirs is complete
            if not (dest / COMPLETE_MARKER).is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest
