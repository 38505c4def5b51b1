"""Catalog problems: one located, coded message per thing a catalog author must fix."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Problem:
    """A problem at `file:line:col` (1-based); `json_path` names the node, e.g. `$.family.models[0]`."""

    file: str
    line: int
    col: int
    code: str
    message: str
    json_path: str = "$"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}: error[{self.code}]: {self.message} (at {self.json_path})"

    def as_dict(self) -> dict:
        return {
            "file": self.file,
            "line": self.line,
            "col": self.col,
            "code": self.code,
            "message": self.message,
            "json_path": self.json_path,
        }


def json_path(parts) -> str:
    """Render a key path as a JSONPath string: `$.family.models[0].size`."""
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class CatalogError(Exception):
    """The catalog could not be loaded; `problems` says where and why."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        shown = "\n".join(str(p) for p in problems[:20])
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        super().__init__(f"the model catalog has {len(problems)} problem(s):\n{shown}{more}")
