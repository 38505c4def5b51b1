"""Read catalog YAML with ruamel.yaml, keeping every node's position.

Why ruamel in round-trip mode: it is YAML 1.2 (`yes` stays a string), reports duplicate keys, and records
line/column for each key and item, which is what makes `file:line:col` errors possible. Timestamps are kept as
plain strings so `2025-13-45` is a schema error with a position rather than a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from .problems import Problem, json_path


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.constructor.add_constructor(
        "tag:yaml.org,2002:timestamp", lambda constructor, node: constructor.construct_scalar(node)
    )
    return yaml


@dataclass
class Document:
    """A parsed YAML file; `data` is ruamel's tree (dict/list subclasses carrying positions)."""

    file: str
    data: Any

    def position(self, path) -> tuple[int, int]:
        """1-based (line, col) of the deepest node on `path` that has a recorded position."""
        node, line, col = self.data, 1, 1
        if isinstance(node, (CommentedMap, CommentedSeq)):
            line, col = node.lc.line + 1, node.lc.col + 1
        for part in path:
            try:
                if isinstance(node, CommentedMap):
                    child = node[part]
                    # a collection is located by its key; a scalar by its value
                    pos = node.lc.key(part) if isinstance(child, (dict, list)) else node.lc.value(part)
                elif isinstance(node, CommentedSeq):
                    child = node[part]
                    pos = node.lc.item(part)
                else:
                    break
            except (KeyError, IndexError, TypeError, AttributeError):
                break  # merged keys and synthesized nodes have no position: keep the parent's
            if pos and pos[0] is not None:
                line, col = pos[0] + 1, pos[1] + 1
            node = child
        return line, col

    def key_position(self, path, key) -> tuple[int, int]:
        """Position of the key `key` inside the mapping at `path` (for unknown-key errors)."""
        node = self.data
        for part in path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return self.position(path)
        try:
            line, col = node.lc.key(key)
            return line + 1, col + 1
        except (AttributeError, KeyError, TypeError):
            return self.position(path)

    def problem(self, path, code: str, message: str) -> Problem:
        line, col = self.position(path)
        return Problem(self.file, line, col, code, message, json_path(path))


def _mark_position(exc: MarkedYAMLError) -> tuple[int, int]:
    mark = exc.problem_mark or exc.context_mark
    return (mark.line + 1, mark.column + 1) if mark else (1, 1)


def _bad_utf8_position(raw: bytes, err: UnicodeDecodeError) -> tuple[int, int]:
    before = raw[: err.start]
    line = before.count(b"\n") + 1
    col = err.start - (before.rfind(b"\n") + 1) + 1
    return line, col


def parse(path: Path, display: str | None = None) -> tuple[Document | None, list[Problem]]:
    """Parse one file. Never raises for bad content: every failure is a located Problem."""
    name = display or str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, [Problem(name, 1, 1, "unreadable", f"cannot read the file: {exc.strerror}")]
    if b"\x00" in raw:
        line, col = _bad_utf8_position(raw, UnicodeDecodeError("utf-8", raw, raw.index(b"\x00"), 0, ""))
        return None, [Problem(name, line, col, "binary-file", "this is a binary file, not YAML text (NUL byte)")]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = _bad_utf8_position(raw, exc)
        return None, [Problem(name, line, col, "encoding", "not valid UTF-8: save the file as UTF-8")]
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        return None, [Problem(name, 1, 1, "empty-file", "the file is empty: it needs at least `schema_version`")]
    for number, content in enumerate(text.splitlines(), start=1):
        indent = content[: len(content) - len(content.lstrip(" \t"))]
        if "\t" in indent:
            return None, [
                Problem(name, number, indent.index("\t") + 1, "yaml-tab", "tab used for indentation: use spaces")
            ]
    try:
        data = _yaml().load(text)
    except DuplicateKeyError as exc:
        line, col = _mark_position(exc)
        key = (exc.problem or "").split('"')[1] if '"' in (exc.problem or "") else "a key"
        return None, [Problem(name, line, col, "yaml-duplicate-key", f"duplicate key {key}: keep only one")]
    except MarkedYAMLError as exc:
        line, col = _mark_position(exc)
        what = (exc.problem or exc.context or "invalid YAML").strip()
        return None, [Problem(name, line, col, "yaml-syntax", f"YAML syntax error: {what}")]
    except (YAMLError, ValueError) as exc:
        return None, [Problem(name, 1, 1, "yaml-syntax", f"YAML error: {exc}")]
    if not isinstance(data, CommentedMap):
        return None, [Problem(name, 1, 1, "not-a-mapping", "the top level must be a mapping with `schema_version`")]
    return Document(name, data), []
