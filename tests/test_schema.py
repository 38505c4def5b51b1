"""The JSON Schema itself: valid, editor-friendly (draft-07 subset), documented, and used by every file."""

from __future__ import annotations

import json

from jsonschema import Draft7Validator, Draft202012Validator

from service.catalog.paths import builtin_catalog_dir, schema_file

FORBIDDEN = {"unevaluatedProperties", "unevaluatedItems", "prefixItems", "$dynamicRef", "$dynamicAnchor",
             "dependentRequired", "dependentSchemas"}


def schema() -> dict:
    return json.loads(schema_file().read_text())


def walk(node, path="$"):
    if isinstance(node, dict):
        yield path, node
        for key, value in node.items():
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, f"{path}[{i}]")


def test_schema_is_valid_for_2020_12_and_draft_07():
    Draft202012Validator.check_schema(schema())
    Draft7Validator.check_schema(schema())


def test_only_keywords_editors_understand():
    used = {key for _, node in walk(schema()) for key in node}
    assert not used & FORBIDDEN


def test_every_property_is_described_and_objects_are_closed():
    s = schema()
    defs = s["$defs"]
    for path, node in walk(s):
        if node.get("type") == "object" and "properties" in node:
            assert node.get("additionalProperties") is False or path.endswith("extra_config"), path
            for name, prop in node["properties"].items():
                target = defs[prop["$ref"].split("/")[-1]] if "$ref" in prop else prop
                assert target.get("description"), f"{path}.properties.{name} has no description"


def test_closed_sets_are_enums():
    defs = schema()["$defs"]
    assert set(defs["kind"]["enum"]) == {"text", "vision", "audio", "embedding", "speech"}
    assert set(defs["loader"]["enum"]) == {"mlx-lm", "mlx-vlm", "mlx-embeddings", "mlx-audio"}
    assert {"chat", "generate", "vision", "audio", "tools", "thinking", "embedding", "transcription"} == set(
        defs["ability"]["enum"])
    assert {"affine", "mxfp4"} <= set(defs["quantization"]["properties"]["mode"]["enum"])


def test_every_catalog_file_points_editors_at_the_schema():
    root = builtin_catalog_dir()
    for path in root.rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("# yaml-language-server: $schema="), path
        target = (path.parent / first.split("=", 1)[1]).resolve()
        assert target == schema_file().resolve(), path


def test_builtin_catalog_breadth(builtin):
    entries = builtin.entries()
    assert len(builtin.families) >= 20
    assert len([e for e in entries if e.quantization.repo]) >= 60
    kinds = {f.kind for f in builtin.families.values()}
    assert kinds == {"text", "vision", "audio", "embedding", "speech"}
    assert any(e.model.architecture.is_moe for e in entries)
    assert any("thinking" in f.abilities for f in builtin.families.values())
    assert builtin.resolve("demo").quantization.generated is not None
    generated_kinds = {e.family.kind for e in entries if e.quantization.generated is not None}
    assert generated_kinds == {"text", "vision", "embedding", "speech"}  # an offline demo of every served kind
