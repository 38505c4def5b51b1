"""Format versions: newer files are refused with an upgrade hint, older ones migrate (on a fixture)."""

from __future__ import annotations

import pytest

from service.catalog import load_catalog, versions
from service.catalog.versions import CURRENT_SCHEMA_VERSION
from service.catalog.yamlio import parse

from .conftest import VALID_FAMILY

# A version-0 file as an imagined older MLX Service would have written it: `repo_id` instead of `repo`. It goes
# through the test's migration 0 -> 1, then the real 1 -> 2 (tests/test_catalog_v2.py covers that one alone).
OLD = VALID_FAMILY.replace("schema_version: 1", "schema_version: 0").replace("repo: ", "repo_id: ")


def rename_repo_id(doc):
    for model in doc.data.get("family", {}).get("models", []):
        for quant in model.get("quantizations", []):
            if "repo_id" in quant:
                quant["repo"] = quant.pop("repo_id")


@pytest.fixture
def migration(monkeypatch):
    monkeypatch.setitem(versions.MIGRATIONS, 0, rename_repo_id)


def test_old_file_is_migrated_and_keeps_positions(write, migration):
    result = load_catalog([write(OLD)])
    assert result.problems == []
    assert result.catalog.resolve("testfam").quantization.repo == "test-org/testfam-1b-4bit"
    broken = OLD.replace("bits: 4", "bits: 7")
    problems = load_catalog([write(broken)]).problems
    assert [(p.code, p.line) for p in problems] == [("schema-enum", 30)]


def test_old_file_without_migration_is_refused(write):
    problems = load_catalog([write(OLD)]).problems
    assert [(p.code, p.line) for p in problems] == [("old-schema", 2)]


def test_newer_file_is_refused(write, tmp_path):
    doc, _ = parse(write(VALID_FAMILY.replace("schema_version: 1", f"schema_version: {CURRENT_SCHEMA_VERSION + 1}")))
    problems = versions.upgrade(doc)
    assert problems and problems[0].code == "newer-schema"
    assert "upgrade MLX Service" in problems[0].message
