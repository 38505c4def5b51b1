"""`tools/catalog verify --online`: check catalog entries against the Hub, reporting lint-style lines.

For each entry with a repo: the repo and (pinned) revision exist, config.json's facts match the entry's
architecture and quantization, and the weight files' total size matches `size_bytes` when given.
"""

from __future__ import annotations

import contextlib
import json
import struct
import tempfile
from pathlib import Path

from ..catalog import Catalog, Entry
from ..catalog.problems import Problem
from ..errors import ServiceError
from .pull import Puller

_FACTS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim",
          "intermediate_size", "vocab_size", "max_position_embeddings", "sliding_window", "num_experts",
          "num_experts_per_tok", "moe_intermediate_size")


def fetch_json(hub: Puller, repo: str, sha: str, path: str) -> dict:
    from huggingface_hub.utils import httpx

    r = httpx.get(f"{hub.endpoint}/{repo}/resolve/{sha}/{path}", headers=hub.headers(), timeout=30,
                  follow_redirects=True)
    return r.json() if r.status_code == 200 else {}


def safetensors_header(hub: Puller, repo: str, sha: str, path: str) -> dict:
    """A weight file's header, read with two small Range requests instead of downloading the file."""
    from huggingface_hub.utils import httpx

    url = f"{hub.endpoint}/{repo}/resolve/{sha}/{path}"
    head = httpx.get(url, headers={**hub.headers(), "Range": "bytes=0-7"}, timeout=30, follow_redirects=True)
    (length,) = struct.unpack("<Q", head.content[:8])
    body = httpx.get(url, headers={**hub.headers(), "Range": f"bytes=8-{7 + length}"}, timeout=30,
                     follow_redirects=True)
    return json.loads(body.content[:length])


def verify_entry(hub: Puller, catalog: Catalog, entry: Entry, at) -> list[Problem]:
    q, arch = entry.quantization, entry.model.architecture
    loc = q.location
    try:
        plan = hub.plan(q.repo, q.revision)
    except ServiceError as exc:
        return [at(loc, ["repo"], "verify-repo", exc.message)]
    problems = []
    config = fetch_json(hub, q.repo, plan.sha, "config.json")
    text = {**config, **(config.get("text_config") or {})}
    if config.get("model_type") != arch.model_type:
        problems.append(at(entry.model.location, ["architecture", "model_type"], "verify-config",
                           f"{q.repo} has model_type {config.get('model_type')!r}, the catalog says "
                           f"{arch.model_type!r}"))
    facts = arch.config_dict()
    for key in _FACTS:
        if key in facts and key in text and text[key] != facts[key]:
            problems.append(at(entry.model.location, ["architecture", key], "verify-config",
                               f"{q.repo} config.json has {key}={text[key]!r}, the catalog says {facts[key]!r}"))
    quant = config.get("quantization") or config.get("quantization_config") or {}
    if quant.get("bits") and q.mode not in ("bfloat16", "float16", "float32") and quant["bits"] != q.bits:
        problems.append(at(loc, ["bits"], "verify-config",
                           f"{q.repo} is quantized to {quant['bits']} bits, the catalog says {q.bits}"))
    weights = sum(f.size for f in plan.files if f.path.endswith(".safetensors"))
    if q.size_bytes and weights and abs(weights - q.size_bytes) > 0.01 * weights:
        problems.append(at(loc, ["size_bytes"], "verify-size",
                           f"{q.repo} weighs {weights:,} bytes, the catalog says {q.size_bytes:,}"))
    return problems


@contextlib.contextmanager
def header_only_checkpoint(repo: str, revision: str | None = None):
    """A temporary folder with the repo's JSON files and header-only copies of its weight files: all that
    `scaffold` reads, without downloading the weights."""
    hub = Puller(offline=False)
    plan = hub.plan(repo, revision)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / repo.split("/")[-1]
        folder.mkdir()
        for f in plan.files:
            if f.path.endswith(".json") and "/" not in f.path:
                (folder / f.path).write_text(json.dumps(fetch_json(hub, repo, plan.sha, f.path)))
            elif f.path.endswith(".safetensors") and "/" not in f.path:
                header = json.dumps(safetensors_header(hub, repo, plan.sha, f.path)).encode()
                (folder / f.path).write_bytes(struct.pack("<Q", len(header)) + header)
        yield folder
