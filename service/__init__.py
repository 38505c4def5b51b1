"""MLX Service: a local model server whose knowledge of models is a YAML catalog."""

__version__ = "0.1.0"
