"""Load catalog layers (built-in first, then user paths) into one Catalog, collecting every problem.

A layer is a folder (all `*.yaml`/`*.yml` below it, in name order) or a single file. Within a layer names must
be unique; a later layer's `family` replaces an earlier one of the same name, and `extends` patches one.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from . import build
from . import cache as layer_cache
from .catalog import Catalog
from .model import DetectionRules, Family, Location, Model, PromptStyle
from .paths import builtin_catalog_dir
from .problems import CatalogError, Problem, json_path
from .semantic import check

if TYPE_CHECKING:
    from .yamlio import Document

ENV_CATALOG_PATH = "MLX_SERVICE_CATALOG_PATH"


@dataclass
class Locator:
    """Finds positions inside the parsed documents for problems found after building."""

    documents: dict[str, Document | None] = field(default_factory=dict)

    def problem(self, loc: Location | None, sub: list, code: str, message: str) -> Problem:
        if loc is None:
            return Problem("<catalog>", 1, 1, code, message)
        path = list(loc.path) + list(sub)
        doc = self.document(loc.file)
        if doc is None:
            return Problem(loc.file, 1, 1, code, message, json_path(path))
        return doc.problem(path, code, message)

    def where(self, loc: Location) -> str:
        return f"{loc.file}:{self.problem(loc, [], '', '').line}"

    def document(self, file: str) -> Document | None:
        """The parsed file; a layer that came from the cache is parsed again only when a problem needs it."""
        if file not in self.documents:
            from .yamlio import parse

            self.documents[file] = parse(Path(file), file)[0]
        return self.documents[file]


@dataclass
class LoadResult:
    catalog: Catalog
    problems: list[Problem]
    files: list[str]

    def raise_for_problems(self) -> Catalog:
        if self.problems:
            raise CatalogError(self.problems)
        return self.catalog


def user_paths_from_env() -> list[Path]:
    raw = os.environ.get(ENV_CATALOG_PATH, "")
    return [Path(p).expanduser() for p in raw.split(os.pathsep) if p.strip()]


def layer_files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.suffix in {".yaml", ".yml"} and p.is_file())


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def load_catalog(paths: list[Path] | None = None, *, builtin: bool = True, cache: bool = True) -> LoadResult:
    """Load the built-in catalog (unless `builtin=False`) plus `paths` (default: MLX_SERVICE_CATALOG_PATH).

    `cache=False` parses every file and validates it with the reference validator (lint does); otherwise unchanged
    clean layers come from the layer cache and changed ones are checked by the fast validator first.
    """
    layers = ([builtin_catalog_dir()] if builtin else []) + list(user_paths_from_env() if paths is None else paths)
    locator = Locator()
    problems: list[Problem] = []
    families: dict[str, Family] = {}
    styles: dict[str, PromptStyle] = {}
    detection: DetectionRules | None = None
    files: list[str] = []
    for root in layers:
        if not root.exists():
            problems.append(Problem(str(root), 1, 1, "missing-path", "catalog path does not exist"))
            continue
        entries = [(path, _display(path)) for path in layer_files(root)]
        files.extend(display for _, display in entries)
        layer = _read_layer(entries, locator, problems, cache)
        layer.merge_into(families, styles)
        if layer.detection is not None:
            detection = layer.detection if detection is None else DetectionRules(
                layer.detection.rules + detection.rules,
                tuple(dict.fromkeys(layer.detection.moe_keys + detection.moe_keys)),
            )
    catalog = Catalog(families, styles, detection or DetectionRules((), ()))
    problems.extend(check(catalog, locator, order=list(families)))
    return LoadResult(catalog, sorted(set(problems)), files)


PARALLEL_FILES = 64  # a layer this large is parsed by a process pool (parsing is CPU-bound Python)


def check_file(path: Path, display: str, thorough: bool) -> tuple[Document | None, list[Problem]]:
    """Parse, upgrade and validate one file: a clean document, or its located problems."""
    # Imported here: the YAML parser and jsonschema are only needed when a layer is not in the cache,
    # and importing them costs more than a warm start takes.
    from .validate import validate
    from .versions import upgrade
    from .yamlio import parse

    doc, problems = parse(path, display)
    if doc is None:
        return None, problems
    found = upgrade(doc) or validate(doc, thorough)
    return (None, found) if found else (doc, [])


def _check_in_worker(job: tuple[Path, str, bool]):
    doc, problems = check_file(*job)
    return (doc.data if doc else None), problems  # no node tree: positions are re-read only if needed


def _check_all(entries: list[tuple[Path, str]], thorough: bool):
    jobs = [(path, display, thorough) for path, display in entries]
    workers = min(os.cpu_count() or 1, 4)
    if len(jobs) >= PARALLEL_FILES and workers > 1:
        from concurrent.futures import ProcessPoolExecutor

        try:
            with ProcessPoolExecutor(workers) as pool:
                results = list(pool.map(_check_in_worker, jobs, chunksize=max(1, len(jobs) // (workers * 4))))
        except (OSError, RuntimeError):  # no processes allowed here: parse in this one
            results = None
        if results is not None:
            from .yamlio import Document

            for (path, display), (data, problems) in zip(entries, results):
                yield display, (Document(display, data) if data is not None else None), problems
            return
    for path, display in entries:
        doc, problems = check_file(path, display, thorough)
        yield display, doc, problems


def _read_layer(entries: list[tuple[Path, str]], locator: Locator, problems: list[Problem], cache: bool) -> _Layer:
    key = layer_cache.layer_key(entries) if cache else ""
    cached = layer_cache.load(key) if cache else None
    layer = _Layer(locator, problems)
    if cached is not None:
        layer.families, layer.styles, layer.detection, layer.detection_file = cached
        return layer
    before = len(problems)
    for display, doc, found in _check_all(entries, thorough=not cache):
        if doc is not None and doc.root is not None:
            locator.documents[display] = doc
        if doc is None:
            problems.extend(found)
        else:
            layer.add(doc)
    if cache and len(problems) == before and not layer.patches:
        layer_cache.store(key, (layer.families, layer.styles, layer.detection, layer.detection_file))
    return layer


class _Layer:
    """The documents of one layer, before they are merged over the earlier layers."""

    def __init__(self, locator: Locator, problems: list[Problem]):
        self.locator = locator
        self.problems = problems
        self.families: dict[str, Family] = {}
        self.patches: list[tuple[Document, dict]] = []
        self.styles: dict[str, PromptStyle] = {}
        self.detection: DetectionRules | None = None
        self.detection_file: str | None = None

    def add(self, doc: Document) -> None:
        data = doc.data
        if "family" in data:
            self._unique(self.families, build.family(doc, data["family"], ["family"]), "family")
        if "extends" in data:
            self.patches.append((doc, data["extends"]))
        for i, raw in enumerate(data.get("prompt_styles", [])):
            self._unique(self.styles, build.prompt_style(doc, raw, ["prompt_styles", i]), "prompt style")
        if "detection" in data:
            if self.detection is not None:
                self.problems.append(self._problem(doc, ["detection"], "duplicate-detection",
                                                   f"detection rules are already defined in {self.detection_file}:"
                                                   " keep one detection file per catalog folder"))
            else:
                self.detection = build.detection(doc, data["detection"], ["detection"])
                self.detection_file = doc.file

    def _problem(self, doc: Document, path: list, code: str, message: str) -> Problem:
        return self.locator.problem(Location(doc.file), path, code, message)

    def _unique(self, known: dict, item, what: str) -> None:
        """Within one layer a name is defined once; a second definition is a located problem."""
        if item.name in known:
            where = self.locator.where(known[item.name].location)
            code = f"duplicate-{what.replace(' ', '-')}"
            message = f"{what} `{item.name}` is already defined in {where}: rename one"
            self.problems.append(self.locator.problem(item.location, ["name"], code, message))
        else:
            known[item.name] = item

    def merge_into(self, families: dict[str, Family], styles: dict[str, PromptStyle]) -> None:
        families.update(self.families)
        styles.update(self.styles)
        for doc, raw in self.patches:
            name = raw["family"]
            if name not in families:
                close = difflib.get_close_matches(name, list(families), n=1)
                hint = f" (did you mean `{close[0]}`?)" if close else ""
                self.problems.append(self._problem(doc, ["extends", "family"], "unknown-family",
                                                 f"`extends` names family `{name}`, which no earlier catalog "
                                                 f"layer defines{hint}: define it with `family:` instead"))
                continue
            families[name] = self._patched(families[name], doc, raw)

    def _patched(self, fam: Family, doc: Document, raw: dict) -> Family:
        changes = {k: build.plain(raw[k]) for k in ("description", "prompt_style", "default_size") if k in raw}
        if "context" in raw:
            changes["context"] = build.context(raw["context"])
        for key in ("abilities", "aliases"):
            if key in raw:
                changes[key] = tuple(raw[key])
        if "sampling" in raw:
            changes["sampling"] = dataclasses.replace(fam.sampling, **build.plain(raw["sampling"]))
        models = {m.size: m for m in fam.models}
        for i, patch in enumerate(raw.get("models", [])):
            path = ["extends", "models", i]
            size = str(patch["size"])
            if size in models:
                models[size] = self._patched_model(models[size], doc, patch, path)
                continue
            missing = [k for k in ("parameters", "architecture", "default_quantization", "quantizations")
                       if k not in patch]
            if missing:
                self.problems.append(self._problem(doc, path, "incomplete-model",
                                                 f"size `{size}` is new to family `{fam.name}`, so it needs "
                                                 f"{', '.join('`' + k + '`' for k in missing)}"))
                continue
            models[size] = build.model(doc, patch, path)
        return dataclasses.replace(fam, models=tuple(models.values()), **changes)

    @staticmethod
    def _patched_model(model: Model, doc: Document, patch: dict, path: list) -> Model:
        built = {k: build.plain(patch[k]) for k in ("default_quantization", "license", "verified") if k in patch}
        if "context" in patch:
            built["context"] = build.context(patch["context"])
        if "sources" in patch:
            built["sources"] = tuple(patch["sources"])
        if "parameters" in patch:
            built["parameters"] = float(patch["parameters"])
        if "active_parameters" in patch:
            built["active_parameters"] = float(patch["active_parameters"])
        if "aliases" in patch:
            built["aliases"] = tuple(patch["aliases"])
        if "architecture" in patch:
            built["architecture"] = build.architecture(patch["architecture"])
        quants = {q.name: q for q in model.quantizations}
        for j, q in enumerate(patch.get("quantizations", [])):
            new = build.quantization(doc, q, path + ["quantizations", j])
            quants[new.name] = new
        return dataclasses.replace(model, quantizations=tuple(quants.values()), **built)
