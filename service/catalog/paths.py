"""Where the built-in catalog and schema live: inside an installed wheel, or at the top of a source checkout."""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent


def _data_dir(name: str) -> Path:
    installed = _PACKAGE / "_data" / name  # the wheel maps the top-level folders here
    return installed if installed.is_dir() else _PACKAGE.parent / name


def builtin_catalog_dir() -> Path:
    return _data_dir("catalog")


def schema_file() -> Path:
    return _data_dir("schemas") / "catalog.schema.json"
