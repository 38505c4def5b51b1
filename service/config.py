"""Service settings: command-line flags, then `MLX_SERVICE_*` environment variables, then defaults."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_memory_gb() -> float:
    """A safe share of physical memory: 70%, like Metal's recommended working set on a Mac."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - platforms without sysconf
        total = 16 * 2**30
    return round(total * 0.7 / 2**30, 1)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MLX_SERVICE_", extra="ignore", validate_default=True)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    models_dir: Path = Path("~/.mlx-service/models")
    default_model: str = "qwen3:0.6b"
    max_loaded_models: int = Field(2, ge=1)
    model_idle_timeout_sec: float = Field(1800, ge=0)
    max_memory_gb: float = Field(default_factory=_default_memory_gb, gt=0)
    max_tokens: int = Field(4096, ge=1)
    context_length: int = Field(8192, ge=256)
    generation_timeout: float = Field(300, gt=0)
    api_keys: str = ""
    keep_alive: str = ""  # empty: models stay loaded for MODEL_IDLE_TIMEOUT_SEC after their last request
    max_queue: int = Field(64, ge=0)  # generations waiting beyond a full batch, per model
    batch_size: int = Field(32, ge=1, le=1024)  # sequences decoded together per model (lowered to fit memory)
    prefill_batch_size: int = Field(8, ge=1, le=1024)  # newcomers prefilled together
    prefill_step_size: int = Field(2048, ge=16, le=65536)  # prefill chunk: the longest a newcomer stalls a batch
    catalog_path: str = ""
    enable_prefix_cache: bool = True
    cache_max_entries: int = Field(8, ge=0)
    cache_max_memory_gb: float = Field(2.0, ge=0)
    cache_max_disk_gb: float = Field(8.0, ge=0)  # the prefix cache's SSD tier (0 = off), under CACHE_DIR/prefix
    cache_dir: Path = Field(default_factory=lambda: Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache")
                            / "mlx-service")
    max_request_bytes: int = Field(8 * 2**20, ge=1024)
    max_audio_bytes: int = Field(25 * 2**20, ge=1024)  # an uploaded audio file (OpenAI's own limit is 25 MB)
    max_image_bytes: int = Field(20 * 2**20, ge=1024)  # one image, inline or fetched from a URL

    @field_validator("models_dir", "cache_dir")
    @classmethod
    def _expand(cls, value: Path) -> Path:
        return value.expanduser()

    @field_validator("keep_alive")
    @classmethod
    def _duration(cls, value: str) -> str:
        from .keepalive import parse_keep_alive

        if value.strip():
            parse_keep_alive(value)
        return value.strip()

    @property
    def keys(self) -> list[str]:
        return [k.strip() for k in self.api_keys.split(",") if k.strip()]

    @property
    def catalog_paths(self) -> list[Path]:
        return [Path(p).expanduser() for p in self.catalog_path.split(os.pathsep) if p.strip()]


class SettingsError(ValueError):
    """One line that says which setting is wrong and why."""


def load_settings(**overrides) -> Settings:
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        first = exc.errors()[0]
        name = str(first["loc"][0]) if first["loc"] else "settings"
        raise SettingsError(f"invalid setting {name} (MLX_SERVICE_{name.upper()}): {first['msg']}") from None
