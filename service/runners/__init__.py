"""Runners: one per loaded model, chosen by the catalog entry's `loader` through the registry in `base.py`."""

from .base import LoadSpec, Registry, Runner, default_registry

__all__ = ["LoadSpec", "Registry", "Runner", "default_registry"]
