"""JSON Schema validation of one parsed file, with every error located in the YAML source."""

from __future__ import annotations

import difflib
import functools
import json
import re

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

from .paths import schema_file
from .problems import Problem, json_path
from .yamlio import Document

@functools.lru_cache(maxsize=1)
def validator() -> Draft202012Validator:
    schema = json.loads(schema_file().read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)


def validate(doc: Document) -> list[Problem]:
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
