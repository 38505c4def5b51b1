"""Shared fixtures: the built-in catalog, and helpers to write and lint small catalog files."""

from __future__ import annotations

import os
import tempfile
import textwrap
from pathlib import Path

import pytest

from service.catalog import load_catalog

# Tests never reach the Hugging Face Hub and never see the user's own cache: set before anything imports
# huggingface_hub (mlx-lm does, at import), because the hub reads these variables once.
os.environ["HF_HOME"] = tempfile.mkdtemp(prefix="mlx-service-test-hf-")
os.environ["HF_HUB_OFFLINE"] = "1"

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"

# A valid family file; tests mutate single lines of it. Line numbers are stable: see the comments.
VALID_FAMILY = textwrap.dedent("""\
    # yaml-language-server: $schema=../schemas/catalog.schema.json
    schema_version: 1
    family:
      name: testfam
      description: A test family.
      license: mit
      model_card: https://example.com/card
      kind: text
      loader: mlx-lm
      abilities: [chat, generate]
      prompt_style: chatml
      context_length: 4096
      default_size: 1b
      models:
        - size: 1b
          parameters: 1000000000
          architecture:
            model_type: llama
            architectures: [LlamaForCausalLM]
            num_hidden_layers: 16
            hidden_size: 2048
            num_attention_heads: 32
            num_key_value_heads: 8
            intermediate_size: 8192
            vocab_size: 32000
          default_quantization: 4bit
          quantizations:
            - name: 4bit
              repo: test-org/testfam-1b-4bit
              bits: 4
              group_size: 64
              mode: affine
    """)


@pytest.fixture(scope="session")
def builtin():
    return load_catalog([]).raise_for_problems()


@pytest.fixture
def write(tmp_path):
    def _write(text: str | bytes, name: str = "family.yaml") -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path

    return _write


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Keep the layer cache (and anything else cached) out of the user's home during tests."""
    import os

    os.environ["MLX_SERVICE_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    yield


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory):
    """Shared by every test server, so each generated test model is built once per session."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def server(models_dir):
    from .server import Server

    with Server(models_dir) as srv:
        yield srv


def pick_stop(text: str) -> str:
    """A stop string that first appears in the middle of `text`: a character not seen before it."""
    for i in range(1, len(text)):
        if text[i].strip() and text[i] not in text[:i]:
            return text[i]
    raise AssertionError(f"no usable stop string in {text!r}")
