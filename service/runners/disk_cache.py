"""The prefix cache's SSD tier: KV caches of finished prompts, written to disk in mlx-lm's prompt-cache format,
found again after an unload or a restart.

Writes happen on a thread of their own, never on the decode path: the runner hands over a finished job's cache
(which nothing mutates any more) and goes on. The thread runs at normal priority on purpose: niced, it was
descheduled while holding the GIL and stalled the runner behind it (8 streams decoding during spills: 0.93x
niced, 0.97x not; bench/spill.py). Each file is named by a digest of the model key (the checkpoint's name, folder
and weights' size and time, so another revision never matches) and its tokens. Its checksum is an XXH3-128 of the
arrays and metadata as loaded, so a read is one pass over the file plus a hash at memory speed (a SHA-256 of the
file's bytes cost more than the read itself); a corrupt or truncated file is dropped with a warning and the
prompt recomputed. The tier is capped in bytes, least recently used first out; `clear` empties it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger("mlx_service.disk_cache")
MIN_TOKENS = 256  # shorter prompts recompute faster than a file is read
MAX_PENDING = 4  # finished caches waiting for the writer: when it is behind, more are skipped, not held in memory


@dataclass
class _Entry:
    tokens: tuple[int, ...]
    file: str
    size: int
    checksum: str
    used: float


class DiskPromptCache:
    def __init__(self, folder: Path, model_key: str, max_bytes: int):
        self.folder, self.max_bytes = folder, max_bytes
        self.key = hashlib.sha256(model_key.encode()).hexdigest()[:16]
        self.folder.mkdir(parents=True, exist_ok=True)
        self._index_file = self.folder / f"{self.key}.index.json"
        self._lock = threading.Lock()
        self._entries: dict[tuple[int, ...], _Entry] = self._read_index()
        self._writes: queue.Queue = queue.Queue()
        self.counts = {"disk_hits": 0, "disk_misses": 0, "disk_writes": 0, "disk_skipped": 0, "disk_dropped": 0,
                       "disk_read_bytes": 0, "disk_read_ms": 0}
        self._thread = threading.Thread(target=self._writer, name=f"disk cache {self.key}", daemon=True)
        self._thread.start()

    # ---- reading (the runner's thread) ------------------------------------------------------------------
    def fetch(self, tokens: list[int], least: int = 1) -> tuple[Any, int] | None:
        """(cache, tokens it holds) sharing the longest prefix with `tokens` (at least `least`), or None. A stored
        cache that runs past the shared prefix (a finished turn's answer, say) is trimmed back to it."""
        with self._lock:
            shared = [(_common(e.tokens, tokens), e) for e in self._entries.values()]
        common, best = max(shared, key=lambda pair: pair[0], default=(0, None))
        if best is None or common < least:
            self.counts["disk_misses"] += 1
            return None
        from mlx_lm.models.cache import can_trim_prompt_cache, trim_prompt_cache

        started = time.perf_counter()
        try:
            arrays, metadata, checksum = _load(self.folder / best.file)
            if checksum != best.checksum:
                raise ValueError("its checksum does not match")
            cache = _prompt_cache(arrays, metadata)
            if common < len(best.tokens):
                if not can_trim_prompt_cache(cache):
                    self.counts["disk_misses"] += 1
                    return None
                trim_prompt_cache(cache, len(best.tokens) - common)
        except Exception as exc:  # corrupt, truncated, missing: recompute, never crash or use it
            log.warning("dropping prefix-cache file %s: %s", best.file, exc)
            self._drop(best)
            self.counts["disk_dropped"] += 1
            self.counts["disk_misses"] += 1
            return None
        best.used = time.time()
        self.counts["disk_hits"] += 1
        self.counts["disk_read_bytes"] += best.size
        self.counts["disk_read_ms"] += int((time.perf_counter() - started) * 1000)
        return cache, common

    # ---- writing (its own thread) -------------------------------------------------------------------------
    def store(self, tokens: list[int], cache: list) -> None:
        """Queue a finished prompt's cache for writing, on the runner's thread; returns once it is queued.

        A batch hands out a finished sequence's cache as lazy slices on the runner's stream, which the writer
        thread cannot evaluate (it would wait for ever), so they are computed here: one copy of this sequence's
        KV. A cache arriving while the writer is behind by MAX_PENDING is skipped (counted) rather than held:
        each one is a whole KV cache of memory."""
        import mlx.core as mx

        if len(tokens) < MIN_TOKENS or self.max_bytes <= 0:
            return
        with self._lock:
            if tuple(tokens) in self._entries:
                return
        if self._writes.qsize() >= MAX_PENDING:
            self.counts["disk_skipped"] += 1
            return
        mx.eval([c.state for c in cache])
        self._writes.put((tuple(tokens), cache))

    def _writer(self) -> None:
        from mlx_lm.models.cache import save_prompt_cache

        while (item := self._writes.get()) is not None:
            tokens, cache = item
            if tokens is None:  # flush(): everything queued before it is written
                cache.set()
                continue
            digest = hashlib.sha256(self.key.encode() + json.dumps(tokens).encode()).hexdigest()[:32]
            name = f"{self.key}-{digest}.safetensors"
            path, partial = self.folder / name, self.folder / f"{self.key}-{digest}.partial.safetensors"
            try:
                save_prompt_cache(str(partial), cache, metadata={"model": self.key})
                os.replace(partial, path)  # a crash mid-write never leaves a file that looks complete
                # The checksum of what a read will find, from the file as written (still in the page cache).
                entry = _Entry(tokens, name, path.stat().st_size, _load(path)[2], time.time())
            except Exception as exc:
                log.warning("could not write a prefix-cache file: %s", exc)
                partial.unlink(missing_ok=True)
                continue
            with self._lock:
                self._entries[tokens] = entry
            self.counts["disk_writes"] += 1
            self._evict()
            self._write_index()

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until the queued writes are on disk (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        while not self._writes.empty() and time.monotonic() < deadline:
            time.sleep(0.01)
        done = threading.Event()
        self._writes.put((None, done))
        done.wait(max(deadline - time.monotonic(), 0))

    def close(self) -> None:
        self._writes.put(None)
        self._thread.join(timeout=60)

    # ---- bookkeeping --------------------------------------------------------------------------------------
    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(e.size for e in self._entries.values())

    def clear(self) -> int:
        with self._lock:
            entries = list(self._entries.values())
        for entry in entries:
            self._drop(entry)
        self._write_index()
        return len(entries)

    def _evict(self) -> None:
        with self._lock:
            ordered = sorted(self._entries.values(), key=lambda e: e.used)
            total = sum(e.size for e in ordered)
        for entry in ordered:
            if total <= self.max_bytes:
                break
            self._drop(entry)
            total -= entry.size

    def _drop(self, entry: _Entry) -> None:
        with self._lock:
            self._entries.pop(entry.tokens, None)
        (self.folder / entry.file).unlink(missing_ok=True)

    def _read_index(self) -> dict[tuple[int, ...], _Entry]:
        try:
            rows = json.loads(self._index_file.read_text())
            entries = {tuple(r["tokens"]): _Entry(tuple(r["tokens"]), r["file"], r["size"], r["checksum"], r["used"])
                       for r in rows}
        except (OSError, ValueError, KeyError, TypeError):
            entries = {}
        listed = {e.file for e in entries.values()}
        for path in self.folder.glob(f"{self.key}-*"):  # a crash's partial file, an older format's: not ours now
            if path.name not in listed:
                path.unlink(missing_ok=True)
        return {t: e for t, e in entries.items() if (self.folder / e.file).is_file()}

    def _write_index(self) -> None:
        with self._lock:
            rows = [{"tokens": list(e.tokens), "file": e.file, "size": e.size, "checksum": e.checksum, "used": e.used}
                    for e in self._entries.values()]
        partial = self._index_file.with_suffix(".partial")
        partial.write_text(json.dumps(rows))
        os.replace(partial, self._index_file)


def _common(a: tuple[int, ...], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _load(path: Path) -> tuple[dict, dict, str]:
    """The file's arrays and metadata, and their checksum: each array is hashed while the next ones load."""
    import mlx.core as mx
    import xxhash

    arrays, metadata = mx.load(str(path), return_metadata=True)
    names = sorted(arrays)
    mx.async_eval([arrays[name] for name in names])
    digest = xxhash.xxh3_128(json.dumps(metadata, sort_keys=True).encode())
    for name in names:
        digest.update(f"{name}:{arrays[name].dtype}:{arrays[name].shape}".encode())
        digest.update(memoryview(arrays[name]))  # waits for this array only
    return arrays, metadata, digest.hexdigest()


def _prompt_cache(arrays: dict, metadata: dict) -> list:
    """mlx-lm's `load_prompt_cache` on arrays already read (it takes only a file name, and reading the file twice
    would double the restore time)."""
    from mlx.utils import tree_unflatten
    from mlx_lm.models import cache as classes

    _, names, scalars = tree_unflatten(list(metadata.items()))
    for pos, kind in scalars[1:]:
        array = arrays[pos]
        arrays[pos] = {"scalar": lambda: array.item(), "string": lambda: "".join(chr(i) for i in array.tolist()),
                       "none": lambda: None}[kind]()
    states = tree_unflatten(list(arrays.items()))
    kinds = [getattr(classes, name, None) for name in names]
    if not all(isinstance(k, type) and issubclass(k, classes._BaseCache) for k in kinds):
        raise ValueError(f"it names an unknown cache class among {names}")
    return [kind.from_state(state) for kind, state in zip(kinds, states)]


def clear_folder(folder: Path, keep: set[str]) -> int:
    """Delete every cached prefix under `folder` except those of the model keys in `keep` (loaded runners clear
    their own); returns the files removed."""
    removed = 0
    for path in folder.glob("*"):
        if path.is_file() and path.name.split("-")[0].split(".")[0] not in keep:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
