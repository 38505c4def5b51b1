"""`mlx-service`: serve the APIs (more commands arrive with the Hub issue: pull, list, rm, show, ps)."""

from __future__ import annotations

import argparse
import logging
import sys

from .config import SettingsError, load_settings


def _fallback(settings, catalog) -> str:
    """The default model if it is on disk (or buildable offline); otherwise the generated demo model."""
    from .errors import ServiceError
    from .manager import resolve_target

    try:
        target = resolve_target(settings, catalog, settings.default_model)
    except ServiceError as exc:
        logging.getLogger("mlx_service").warning("default model %s: %s", settings.default_model, exc.message)
        return "demo"
    generated = target.entry is not None and target.entry.quantization.generated is not None
    if target.path is None and not generated:
        logging.getLogger("mlx_service").warning(
            "default model %s is not downloaded; serving the generated demo model instead", target.name)
        return "demo"
    return target.name


def serve(args) -> int:
    import uvicorn

    from .api.app import create_app
    from .catalog import CatalogError, load_catalog

    try:
        settings = load_settings(host=args.host, port=args.port, models_dir=args.models_dir,
                                 default_model=args.default_model, max_memory_gb=args.max_memory_gb,
                                 catalog_path=args.catalog_path)
    except SettingsError as exc:
        print(f"mlx-service: {exc}", file=sys.stderr)
        return 2
    try:
        catalog = load_catalog(settings.catalog_paths or None).raise_for_problems()
    except CatalogError as exc:
        print(f"mlx-service: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    default = _fallback(settings, catalog)
    app = create_app(settings, catalog, preload=default)
    print(f"MLX Service on http://{settings.host}:{settings.port} (default model: {default}; "
          f"OpenAI base URL http://{settings.host}:{settings.port}/v1)", file=sys.stderr)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level="info", timeout_graceful_shutdown=5)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mlx-service", description="Serve MLX models over the OpenAI, "
                                     "Ollama and Anthropic APIs.")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="start the server (settings: flags, then MLX_SERVICE_* variables)")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--models-dir")
    s.add_argument("--default-model")
    s.add_argument("--max-memory-gb", type=float)
    s.add_argument("--catalog-path")
    s.set_defaults(func=serve)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
