"""Name resolution: Ollama-style tags, aliases and Hub repo ids -> one catalog entry.

All accepted spellings are precomputed into one case-insensitive index at load time, so a lookup is a dict
hit (the benchmark target is < 20 µs); suggestions are only computed when a name is unknown.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from .model import Entry, Family

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_HUB_PREFIXES = ("hf.co/", "huggingface.co/", "https://huggingface.co/")


@dataclass(frozen=True)
class UncatalogedRepo:
    """A Hub repo id the catalog does not list: it is typed by the detection rules once downloaded."""

    repo: str

    @property
    def tag(self) -> str:
        return self.repo


class ResolveError(LookupError):
    """Base of name-resolution errors; `str()` is a sentence a user can act on."""


class ModelNotFound(ResolveError):
    def __init__(self, name: str, suggestions: list[str]):
        self.name = name
        self.suggestions = suggestions
        hint = f"; did you mean {', '.join(repr(s) for s in suggestions)}?" if suggestions else ""
        super().__init__(f"model {name!r} is not in the catalog{hint} "
                         "(list the catalog with `tools/catalog list`, or use a Hugging Face repo id org/name)")


class AmbiguousModel(ResolveError):
    def __init__(self, name: str, candidates: list[str]):
        self.name = name
        self.candidates = candidates
        super().__init__(f"model name {name!r} is ambiguous: it matches {', '.join(candidates)}; use one of these")


def is_repo_id(name: str) -> bool:
    return bool(REPO_ID.match(name)) and ".." not in name and "--" not in name


def spellings(family: Family) -> list[tuple[str, Entry, bool]]:
    """Every name of every entry of a family: (key, entry, is_primary). Primary names feed 'did you mean'."""
    out: list[tuple[str, Entry, bool]] = []
    default_model = family.model(family.default_size)
    for model in family.models:
        size_default = model.quantization(model.default_quantization)
        for quant in model.quantizations:
            entry = Entry(family, model, quant)
            out += [(f"{family.name}:{model.size}-{quant.name}", entry, True),
                    (f"{family.name}-{model.size}-{quant.name}", entry, False)]
            if quant.repo:
                out.append((quant.repo, entry, False))
            if model is default_model:
                out.append((f"{family.name}:{quant.name}", entry, False))
        if size_default is None:
            continue
        entry = Entry(family, model, size_default)
        out += [(f"{family.name}:{model.size}", entry, True), (f"{family.name}-{model.size}", entry, False)]
        out += [(alias, entry, True) for alias in model.aliases]
        if model is default_model:
            out += [(family.name, entry, True), (f"{family.name}:latest", entry, False)]
            out += [(alias, entry, True) for alias in family.aliases]
    return out


class Resolver:
    def __init__(self, families: dict[str, Family]):
        self._index: dict[str, list[Entry]] = {}
        self._primary: list[str] = []
        for family in families.values():
            for key, entry, primary in spellings(family):
                bucket = self._index.setdefault(key.lower(), [])
                if all(e.tag != entry.tag for e in bucket):
                    bucket.append(entry)
                if primary:
                    self._primary.append(key)

    def resolve(self, name: str) -> Entry | UncatalogedRepo:
        key = name.strip()
        for prefix in _HUB_PREFIXES:
            if key.lower().startswith(prefix):
                key = key[len(prefix):]
                break
        found = self._index.get(key.lower())
        if found:
            if len(found) > 1:
                raise AmbiguousModel(name, sorted(e.tag for e in found))
            return found[0]
        if is_repo_id(key):
            return UncatalogedRepo(key)
        raise ModelNotFound(name, difflib.get_close_matches(key.lower(), self._primary, n=3, cutoff=0.6))

    def names(self) -> list[str]:
        return sorted(self._index)
