"""Random weights through mlx-vlm's own model classes (vision models and encoder embedding models), built from
a config.json-shaped dict exactly as mlx-vlm's loaders build them, saved under MLX's own parameter names."""

from __future__ import annotations

import json
from pathlib import Path


def write_model(dest: Path, config: dict, seed: int) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_vlm.utils import get_model_and_args, update_module_configs

    mx.random.seed(seed)
    built = dict(config)
    built.setdefault("text_config", {})
    built.setdefault("vision_config", {})
    built.setdefault("audio_config", {})
    module, _ = get_model_and_args(config=built)
    model_config = update_module_configs(module.ModelConfig.from_dict(built), module, built,
                                         ["text", "vision", "perceiver", "projector", "audio"])
    model = module.Model(model_config)
    mx.eval(model.parameters())
    mx.save_safetensors(str(dest / "model.safetensors"), dict(tree_flatten(model.parameters())),
                        metadata={"format": "mlx"})
    (dest / "config.json").write_text(json.dumps(config, indent=2))
