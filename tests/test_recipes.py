"""Generated checkpoints: built from a recipe, loaded through the real mlx_lm.load path, then scaffolded back."""

from __future__ import annotations

import subprocess

import mlx_lm
import pytest
from mlx_lm.utils import get_total_parameters

from service.catalog import load_catalog
from service.recipes import build_checkpoint

from .conftest import ROOT


@pytest.fixture(scope="module")
def demo(tmp_path_factory, builtin):
    entry = builtin.resolve("demo")
    path = build_checkpoint(entry, builtin.prompt_style(entry), tmp_path_factory.mktemp("models") / "demo")
    return entry, path


def test_demo_loads_with_mlx_lm_and_matches_catalog(demo):
    entry, path = demo
    model, tokenizer = mlx_lm.load(str(path))
    assert get_total_parameters(model) == entry.model.parameters
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "hello"}], add_generation_prompt=True,
                                           tokenize=False)
    assert prompt == "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"
    first = mlx_lm.generate(model, tokenizer, prompt, max_tokens=8)
    assert first == mlx_lm.generate(model, tokenizer, prompt, max_tokens=8)  # greedy is deterministic


def test_generation_is_reproducible(demo, tmp_path, builtin):
    entry, path = demo
    again = build_checkpoint(entry, builtin.prompt_style(entry), tmp_path / "again")
    assert (again / "model.safetensors").read_bytes() == (path / "model.safetensors").read_bytes()
    assert (again / "tokenizer.json").read_bytes() == (path / "tokenizer.json").read_bytes()


def test_failed_build_leaves_nothing(builtin, tmp_path, monkeypatch):
    import service.recipes.text as gen

    entry = builtin.resolve("demo")

    def boom(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(gen, "write_weights", boom)
    with pytest.raises(RuntimeError):
        build_checkpoint(entry, builtin.prompt_style(entry), tmp_path / "demo")
    assert list(tmp_path.iterdir()) == []


def test_quantized_generated_entry(tmp_path, write):
    text = (ROOT / "catalog" / "families" / "demo.yaml").read_text().replace("name: demo", "name: demo4").replace(
        "default_quantization: f32", "default_quantization: q4").replace(
        "        - name: f32\n          bits: 32\n          mode: float32\n",
        "        - name: q4\n          bits: 4\n          group_size: 32\n          mode: affine\n")
    catalog = load_catalog([write(text)]).raise_for_problems()
    entry = catalog.resolve("demo4")
    path = build_checkpoint(entry, catalog.prompt_style(entry), tmp_path / "q4")
    model, tokenizer = mlx_lm.load(str(path))
    assert model.layers[0].mlp.up_proj.bits == 4
    assert mlx_lm.generate(model, tokenizer, "hello", max_tokens=4) is not None


def test_scaffold_round_trip(demo, tmp_path):
    _, path = demo
    out = tmp_path / "scaffolded.yaml"
    tool = [str(ROOT / "tools" / "catalog")]
    proc = subprocess.run(tool + ["scaffold", str(path), "--family", "mine", "--repo", "me/mine", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lint = subprocess.run(tool + ["lint", str(out)], capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout
    entry = load_catalog([out]).raise_for_problems().resolve("me/mine")
    assert entry.model.parameters == 106816
    assert entry.model.architecture.num_key_value_heads == 2
    assert entry.quantization.size_bytes == 106816 * 4


def test_scaffold_errors_are_clear(tmp_path):
    proc = subprocess.run([str(ROOT / "tools" / "catalog"), "scaffold", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "no config.json" in proc.stderr and "Traceback" not in proc.stderr
