"""`mlx-service`: serve the APIs, and manage the models on this machine (pull, list, rm, show, ps)."""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time

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
                                 catalog_path=args.catalog_path, batch_size=args.batch_size)
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


def _context():
    from .catalog import load_catalog

    settings = load_settings()
    return settings, load_catalog(settings.catalog_paths or None).raise_for_problems()


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return ""


class _Bar:
    """One status line: overall bytes, speed, ETA and the current file."""

    def __init__(self):
        self.start = time.monotonic()
        self.base: int | None = None
        self.last = 0.0

    def __call__(self, event: dict) -> None:
        now = time.monotonic()
        total, done = event.get("total", 0), event.get("completed", 0)
        if self.base is None:
            self.base = done  # bytes that were already here (resume) do not count toward the speed
        if event["status"].startswith("pulling ") and now - self.last < 0.1:
            return
        self.last = now
        speed = (done - self.base) / max(now - self.start, 1e-6)
        eta = (total - done) / speed if speed > 0 else 0
        pct = 100 * done / total if total else 100
        line = f"\r{event['status'][:40]:<40} {pct:5.1f}% {_size(done)}/{_size(total)} {_size(speed)}/s ETA {eta:4.0f}s"
        sys.stderr.write(line)
        if event["status"] == "success":
            sys.stderr.write("\n")
        sys.stderr.flush()


def pull(args) -> int:
    from .errors import ServiceError
    from .hub import store

    settings, catalog = _context()
    cancel = threading.Event()
    try:
        path = store.pull(settings, catalog, args.name, _Bar(), cancel)
    except KeyboardInterrupt:
        cancel.set()
        print("\npull cancelled; run it again to resume where it stopped", file=sys.stderr)
        return 130
    except ServiceError as exc:
        print(f"\nmlx-service: {exc.message}", file=sys.stderr)
        return 1
    print(path)
    return 0


def list_models(args) -> int:
    from .hub import store

    settings, catalog = _context()
    rows = [("NAME", "SIZE", "REVISION", "MODIFIED")]
    for m in store.downloaded(settings, catalog):
        rows.append((m.name, _size(m.size), (m.revision or "-")[:12],
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(m.modified))))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


def rm(args) -> int:
    from .errors import ServiceError
    from .hub import store

    settings, catalog = _context()
    try:
        path = store.delete(settings, catalog, args.name)
    except ServiceError as exc:
        print(f"mlx-service: {exc.message}", file=sys.stderr)
        return 1
    print(f"deleted {args.name} ({path})")
    return 0


def show(args) -> int:
    import json

    from .api.show import render_show
    from .catalog import UncatalogedRepo
    from .catalog.resolve import ResolveError
    from .locate import locate

    settings, catalog = _context()
    try:
        found = catalog.resolve(args.name)
    except ResolveError as exc:
        print(f"mlx-service: {exc}", file=sys.stderr)
        return 1
    entry = None if isinstance(found, UncatalogedRepo) else found
    name = found.repo if entry is None else entry.tag
    print(json.dumps(render_show(catalog, entry, name, locate(settings.models_dir, found).path), indent=2))
    return 0


def ps(args) -> int:
    import httpx

    settings = load_settings()
    url = f"http://{settings.host}:{settings.port}/api/ps"
    headers = {"Authorization": f"Bearer {settings.keys[0]}"} if settings.keys else {}
    try:
        models = httpx.get(url, headers=headers, timeout=5).json()["models"]
    except httpx.HTTPError as exc:
        print(f"mlx-service: no server at {url} ({exc})", file=sys.stderr)
        return 1
    print(f"{'NAME':<40} {'SIZE':>10}  EXPIRES")
    for m in models:
        print(f"{m['name']:<40} {_size(m['size']):>10}  {m['expires_at']}")
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
    s.add_argument("--batch-size", type=int, help="requests decoded together per model")
    s.set_defaults(func=serve)
    for name, func, helptext in (("pull", pull, "download a model (catalog name, tag or Hub repo id)"),
                                 ("rm", rm, "delete a downloaded model"),
                                 ("show", show, "show a model's catalog entry and whether it is here")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("name")
        p.set_defaults(func=func)
    sub.add_parser("list", help="list downloaded models").set_defaults(func=list_models)
    sub.add_parser("ps", help="list the models a running server has loaded").set_defaults(func=ps)
    args = parser.parse_args(argv)
    from .catalog import CatalogError

    try:
        return args.func(args)
    except (SettingsError, CatalogError) as exc:  # a bad setting or catalog layer: its message, no traceback
        print(f"mlx-service: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
