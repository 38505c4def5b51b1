"""JSON Schema validation of one parsed file, with every error located in the YAML source.

Two validators, one schema: `jsonschema`'s Draft202012Validator is the reference (lint always uses it, and it
explains every error), and a `fastjsonschema`-compiled function accepts valid files ~20x faster at service start.
A file the fast one rejects is always re-checked by the reference, so errors look the same either way. The
compiled function is cached as bytecode next to the layer cache, because compiling it costs more than using it.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import json
import marshal
import re
import sys

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from .cache import cache_dir, store_bytes
from .paths import schema_file
from .problems import Problem, json_path
from .yamlio import Document


@functools.lru_cache(maxsize=1)
def validator() -> Draft202012Validator:
    schema = json.loads(schema_file().read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


@functools.lru_cache(maxsize=1)
def fast_validator():
    """A compiled validate(data) function, or None when fastjsonschema is unavailable."""
    try:
        import fastjsonschema
    except ImportError:  # pragma: no cover - it is a dependency; the reference validator still works
        return None
    raw = schema_file().read_bytes()
    key = hashlib.sha256(raw + sys.version.encode() + fastjsonschema.VERSION.encode()).hexdigest()[:24]
    path = cache_dir() / f"schema-{key}.marshal"
    try:
        code = marshal.loads(path.read_bytes())
    except (OSError, ValueError, EOFError, TypeError):
        schema = json.loads(raw)
        schema["$schema"] = "http://json-schema.org/draft-07/schema#"  # the subset we use is draft-07 too
        code = compile(fastjsonschema.compile_to_code(schema), "<catalog-schema>", "exec")
        store_bytes(path, marshal.dumps(code))
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - code generated from our own schema file
    return next(v for k, v in namespace.items() if k.startswith("validate_") and k.endswith("catalog_schema_json"))


def is_valid_fast(data) -> bool:
    check = fast_validator()
    if check is None:
        return False
    try:
        check(data)
    except Exception:  # any rejection: let the reference validator explain it
        return False
    return True


def validate(doc: Document, thorough: bool = True) -> list[Problem]:
    """Problems in `doc`; `thorough=False` first tries the fast validator and trusts a pass."""
    if not thorough and is_valid_fast(doc.data):
        return []
    problems: list[Problem] = []
    for error in validator().iter_errors(doc.data):
        problems.extend(_to_problems(doc, error))
    return sorted(set(problems), key=lambda p: (p.line, p.col, p.code))


def _extra_keys(error: ValidationError) -> list[str]:
    allowed = set(error.schema.get("properties", {}))
    return [k for k in error.instance if k not in allowed] if isinstance(error.instance, dict) else []


def _to_problems(doc: Document, error: ValidationError) -> list[Problem]:
    path = list(error.absolute_path)
    hint = error.schema.get("description", "") if isinstance(error.schema, dict) else ""
    kind = error.validator
    if kind == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        out = []
        for key in _extra_keys(error):
            close = difflib.get_close_matches(str(key), allowed, n=1)
            suggestion = f"did you mean `{close[0]}`?" if close else f"allowed keys: {', '.join(allowed)}"
            line, col = doc.key_position(path, key)
            out.append(Problem(doc.file, line, col, "schema-unknown-key", f"unknown key `{key}`: {suggestion}",
                               json_path(path + [key])))
        return out
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        what = error.schema.get("properties", {}).get(missing, {}).get("description", "")
        message = f"missing required key `{missing}`" + (f" ({what})" if what else "")
        return [doc.problem(path, "schema-required", message)]
    if kind == "oneOf" and path and path[-2:-1] == ["quantizations"]:
        both = isinstance(error.instance, dict) and "repo" in error.instance and "generated" in error.instance
        message = (
            "give either `repo` or `generated`, not both"
            if both
            else "a quantization needs `repo` (a Hugging Face repo id) or `generated` (a local recipe)"
        )
        return [doc.problem(path, "schema-source", message)]
    if kind == "anyOf" and not path:
        return [doc.problem(path, "schema-required", "the file must define one of `family`, `extends`, "
                                                  "`prompt_styles` or `detection`")]
    message = error.message
    if len(message) > 200:
        message = message[:200] + "..."
    if hint and kind in {"type", "pattern", "enum", "minimum", "maximum", "exclusiveMinimum", "minLength",
                         "minItems", "uniqueItems", "format", "maxLength"}:
        message += f": expected {hint[0].lower()}{hint[1:].rstrip('.')}"
    return [doc.problem(path, f"schema-{_kebab(kind)}", message)]


def _kebab(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
