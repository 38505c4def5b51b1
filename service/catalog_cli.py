"""`tools/catalog`: lint, list, show, estimate and scaffold catalog entries.

Exit codes: 0 clean, 1 problems found (or the name did not resolve), 2 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from .catalog.catalog import Catalog
from .catalog.loader import load_catalog
from .catalog.memory import estimate
from .catalog.model import Entry
from .catalog.resolve import ResolveError, UncatalogedRepo
from .catalog.scaffold import ScaffoldError, scaffold


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _params(n: float) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def cmd_lint(args) -> int:
    result = load_catalog([Path(p) for p in args.paths], builtin=not args.no_builtin, cache=False)
    if args.format == "json":
        print(json.dumps({"files": result.files, "problems": [p.as_dict() for p in result.problems]}, indent=2))
    else:
        for problem in result.problems:
            print(problem)
        summary = f"{len(result.files)} file(s), {len(result.problems)} problem(s)"
        print(summary, file=sys.stderr)
    return 1 if result.problems else 0


def _load(args) -> Catalog | None:
    result = load_catalog([Path(p) for p in args.catalog] if args.catalog else None)
    if result.problems:
        for problem in result.problems:
            print(problem, file=sys.stderr)
        print("the catalog has problems: run `tools/catalog lint`", file=sys.stderr)
        return None
    return result.catalog


def _resolve(catalog: Catalog, name: str) -> Entry | None:
    try:
        found = catalog.resolve(name)
    except ResolveError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if isinstance(found, UncatalogedRepo):
        print(f"error: {name!r} is a Hub repo the catalog does not list; pull it first or scaffold an entry",
              file=sys.stderr)
        return None
    return found


def _row(entry: Entry) -> dict:
    est = estimate(entry, context=4096)
    return {
        "name": entry.tag,
        "kind": entry.family.kind,
        "parameters": entry.model.parameters,
        "active_parameters": entry.model.active_parameters,
        "quantization": entry.quantization.name,
        "weights_bytes": est.weights,
        "source": entry.quantization.repo or "generated",
        "verified": entry.verified,
    }


def cmd_list(args) -> int:
    catalog = _load(args)
    if catalog is None:
        return 1
    rows = [_row(e) for e in catalog.entries()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    header = ("NAME", "KIND", "PARAMS", "WEIGHTS", "SOURCE")
    table = [header] + [(r["name"] + ("" if r["verified"] else " *"), r["kind"],
                         _params(r["parameters"]) + (f" ({_params(r['active_parameters'])} active)"
                                                     if r["active_parameters"] else ""),
                         _gib(r["weights_bytes"]), r["source"]) for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(row, widths)).rstrip())
    print(f"\n{len(rows)} entries in {len(catalog.families)} families; * = facts not verified upstream",
          file=sys.stderr)
    return 0


def describe(catalog: Catalog, entry: Entry) -> dict:
    """The resolved entry as plain data (what `show` prints)."""
    fam, model, quant = entry.family, entry.model, entry.quantization
    style = catalog.prompt_style(entry)
    return {
        "name": entry.tag,
        "family": fam.name,
        "description": fam.description,
        "license": entry.license,
        "model_card": fam.model_card,
        "kind": fam.kind,
        "loader": fam.loader,
        "abilities": list(fam.abilities),
        "context": {k: v for k, v in dataclasses.asdict(entry.context).items() if v is not None},
        "sampling": {k: v for k, v in vars(fam.sampling).items() if v is not None},
        "size": model.size,
        "parameters": model.parameters,
        "active_parameters": model.active_parameters,
        "architecture": model.architecture.config_dict(),
        "quantization": {
            "name": quant.name, "bits": quant.bits, "group_size": quant.group_size, "mode": quant.mode,
            "repo": quant.repo, "revision": quant.revision, "size_bytes": quant.size_bytes,
            "generated": vars(quant.generated) if quant.generated else None,
        },
        "prompt_style": {
            "name": style.name, "stop": list(style.stop),
            "thinking": vars(style.thinking) if style.thinking else None,
            "tool_calls": vars(style.tool_calls) if style.tool_calls else None,
        } if style else None,
        "trust_remote_code": fam.trust_remote_code,
        "verified": entry.verified,
        "sources": list(entry.sources),
        "memory_at_context": estimate(entry).as_dict(),
    }


def cmd_show(args) -> int:
    catalog = _load(args)
    entry = catalog and _resolve(catalog, args.name)
    if entry is None:
        return 1
    print(json.dumps(describe(catalog, entry), indent=2, ensure_ascii=False))
    return 0


def cmd_estimate(args) -> int:
    catalog = _load(args)
    entry = catalog and _resolve(catalog, args.name)
    if entry is None:
        return 1
    est = estimate(entry, context=args.context, parallel=args.parallel, kv_bits=args.kv_bits)
    if args.json:
        print(json.dumps({"name": entry.tag, **est.as_dict()}, indent=2))
        return 0
    print(f"{entry.tag}: {est.parallel} x {est.context} tokens, {est.dtype} activations")
    for label, value in (("weights", est.weights), ("kv cache", est.kv_cache), ("activations", est.activations),
                         ("total", est.total)):
        print(f"  {label:<12}{_gib(value):>14}  ({value:,} bytes)")
    print(f"  kv per token  {est.kv_bytes_per_token:,} bytes")
    return 0


def cmd_scaffold(args) -> int:
    catalog = _load(args)
    if catalog is None:
        return 1
    if bool(args.dir) == bool(args.from_hub):
        print("error: give a checkpoint folder or --from-hub REPO", file=sys.stderr)
        return 2
    try:
        if args.from_hub:
            from .errors import ServiceError
            from .hub.verify import header_only_checkpoint

            try:
                with header_only_checkpoint(args.from_hub) as folder:
                    text = scaffold(folder, catalog, family=args.family, repo=args.repo or args.from_hub)
            except ServiceError as exc:
                raise ScaffoldError(exc.message) from None
        else:
            text = scaffold(Path(args.dir), catalog, family=args.family, repo=args.repo)
    except ScaffoldError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}; check it with `tools/catalog lint {args.output}`", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def cmd_verify(args) -> int:
    """Online: compare entries with the Hub (imports the hub client only when asked)."""
    from .catalog.loader import Locator
    from .hub.pull import Puller
    from .hub.verify import verify_entry

    if not args.online:
        print("error: verify needs --online (it contacts the Hub)", file=sys.stderr)
        return 2
    result = load_catalog([Path(p) for p in args.catalog] if args.catalog else None)
    if result.problems:
        for problem in result.problems:
            print(problem)
        return 1
    catalog = result.catalog
    entries = [e for e in catalog.entries() if e.quantization.repo]
    if args.names:
        entries = [e for e in (_resolve(catalog, n) for n in args.names) if e is not None]
    hub, locator = Puller(offline=False), Locator()
    problems = [p for e in entries for p in verify_entry(hub, catalog, e, locator.problem)]
    for problem in problems:
        print(problem)
    print(f"{len(entries)} entries checked, {len(problems)} difference(s)", file=sys.stderr)
    return 1 if problems else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tools/catalog", description="Work with the MLX Service model catalog.")
    sub = p.add_subparsers(dest="command", required=True)

    lint = sub.add_parser("lint", help="validate catalog files (default: the built-in catalog)")
    lint.add_argument("paths", nargs="*", help="extra catalog files or folders, layered over the built-in one")
    lint.add_argument("--no-builtin", action="store_true", help="lint only PATHS, without the built-in catalog")
    lint.add_argument("--format", choices=["text", "json"], default="text")
    lint.set_defaults(func=cmd_lint)

    def with_catalog(sp):
        sp.add_argument("--catalog", action="append", default=[], metavar="PATH",
                        help="extra catalog layer (default: $MLX_SERVICE_CATALOG_PATH)")
        return sp

    ls = with_catalog(sub.add_parser("list", help="list every catalog entry"))
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)

    show = with_catalog(sub.add_parser("show", help="show one resolved entry"))
    show.add_argument("name")
    show.set_defaults(func=cmd_show)

    est = with_catalog(sub.add_parser("estimate", help="memory needed to serve an entry"))
    est.add_argument("name")
    est.add_argument("--context", type=int, default=None, help="tokens per sequence (default: the family's)")
    est.add_argument("--parallel", type=int, default=1, help="sequences served at once")
    est.add_argument("--kv-bits", type=int, choices=[4, 8], default=None, help="quantized KV cache")
    est.add_argument("--json", action="store_true")
    est.set_defaults(func=cmd_estimate)

    ver = with_catalog(sub.add_parser("verify", help="check entries against the Hub (--online)"))
    ver.add_argument("names", nargs="*", help="entries to check (default: every entry with a repo)")
    ver.add_argument("--online", action="store_true", help="required: this contacts the Hub (HF_ENDPOINT)")
    ver.set_defaults(func=cmd_verify)

    sc = with_catalog(sub.add_parser("scaffold", help="write a catalog entry from a local checkpoint folder"))
    sc.add_argument("dir", nargs="?", help="checkpoint folder (or use --from-hub)")
    sc.add_argument("--from-hub", metavar="REPO", help="read config.json and weight headers from the Hub instead")
    sc.add_argument("--family", help="family name (default: from the folder name)")
    sc.add_argument("--repo", help="Hugging Face repo id of the checkpoint")
    sc.add_argument("-o", "--output", help="write to this file instead of stdout")
    sc.set_defaults(func=cmd_scaffold)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if getattr(args, "context", None) is not None and args.context < 1 or getattr(args, "parallel", 1) < 1:
        print("error: --context and --parallel must be positive", file=sys.stderr)
        return 2
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
