"""Catalog format versions: refuse files from the future, migrate files from the past.

A migration takes a parsed document of version N and rewrites its data, in place, to version N+1. Positions
are kept by key path, so errors in untouched parts of a migrated file still point at the author's lines.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .problems import Problem

if TYPE_CHECKING:
    from .yamlio import Document

CURRENT_SCHEMA_VERSION = 2

Migration = Callable[["Document"], None]


def _v1_to_v2(doc: Document) -> None:
    """Format 2: `context_length: N` becomes `context: {native: N}` (format 2 also knows the extended context),
    and a size counts as verified only with the `sources` its facts were checked against, which format 1 could
    not say: every size that brings architecture facts is marked `verified: false`."""
    data = doc.data
    holders: list[tuple[tuple, dict]] = []
    for top in ("family", "extends"):
        if isinstance(data.get(top), dict):
            holders.append(((top,), data[top]))
            models = data[top].get("models")
            for i, model in enumerate(models if isinstance(models, list) else []):
                if isinstance(model, dict):
                    holders.append(((top, "models", i), model))
                    if "architecture" in model and "verified" not in model:
                        model["verified"] = False
    for path, holder in holders:
        if "context_length" in holder:
            holder["context"] = {"native": holder.pop("context_length")}
            doc.moved[path + ("context",)] = path + ("context_length",)


# version N -> function that upgrades a version-N document to N+1
MIGRATIONS: dict[int, Migration] = {1: _v1_to_v2}


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
        migrate(doc)
        version += 1
        doc.data["schema_version"] = version
    return []
