"""Name resolution: tags, aliases, repo ids, ambiguity, did-you-mean, layering."""

from __future__ import annotations

import pytest

from service.catalog import AmbiguousModel, ModelNotFound, UncatalogedRepo, load_catalog

from .conftest import VALID_FAMILY


@pytest.mark.parametrize(
    ("name", "tag"),
    [
        ("qwen3", "qwen3:8b-4bit"),
        ("QWEN3", "qwen3:8b-4bit"),
        ("qwen3:latest", "qwen3:8b-4bit"),
        ("qwen3:0.6b", "qwen3:0.6b-4bit"),
        ("qwen3:0.6b-bf16", "qwen3:0.6b-bf16"),
        ("Qwen3:30B-A3B-8bit", "qwen3:30b-a3b-8bit"),
        ("qwen3-8b-8bit", "qwen3:8b-8bit"),
        ("qwen3:8bit", "qwen3:8b-8bit"),  # a quantization of the default size
        ("deepseek-r1", "deepseek-r1-distill-qwen:7b-4bit"),  # family alias
        ("mlx-community/Qwen3-8B-4bit", "qwen3:8b-4bit"),  # cataloged repo maps back
        ("MLX-COMMUNITY/qwen3-8b-4BIT", "qwen3:8b-4bit"),
        ("hf.co/mlx-community/Qwen3-8B-4bit", "qwen3:8b-4bit"),
        ("  demo  ", "demo:tiny-f32"),
    ],
)
def test_resolves(builtin, name, tag):
    assert builtin.resolve(name).tag == tag


def test_uncataloged_repo_resolves_as_such(builtin):
    found = builtin.resolve("some-org/some-mlx-model")
    assert found == UncatalogedRepo("some-org/some-mlx-model")


@pytest.mark.parametrize("name", ["../etc/passwd", "org/../../x", "a/b/c", "org/--x", "/abs/path", "org/"])
def test_path_like_names_are_not_repo_ids(builtin, name):
    with pytest.raises(ModelNotFound):
        builtin.resolve(name)


def test_did_you_mean(builtin):
    with pytest.raises(ModelNotFound) as err:
        builtin.resolve("qwen3:8bb")
    assert "qwen3:8b" in err.value.suggestions
    assert "did you mean" in str(err.value)


def test_unknown_without_suggestions(builtin):
    with pytest.raises(ModelNotFound) as err:
        builtin.resolve("zzzzzz")
    assert err.value.suggestions == []


def test_ambiguous_lists_candidates(write):
    # Two user families share the size-less hyphen spelling "amb-x-1b": family "amb" size "x-1b", family "amb-x"
    # size "1b". Each primary name is unique, so lint accepts both, but the hyphen form needs a choice.
    first = VALID_FAMILY.replace("name: testfam", "name: amb").replace("size: 1b", "size: x-1b").replace(
        "default_size: 1b", "default_size: x-1b")
    second = VALID_FAMILY.replace("name: testfam", "name: amb-x").replace("test-org/testfam-1b-4bit", "test-org/b")
    result = load_catalog([write(first, "a/one.yaml").parent])
    assert result.problems == []
    result = load_catalog([write(first, "b/one.yaml").parent, write(second, "c/two.yaml").parent])
    assert result.problems == []
    with pytest.raises(AmbiguousModel) as err:
        result.catalog.resolve("amb-x-1b")
    assert err.value.candidates == ["amb-x:1b-4bit", "amb:x-1b-4bit"]
    assert result.catalog.resolve("amb:x-1b").tag == "amb:x-1b-4bit"


def test_user_layer_overrides_builtin_family(write):
    text = VALID_FAMILY.replace("name: testfam", "name: qwen3").replace("test-org/testfam-1b-4bit", "me/my-qwen")
    result = load_catalog([write(text)])
    assert result.problems == []
    assert result.catalog.resolve("qwen3").tag == "qwen3:1b-4bit"
    assert [m.size for m in result.catalog.families["qwen3"].models] == ["1b"]


def test_user_layer_extends_builtin_family(write):
    text = """\
schema_version: 1
extends:
  family: qwen3
  aliases: [my-qwen]
  models:
    - size: 8b
      default_quantization: 6bit
      quantizations:
        - {name: 6bit, repo: me/Qwen3-8B-6bit, bits: 6, group_size: 64, mode: affine}
    - size: 2b
      parameters: 2000000000
      architecture: {model_type: qwen3, architectures: [Qwen3ForCausalLM], num_hidden_layers: 28,
                     hidden_size: 2048, num_attention_heads: 16, num_key_value_heads: 8, vocab_size: 151936}
      default_quantization: 4bit
      quantizations:
        - {name: 4bit, repo: me/Qwen3-2B-4bit, bits: 4, group_size: 64, mode: affine}
"""
    result = load_catalog([write(text)])
    assert result.problems == []
    cat = result.catalog
    assert cat.resolve("qwen3:8b").tag == "qwen3:8b-6bit"
    assert cat.resolve("qwen3:8b-4bit").quantization.repo == "mlx-community/Qwen3-8B-4bit"  # kept
    assert cat.resolve("my-qwen").tag == "qwen3:8b-6bit"
    assert cat.resolve("me/qwen3-2b-4bit").tag == "qwen3:2b-4bit"


def test_extends_errors_are_located(write):
    text = "schema_version: 1\nextends:\n  family: qwen33\n"
    problems = load_catalog([write(text)]).problems
    assert [(p.code, p.line) for p in problems] == [("unknown-family", 3)]
    assert "did you mean `qwen3`" in problems[0].message
    text = "schema_version: 1\nextends:\n  family: qwen3\n  models:\n    - size: 99b\n      parameters: 5\n"
    problems = load_catalog([write(text)]).problems
    assert [(p.code, p.line) for p in problems] == [("incomplete-model", 5)]


def test_env_catalog_path(monkeypatch, tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    (one / "a.yaml").write_text(VALID_FAMILY)
    (two / "b.yaml").write_text(VALID_FAMILY.replace("name: testfam", "name: other").replace(
        "test-org/testfam-1b-4bit", "test-org/other"))
    monkeypatch.setenv("MLX_SERVICE_CATALOG_PATH", f"{one}:{two}")
    catalog = load_catalog().raise_for_problems()
    assert {"testfam", "other", "qwen3"} <= set(catalog.families)


def test_every_builtin_entry_resolves_by_its_tag_and_repo(builtin):
    for entry in builtin.entries():
        assert builtin.resolve(entry.tag).tag == entry.tag
        if entry.quantization.repo:
            assert builtin.resolve(entry.quantization.repo).tag == entry.tag
