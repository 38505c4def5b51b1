"""Read catalog YAML with ruamel.yaml, keeping the position of every node.

Why compose, not load: ruamel's node tree carries a line/column for every key and value, which is what makes
`file:line:col` errors possible, and composing runs in ruamel's C parser (ruamel.yaml.clib) when it is
installed (~10x faster than the round-trip loader). Values are built here from the node tree with YAML 1.2
rules (`yes` stays a string), timestamps are kept as strings (`2025-13-45` becomes a schema error with a
position, not a crash), and duplicate keys are errors.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.tag import Tag

from .problems import Problem, json_path

try:  # the C parser; the pure-Python one gives the same nodes, slower
    import _ruamel_yaml  # noqa: F401

    _PURE = False
except ImportError:  # pragma: no cover - depends on the platform's wheels
    _PURE = True

_TAG = "tag:yaml.org,2002:"
_MERGE = _TAG + "merge"
Position = tuple[int, int]
MAX_DEPTH = 100  # nesting; a catalog file needs about 8 (the C composer recurses, and crashes at ~50,000)
MAX_VALUES = 200_000  # values once aliases are expanded (a "billion laughs" file is 77 lines)
_BRACKETS = re.compile(r"[\[\]{}]")
_LINE_START = re.compile(r"^([ ]*)((?:-[ ]+)*)", re.M)


class _Float(float):
    """A YAML float. `is_integer()` is False even for 64.0, so the schema's `integer` (which JSON Schema lets
    1.0 satisfy) refuses it in both validators; everywhere else it is a float."""

    def is_integer(self) -> bool:
        return False


class _Located(YAMLError):
    """A value that cannot be read, at the place it is written."""

    def __init__(self, mark, message: str):
        super().__init__(message)
        self.mark, self.message = mark, message


class _Yaml12Resolver(VersionedResolver):
    """YAML 1.2 implicit typing, memoized by scalar text and sharing Tag objects.

    ruamel's own resolver looks up the document's YAML version for every node and builds a new Tag each time,
    which dominated the time to compose a catalog.
    """

    _table: dict | None = None
    _memo: dict[str, Tag] = {}
    _tags: dict[str, Tag] = {}

    def resolve(self, kind, value, implicit):
        if kind is not ScalarNode:
            return self.DEFAULT_SEQUENCE_TAG if kind is SequenceNode else self.DEFAULT_MAPPING_TAG
        if not implicit[0]:
            return self.DEFAULT_SCALAR_TAG
        memo = _Yaml12Resolver._memo
        tag = memo.get(value)
        if tag is None:
            if _Yaml12Resolver._table is None:
                _Yaml12Resolver._table = self.versioned_resolver
            table = _Yaml12Resolver._table
            tag = self.DEFAULT_SCALAR_TAG
            for suffix, regexp in table.get(value[:1], []) + table.get(None, []):
                if regexp.match(value):
                    tag = self._tags.get(suffix) or self._tags.setdefault(suffix, Tag(suffix=suffix))
                    break
            if len(memo) < 100_000:
                memo[value] = tag
        return tag


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
    """A parsed YAML file: plain Python `data`, plus the node tree that knows where everything is."""

    file: str
    data: Any
    root: Any = None  # ruamel node tree; walked only when a problem needs a position
    moved: dict[tuple, tuple] = field(default_factory=dict)  # a migration's new key path -> where it was written

    def position(self, path) -> Position:
        """Position of the deepest node on `path` that has one: a collection by its key, a scalar by its value."""
        path = tuple(path)
        for new, old in sorted(self.moved.items(), key=lambda item: -len(item[0])):
            if path[:len(new)] == new:
                path = old + path[len(new):]
                break
        node, where = self.root, (1, 1)
        if node is None:
            return where
        where = _at(node.start_mark)
        for part in path:
            found = _child(node, part)
            if found is None:
                break  # merged keys and migrated nodes: keep the parent's position
            key_node, node = found
            where = _at(key_node.start_mark if key_node is not None and not isinstance(node, ScalarNode)
                        else node.start_mark)
        return where

    def key_position(self, path, key) -> Position:
        """Position of `key` inside the mapping at `path` (for unknown-key errors)."""
        node = self.root
        for part in path:
            found = _child(node, part)
            if found is None:
                return self.position(path)
            node = found[1]
        found = _child(node, key)
        return _at(found[0].start_mark) if found and found[0] is not None else self.position(path)

    def problem(self, path, code: str, message: str) -> Problem:
        line, col = self.position(path)
        return Problem(self.file, line, col, code, message, json_path(path))


def _at(mark) -> Position:
    return mark.line + 1, mark.column + 1


def _child(node, part):
    """(key node or None, value node) of `part` below `node`, or None."""
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, ScalarNode) and _scalar(key_node) == part:
                return key_node, value_node
    elif isinstance(node, SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        return None, node.value[part]
    return None


def _build(node, budget: list[int] | None = None):
    """Node tree -> plain values (YAML 1.2 core schema for plain scalars; merge keys; duplicate keys fail).
    `budget`: values left to build; aliases are expanded, so a few lines can ask for billions."""
    budget = [MAX_VALUES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise _Located(node.start_mark, f"the document expands to more than {MAX_VALUES:,} values (aliases that "
                                        "repeat aliases?): a catalog file needs far fewer")
    if isinstance(node, ScalarNode):
        return _read_scalar(node)
    if isinstance(node, SequenceNode):
        return [_build(item, budget) for item in node.value]
    out: dict = {}
    merged: dict = {}
    for key_node, value_node in node.value:
        if str(key_node.ctag) == _MERGE:  # `<<: *anchor` - explicit keys win over merged ones
            sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
            for source in sources:
                if isinstance(source, MappingNode):
                    for k, v in _build(source, budget).items():
                        merged.setdefault(k, v)
            continue
        key = _read_scalar(key_node) if isinstance(key_node, ScalarNode) else str(key_node.value)
        if key in out:
            raise DuplicateKey(str(key), key_node.start_mark)
        out[key] = _build(value_node, budget)
    for key, value in merged.items():
        out.setdefault(key, value)
    return out


def _read_scalar(node: ScalarNode):
    try:
        value = _scalar(node)
    except (ValueError, OverflowError) as exc:
        raise _Located(node.start_mark, f"`{node.value[:40]}` is not a valid {str(node.ctag).rsplit(':', 1)[-1]}: "
                                        f"{str(exc).split(';')[0]}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise _Located(node.start_mark, f"`{node.value[:40]}` is not a finite number")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 2**63:
        raise _Located(node.start_mark, f"`{node.value[:40]}` is out of range: no catalog number is that large")
    return value


def _scalar(node: ScalarNode):
    tag, value = str(node.ctag), node.value
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
        return math.nan if text == ".nan" else _Float(text)
    return value  # str, timestamps and anything else stay text; the schema decides


def _mark(exc: MarkedYAMLError) -> Position:
    mark = exc.problem_mark or exc.context_mark
    return (mark.line + 1, mark.column + 1) if mark else (1, 1)


def _too_deep(text: str) -> Position | None:
    """Where the nesting passes MAX_DEPTH, estimated without parsing (the parser is what would crash): flow
    brackets open at a point, plus the indentation and `- ` markers that start its line."""
    line_depth = {m.start(): len(m.group(1)) + m.group(2).count("-") for m in _LINE_START.finditer(text)
                  if len(m.group(1)) + m.group(2).count("-") > MAX_DEPTH // 2}
    for start, depth in line_depth.items():
        if depth > MAX_DEPTH:
            return _char_position(text, start)
    flow = 0
    for m in _BRACKETS.finditer(text):
        flow = flow + 1 if m.group() in "[{" else max(flow - 1, 0)
        if flow > MAX_DEPTH:
            return _char_position(text, m.start())
    return None


def _char_position(text: str, offset: int) -> Position:
    before = text[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _byte_position(raw: bytes, offset: int) -> Position:
    before = raw[:offset]
    return before.count(b"\n") + 1, offset - (before.rfind(b"\n") + 1) + 1


def parse(path: Path, display: str | None = None) -> tuple[Document | None, list[Problem]]:
    """Parse one file. Never raises for bad content: every failure is a located Problem."""
    name = display or str(path)

    def fail(position: Position, code: str, message: str):
        return None, [Problem(name, position[0], position[1], code, " ".join(message.split()))]

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
    deep = _too_deep(text)
    if deep is not None:
        return fail(deep, "yaml-too-deep", f"nested more than {MAX_DEPTH} levels deep: a catalog file needs far "
                                           "fewer")
    try:
        node = _yaml().compose(text)
        if node is None:
            return fail((1, 1), "empty-file", "the file is empty: it needs at least `schema_version`")
        doc = Document(name, _build(node), node)
    except DuplicateKey as exc:
        return fail((exc.mark.line + 1, exc.mark.column + 1), "yaml-duplicate-key",
                    f"duplicate key `{exc.key}`: keep only one")
    except _Located as exc:
        return fail(_at(exc.mark), "yaml-value", exc.message)
    except MarkedYAMLError as exc:
        what = (exc.problem or exc.context or "invalid YAML").strip()
        return fail(_mark(exc), "yaml-syntax", f"YAML syntax error: {what}")
    except ReaderError as exc:  # a character YAML does not allow, at its place
        return fail(_char_position(text, exc.position), "yaml-character",
                    f"character U+{exc.character if isinstance(exc.character, int) else ord(exc.character):04X} "
                    "is not allowed in YAML (control characters are not): remove it")
    except (YAMLError, ValueError, RecursionError) as exc:
        return fail((1, 1), "yaml-syntax", f"YAML error: {exc}")
    if not isinstance(doc.data, dict):
        return fail((1, 1), "not-a-mapping", "the top level must be a mapping with `schema_version`")
    return doc, []
