"""Catalog format versions: refuse files from the future, migrate files from the past.

A migration takes a parsed document of version N and rewrites its data, in place, to version N+1. Positions
are kept by key path, so errors in untouched parts of a migrated file still point at the author's lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .problems import Problem

if TYPE_CHECKING:
    from .yamlio import Document

CURRENT_SCHEMA_VERSION = 1

Migration = Callable[[dict], None]
# version N -> function that upgrades a version-N document to N+1
MIGRATIONS: dict[int, Migration] = {}


def upgrade(doc: Document, current: int | None = None) -> list[Problem]:
    """Bring `doc` to the current format version; returns problems when it cannot."""
    current = CURRENT_SCHEMA_VERSION if current is None else current
    version = doc.data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        return []  # the schema reports a missing or mistyped version with its position
    if version > current:
        return [
            doc.problem(
                ["schema_version"],
                "newer-schema",
                f"this file uses catalog format {version}, but this MLX Service reads formats up to {current}: "
                "upgrade MLX Service (pip install -U mlx-service)",
            )
        ]
    while version < current:
        migrate = MIGRATIONS.get(version)
        if migrate is None:
            return [
                doc.problem(
                    ["schema_version"],
                    "old-schema",
                    f"catalog format {version} can no longer be read: rewrite the file for format {current}",
                )
            ]
        migrate(doc.data)
        version += 1
        doc.data["schema_version"] = version
    return []
