"""Read catalog YAML with ruamel.yaml, keeping the position of every node.

Why compose, not load: ruamel's node tree carries a line/column for every key and value, which is what makes
`file:line:col` errors possible, and composing runs in ruamel's C parser (ruamel.yaml.clib) when it is
installed (~10x faster than the round-trip loader). Values are built here from the node tree with YAML 1.2
rules (`yes` stays a string), timestamps are kept as strings (`2025-13-45` becomes a schema error with a
position, not a crash), and duplicate keys are errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.tag import Tag

from .problems import Problem, json_path

try:  # the C parser; the pure-Python one gives the same nodes, slower
    import _ruamel_yaml  # noqa: F401

    _PURE = False
except ImportError:  # pragma: no cover - depends on the platform's wheels
    _PURE = True

_TAG = "tag:yaml.org,2002:"
Position = tuple[int, int]


class _Yaml12Resolver(VersionedResolver):
    """YAML 1.2 implicit typing without ruamel's per-node version lookup (which dominates compose time)."""

    _table = None

    def resolve(self, kind, value, implicit):
        if kind is ScalarNode:
            if implicit[0]:
                table = _Yaml12Resolver._table
                if table is None:
                    table = _Yaml12Resolver._table = self.versioned_resolver
                for tag, regexp in table.get(value[:1], []) + table.get(None, []):
                    if regexp.match(value):
                        return Tag(suffix=tag)
            return self.DEFAULT_SCALAR_TAG
        return self.DEFAULT_SEQUENCE_TAG if kind is SequenceNode else self.DEFAULT_MAPPING_TAG


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=_PURE)
    yaml.Resolver = _Yaml12Resolver
    return yaml


class DuplicateKey(YAMLError):
    def __init__(self, key: str, mark):
        super().__init__(key)
        self.key, self.mark = key, mark


@dataclass
class Document:
    """A parsed YAML file: plain Python `data`, plus 1-based positions by key path."""

    file: str
    data: Any
    values: dict[tuple, Position] = field(default_factory=dict)  # where each node starts
    keys: dict[tuple, Position] = field(default_factory=dict)  # where a mapping member's key is

    def position(self, path) -> Position:
        """Position of the deepest node on `path` that has one: a collection by its key, a scalar by its value."""
        path = tuple(path)
        for end in range(len(path), -1, -1):
            prefix = path[:end]
            if prefix in self.values:
                if prefix in self.keys and isinstance(self._node(prefix), (dict, list)):
                    return self.keys[prefix]
                return self.values[prefix]
        return 1, 1

    def key_position(self, path, key) -> Position:
        """Position of `key` inside the mapping at `path` (for unknown-key errors)."""
        return self.keys.get(tuple(path) + (key,)) or self.position(path)

    def problem(self, path, code: str, message: str) -> Problem:
        line, col = self.position(path)
        return Problem(self.file, line, col, code, message, json_path(path))

    def _node(self, path):
        node = self.data
        try:
            for part in path:
                node = node[part]
        except (KeyError, IndexError, TypeError):
            return None
        return node


class _Builder:
    """Node tree -> plain values, recording positions (YAML 1.2 core schema for plain scalars)."""

    def __init__(self, doc: Document):
        self.doc = doc

    def build(self, node, path: tuple):
        self.doc.values[path] = (node.start_mark.line + 1, node.start_mark.column + 1)
        if isinstance(node, MappingNode):
            return self._mapping(node, path)
        if isinstance(node, SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        return _scalar(node)

    def _mapping(self, node: MappingNode, path: tuple) -> dict:
        out: dict = {}
        merged: dict = {}
        for key_node, value_node in node.value:
            if key_node.tag == _TAG + "merge":  # `<<: *anchor` - explicit keys win over merged ones
                sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
                for source in sources:
                    if isinstance(source, MappingNode):
                        for k, v in self._mapping(source, path).items():
                            merged.setdefault(k, v)
                continue
            key = _scalar(key_node) if isinstance(key_node, ScalarNode) else str(key_node.value)
            if key in out:
                raise DuplicateKey(str(key), key_node.start_mark)
            self.doc.keys[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = self.build(value_node, path + (key,))
        for key, value in merged.items():
            out.setdefault(key, value)
        return out


def _scalar(node: ScalarNode):
    tag, value = node.tag, node.value
    if tag == _TAG + "null":
        return None
    if tag == _TAG + "bool":
        return value.lower() == "true"
    if tag == _TAG + "int":
        text = value.replace("_", "")
        try:
            return int(text, 0)
        except ValueError:
            return int(text, 10)  # leading zeros
    if tag == _TAG + "float":
        text = value.replace("_", "").lower()
        if text.endswith(".inf"):
            return -math.inf if text.startswith("-") else math.inf
        return math.nan if text == ".nan" else float(text)
    return value  # str, timestamps and anything else stay text; the schema decides


def _mark(exc: MarkedYAMLError) -> Position:
    mark = exc.problem_mark or exc.context_mark
    return (mark.line + 1, mark.column + 1) if mark else (1, 1)


def _byte_position(raw: bytes, offset: int) -> Position:
    before = raw[:offset]
    return before.count(b"\n") + 1, offset - (before.rfind(b"\n") + 1) + 1


def parse(path: Path, display: str | None = None) -> tuple[Document | None, list[Problem]]:
    """Parse one file. Never raises for bad content: every failure is a located Problem."""
    name = display or str(path)

    def fail(position: Position, code: str, message: str):
        return None, [Problem(name, position[0], position[1], code, message)]

    try:
        raw = path.read_bytes()
    except OSError as exc:
        return fail((1, 1), "unreadable", f"cannot read the file: {exc.strerror}")
    if b"\x00" in raw:
        return fail(_byte_position(raw, raw.index(b"\x00")), "binary-file",
                    "this is a binary file, not YAML text (NUL byte)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return fail(_byte_position(raw, exc.start), "encoding", "not valid UTF-8: save the file as UTF-8")
    for number, content in enumerate(text.splitlines(), start=1):
        indent = content[: len(content) - len(content.lstrip(" \t"))]
        if "\t" in indent:
            return fail((number, indent.index("\t") + 1), "yaml-tab", "tab used for indentation: use spaces")
    doc = Document(name, None)
    try:
        node = _yaml().compose(text)
        if node is None:
            return fail((1, 1), "empty-file", "the file is empty: it needs at least `schema_version`")
        doc.data = _Builder(doc).build(node, ())
    except DuplicateKey as exc:
        return fail((exc.mark.line + 1, exc.mark.column + 1), "yaml-duplicate-key",
                    f"duplicate key `{exc.key}`: keep only one")
    except MarkedYAMLError as exc:
        what = (exc.problem or exc.context or "invalid YAML").strip()
        return fail(_mark(exc), "yaml-syntax", f"YAML syntax error: {what}")
    except (YAMLError, ValueError, RecursionError) as exc:
        return fail((1, 1), "yaml-syntax", f"YAML error: {exc}")
    if not isinstance(doc.data, dict):
        return fail((1, 1), "not-a-mapping", "the top level must be a mapping with `schema_version`")
    return doc, []
