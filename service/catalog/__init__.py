"""The model catalog: load, validate, resolve names, detect types, estimate memory.

Depends only on the schema and YAML files; the service layers above import from here, never the reverse.
"""

from .catalog import Catalog
from .detect import Detection, UndetectableModel
from .loader import ENV_CATALOG_PATH, LoadResult, load_catalog
from .memory import MemoryEstimate, estimate
from .model import Architecture, Entry, Family, Model, PromptStyle, Quantization
from .problems import CatalogError, Problem
from .resolve import AmbiguousModel, ModelNotFound, ResolveError, UncatalogedRepo

__all__ = [
    "AmbiguousModel",
    "Architecture",
    "Catalog",
    "CatalogError",
    "Detection",
    "ENV_CATALOG_PATH",
    "Entry",
    "Family",
    "LoadResult",
    "MemoryEstimate",
    "Model",
    "ModelNotFound",
    "Problem",
    "PromptStyle",
    "Quantization",
    "ResolveError",
    "UncatalogedRepo",
    "UndetectableModel",
    "estimate",
    "load_catalog",
]
