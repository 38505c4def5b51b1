"""The loaded catalog: families, prompt styles and detection rules, with name resolution."""

from __future__ import annotations

from types import MappingProxyType

from .detect import Detection, detect
from .model import DetectionRules, Entry, Family, PromptStyle
from .resolve import Resolver, UncatalogedRepo


class Catalog:
    """Immutable after construction; build one with `load_catalog()`."""

    def __init__(self, families: dict[str, Family], prompt_styles: dict[str, PromptStyle],
                 detection: DetectionRules):
        self.families = MappingProxyType(dict(sorted(families.items())))
        self.prompt_styles = MappingProxyType(dict(prompt_styles))
        self.detection = detection
        self._resolver = Resolver(self.families)

    def __reduce__(self):  # picklable for the layer cache: rebuild the index on load
        return (Catalog, (dict(self.families), dict(self.prompt_styles), self.detection))

    def resolve(self, name: str) -> Entry | UncatalogedRepo:
        """Resolve a tag, alias or repo id; raises ModelNotFound or AmbiguousModel."""
        return self._resolver.resolve(name)

    def entries(self) -> list[Entry]:
        return [Entry(f, m, q) for f in self.families.values() for m in f.models for q in m.quantizations]

    def prompt_style(self, entry: Entry) -> PromptStyle | None:
        return self.prompt_styles.get(entry.family.prompt_style)

    def detect(self, config: dict) -> Detection:
        return detect(config, self.detection)

    def names(self) -> list[str]:
        return self._resolver.names()
