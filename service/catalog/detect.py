"""Type detection: an ordered, declarative rule list maps a checkpoint's config.json to kind and loader.

Used for checkpoints the catalog does not list, and by lint to check every catalog entry's declared kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from .model import DetectionRules, Match

_MISSING = object()


@dataclass(frozen=True)
class Detection:
    kind: str
    loader: str
    moe: bool
    rule: str


class UndetectableModel(ValueError):
    """No detection rule matched the config: the catalog needs a rule (or an entry) for this architecture."""


def lookup(config: dict, dotted: str):
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


def matches(match: Match, config: dict) -> bool:
    model_type = config.get("model_type")
    if match.model_type and not (
        isinstance(model_type, str) and any(fnmatchcase(model_type, p) for p in match.model_type)
    ):
        return False
    architectures = config.get("architectures") or []
    if match.architectures and not any(
        isinstance(a, str) and fnmatchcase(a, p) for a in architectures for p in match.architectures
    ):
        return False
    if match.has_keys and any(lookup(config, k) is _MISSING for k in match.has_keys):
        return False
    if match.has_any_key and all(lookup(config, k) is _MISSING for k in match.has_any_key):
        return False
    return True


def is_moe(config: dict, moe_keys) -> bool:
    for key in moe_keys:
        value = lookup(config, key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 1:
            return True
    return False


def detect(config: dict, rules: DetectionRules) -> Detection:
    for rule in rules.rules:
        if matches(rule.match, config):
            return Detection(rule.kind, rule.loader, is_moe(config, rules.moe_keys), rule.name)
    raise UndetectableModel(
        f"no detection rule matches model_type={config.get('model_type')!r} "
        f"architectures={config.get('architectures')!r}: add a catalog entry or a detection rule"
    )
