"""Broken catalog input: every problem has a code and the line an author must fix; nothing crashes."""

from __future__ import annotations

import pytest

from service.catalog import load_catalog

from .conftest import VALID_FAMILY


def mutate(old: str, new: str, text: str = VALID_FAMILY) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


MOE = ("        vocab_size: 32000\n",
       "        vocab_size: 32000\n        num_experts: 8\n        num_experts_per_tok: 2\n")

CASES = {
    # --- YAML itself
    "tab-indent": (mutate("  license: mit", "\tlicense: mit"), "yaml-tab", 6),
    "duplicate-key": (mutate("  license: mit\n", "  license: mit\n  license: apache-2.0\n"), "yaml-duplicate-key", 7),
    "unclosed-flow": (mutate("abilities: [chat, generate]", "abilities: [chat, generate"), "yaml-syntax", 11),
    "bad-indent": (mutate("  kind: text", "     kind: text"), "yaml-syntax", 8),
    "empty-file": ("", "empty-file", 1),
    "only-comments": ("# nothing here\n# at all\n", "empty-file", 1),
    "not-utf8": (mutate("A test family.", "A test fam\udcffily.").encode("utf-8", "surrogateescape"), "encoding", 5),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary-file", 3),
    "top-level-list": ("- schema_version: 1\n", "not-a-mapping", 1),
    "top-level-scalar": ("just a string\n", "not-a-mapping", 1),
    # --- hostile files: bounded, located, one line each (none may crash or hang the linter or the service)
    "deep-flow": (mutate("  license: mit\n", "  license: mit\n  deep: " + "[" * 50_000 + "]" * 50_000 + "\n"),
                  "yaml-too-deep", 7),
    "deep-block": (mutate("  license: mit\n", "  license: mit\n  deep:\n" + "".join(
        " " * (4 + i) + f"k{i}:\n" for i in range(120)) + " " * 130 + "end: 1\n"), "yaml-too-deep", 105),
    "alias-bomb": ("a: &a [x,x,x,x,x,x,x,x,x,x]\n" + "".join(
        f"{n}: &{n} [{', '.join(['*' + p] * 10)}]\n" for p, n in zip("abcdefgh", "bcdefghi")) + VALID_FAMILY,
                   "yaml-value", 1),
    "huge-int": (mutate("context_length: 4096", "context_length: " + "9" * 90), "yaml-value", 12),
    "many-digits": (mutate("parameters: 1000000000", "parameters: " + "1" * 5000), "yaml-value", 16),
    "float-overflow": (mutate("parameters: 1000000000", "parameters: 1e400"), "yaml-value", 16),
    "nan": (mutate("parameters: 1000000000", "parameters: .nan"), "yaml-value", 16),
    "bad-int-tag": (mutate("parameters: 1000000000", "parameters: !!int abc"), "yaml-value", 16),
    "bad-float-tag": (mutate("parameters: 1000000000", "parameters: !!float abc"), "yaml-value", 16),
    "control-char": (mutate("A test family.", "A test\x07 family."), "yaml-character", 5),
    "layers-maximum": (mutate("num_hidden_layers: 16", "num_hidden_layers: 100000000"), "schema-maximum", 20),
    "parameters-maximum": (mutate("parameters: 1000000000", "parameters: 1.0e+20"), "schema-maximum", 16),
    "float-layers": (mutate("num_hidden_layers: 16", "num_hidden_layers: 16.0"), "schema-type", 20),
    "float-version": (mutate("schema_version: 1", "schema_version: 1.0"), "schema-type", 2),
    # --- schema
    "kind-enum": (mutate("kind: text", "kind: txt"), "schema-enum", 8),
    "loader-enum": (mutate("loader: mlx-lm", "loader: llama.cpp"), "schema-enum", 9),
    "ability-enum": (mutate("[chat, generate]", "[chat, flying]"), "schema-enum", 10),
    "missing-description": (mutate("  description: A test family.\n", ""), "schema-required", 3),
    "unknown-key": (mutate("  license: mit", "  licence: mit"), "schema-unknown-key", 6),
    "mode-enum": (mutate("mode: affine", "mode: afine"), "schema-enum", 32),
    "bits-enum": (mutate("bits: 4", "bits: 7"), "schema-enum", 30),
    "revision-pattern": (mutate("bits: 4\n", "revision: abc123\n          bits: 4\n"), "schema-pattern", 30),
    "repo-pattern": (mutate("repo: test-org/testfam-1b-4bit", "repo: not a repo"), "schema-pattern", 29),
    "repo-escape": (mutate("repo: test-org/testfam-1b-4bit", "repo: ../../etc/passwd"), "schema-pattern", 29),
    "newer-version": (mutate("schema_version: 1", "schema_version: 99"), "newer-schema", 2),
    "version-type": (mutate("schema_version: 1", "schema_version: '1'"), "schema-type", 2),
    "missing-version": (mutate("schema_version: 1\n", ""), "schema-required", 2),
    "negative-context": (mutate("context_length: 4096", "context_length: -5"), "schema-minimum", 12),
    "http-card": (mutate("https://example.com/card", "http://example.com/card"), "schema-pattern", 7),
    "string-layers": (mutate("num_hidden_layers: 16", "num_hidden_layers: sixteen"), "schema-type", 20),
    "repo-and-generated": (mutate("          mode: affine\n",
                                  "          mode: affine\n          generated: {seed: 1}\n"),
                           "schema-source", 28),
    "no-source": (mutate("          repo: test-org/testfam-1b-4bit\n", ""), "schema-source", 28),
    "no-content": ("schema_version: 1\n", "schema-required", 1),
    "date-version": (mutate("- size: 1b", "- size: 2025-01-01").replace("default_size: 1b", "default_size: 2025-01-01"),
                     None, None),
    "float-size": (mutate("- size: 1b", "- size: 1.10").replace("default_size: 1b", "default_size: '1.10'"),
                   "schema-type", 15),
    # --- semantic checks
    "unknown-style": (mutate("prompt_style: chatml", "prompt_style: nosuch"), "unknown-prompt-style", 11),
    "unknown-default-size": (mutate("default_size: 1b", "default_size: 2b"), "unknown-default-size", 13),
    "unknown-default-quant": (mutate("default_quantization: 4bit", "default_quantization: 8bit"),
                              "unknown-default-quantization", 26),
    "kv-heads": (mutate("num_key_value_heads: 8", "num_key_value_heads: 7"), "kv-heads", 23),
    "mxfp4-group": (mutate("mode: affine", "mode: mxfp4"), "bits-mode", 31),
    "bf16-bits": (mutate("mode: affine", "mode: bfloat16"), "bits-mode", 30),
    "active-on-dense": (mutate("parameters: 1000000000\n", "parameters: 1000000000\n      active_parameters: 100\n"),
                        "active-parameters", 17),
    "moe-without-active": (mutate(*MOE), "active-parameters", 16),
    "kind-vs-detection": (mutate("kind: text", "kind: vision").replace("[chat, generate]", "[chat, vision]"),
                          "detection", 18),
    "thinking-without-tags": (mutate("[chat, generate]", "[chat, thinking]"), "ability-style", 10),
    "vision-ability-on-text": (mutate("[chat, generate]", "[chat, vision]"), "ability-kind", 8),
    "sliding-without-window": (mutate("vocab_size: 32000\n", "vocab_size: 32000\n        attention_pattern: "
                                      "[sliding_attention, full_attention]\n"), "sliding-window", 26),
    "alias-collision": (mutate("  default_size: 1b\n", "  aliases: [qwen3]\n  default_size: 1b\n"),
                        "duplicate-name", 4),
    "size-mismatch": (mutate("mode: affine", "mode: affine\n          size_bytes: 1000"), "size-mismatch", 33),
    "duplicate-size": (VALID_FAMILY + VALID_FAMILY.split("  models:\n", 1)[1].replace(
                       "repo: test-org/testfam-1b-4bit", "repo: test-org/other"),
                       "duplicate-size", 33),
    "duplicate-repo": (mutate("          mode: affine\n", "          mode: affine\n"
                              "        - name: 8bit\n          repo: Test-Org/testfam-1b-4bit\n"
                              "          bits: 8\n          group_size: 64\n          mode: affine\n"),
                       "duplicate-repo", 34),
    "experts-per-token": (mutate(*MOE).replace("num_experts_per_tok: 2", "num_experts_per_tok: 9")
                          .replace("parameters: 1000000000\n", "parameters: 1000000000\n      active_parameters: 9\n"),
                          "experts", 28),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_broken_input_is_located(name, write, builtin):
    text, code, line = CASES[name]
    path = write(text)
    result = load_catalog([path])
    mine = [p for p in result.problems if p.file.endswith("family.yaml")]
    if code is None:  # must load cleanly: the trap is a YAML type coercion
        assert mine == []
        return
    assert mine, f"expected {code} at line {line}, got no problem"
    assert any(p.code == code for p in mine), [str(p) for p in mine]
    problem = next(p for p in mine if p.code == code)
    assert problem.line == line, str(problem)
    rendered = str(problem)
    assert "\n" not in rendered
    assert rendered.startswith(f"{problem.file}:{line}:{problem.col}: error[{code}]: ")
    assert rendered.endswith(f"(at {problem.json_path})") and problem.json_path.startswith("$")
    assert not [p for p in result.problems if p not in mine], "the built-in catalog must stay clean"


def test_there_are_at_least_thirty_distinct_cases():
    assert len({name for name, (_, code, _) in CASES.items() if code}) >= 30


def test_unknown_key_suggests_the_right_one(write):
    problems = load_catalog([write(CASES["unknown-key"][0])]).problems
    problem = next(p for p in problems if p.code == "schema-unknown-key")
    assert "did you mean `license`" in problem.message


def test_newer_version_says_to_upgrade(write):
    problem = load_catalog([write(CASES["newer-version"][0])]).problems[0]
    assert "upgrade MLX Service" in problem.message and "99" in problem.message


def test_duplicate_family_in_one_layer(tmp_path):
    (tmp_path / "a.yaml").write_text(VALID_FAMILY)
    (tmp_path / "b.yaml").write_text(VALID_FAMILY.replace("test-org/testfam-1b-4bit", "test-org/b"))
    problems = load_catalog([tmp_path]).problems
    assert [(p.code, p.file.endswith("b.yaml"), p.line) for p in problems] == [("duplicate-family", True, 4)]


def test_yaml_one_one_booleans_stay_strings(write):
    # `yes` / `no` are strings in YAML 1.2; a description of "no" must not become False.
    result = load_catalog([write(mutate("description: A test family.", "description: no"))])
    assert result.problems == []
    assert result.catalog.families["testfam"].description == "no"


def test_missing_path_is_reported(tmp_path):
    problems = load_catalog([tmp_path / "nope"]).problems
    assert [p.code for p in problems] == ["missing-path"]


def test_large_layers_are_parsed_in_parallel_with_the_same_positions(tmp_path):
    from service.catalog.loader import PARALLEL_FILES

    for i in range(PARALLEL_FILES + 6):
        text = VALID_FAMILY.replace("name: testfam", f"name: fam{i}").replace("testfam-1b-4bit", f"fam{i}")
        (tmp_path / f"f{i:03}.yaml").write_text(text)
    (tmp_path / "f010.yaml").write_text((tmp_path / "f010.yaml").read_text().replace("kind: text", "kind: txt"))
    (tmp_path / "f020.yaml").write_text((tmp_path / "f020.yaml").read_text().replace(
        "prompt_style: chatml", "prompt_style: nosuch"))
    for cache in (True, False):
        problems = load_catalog([tmp_path], cache=cache).problems
        assert [(p.file.endswith(n), p.code, p.line) for p, n in zip(problems, ["f010.yaml", "f020.yaml"])] == [
            (True, "schema-enum", 8), (True, "unknown-prompt-style", 11)]


def test_a_clash_with_the_built_in_catalog_is_reported_in_the_file_that_brought_it(tmp_path):
    """A copy of a built-in family under a new name repeats its repo ids: the copy is wrong, not the original."""
    from .conftest import ROOT

    original = (ROOT / "catalog" / "families" / "llama3.3.yaml").read_text()
    (tmp_path / "copy.yaml").write_text(original.replace("name: llama3.3\n", "name: 2025-13-45\n", 1))
    problems = load_catalog([tmp_path]).problems
    assert problems and all(p.file.endswith("copy.yaml") and p.code == "duplicate-repo" for p in problems)


def test_the_service_refuses_a_hostile_layer_with_the_same_one_line_error(tmp_path):
    import subprocess
    import sys

    (tmp_path / "deep.yaml").write_text("schema_version: 1\nx: " + "[" * 50_000 + "]" * 50_000 + "\n")
    run = subprocess.run([sys.executable, "-m", "service.cli", "serve", "--catalog-path", str(tmp_path),
                          "--port", "1"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "deep.yaml:2:" in run.stderr and "yaml-too-deep" in run.stderr
