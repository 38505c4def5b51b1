"""How each model family writes tool calls: its markers, a parser for a call's text, and the grammar that
forces a call (structured output). Formats are named in the catalog's prompt styles (`tool_calls.format`).

Parsers are written from the models' documented formats (Hermes/Qwen `<tool_call>` JSON, Qwen3-Coder XML, Llama
3.x JSON, Mistral `[TOOL_CALLS]`, Llama 3.2/4 pythonic lists, gpt-oss Harmony) and are forgiving about
whitespace; what does not parse is returned as text, never dropped.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from .events import ToolCall
from .request import Tool

# lit(text) -> a Lark atom matching `text` exactly (quoted text, or a special token reference)
Lit = Callable[[str], str]
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def make_call(name: str, arguments: Any) -> ToolCall:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    return ToolCall(call_id(), name, json.dumps(arguments if arguments is not None else {}, ensure_ascii=False))


def json_rule(schema: dict) -> str:
    """A Lark `%json` atom for `schema`, written the way models write JSON (no free whitespace to loop on)."""
    return "%json" + json.dumps({**schema, "x-guidance": JSON_STYLE}, ensure_ascii=False)


def quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _call_schema(tool: Tool, arguments_key: str = "arguments") -> dict:
    return {"type": "object", "properties": {"name": {"const": tool.name}, arguments_key: tool.parameters},
            "required": ["name", arguments_key], "additionalProperties": False}


@dataclass(frozen=True)
class ToolFormat:
    """`start`/`end`: the markers around one call (None: the call is the whole output, or runs to its end)."""

    name: str
    start: str | None
    end: str | None

    def parse(self, body: str, tools: list[Tool]) -> list[ToolCall] | None:
        """The calls in `body` (the text between the markers); None when it is not a call."""
        raise NotImplementedError

    def grammar(self, tool: Tool, lit: Lit) -> str:
        """A Lark expression for one call of `tool`, markers included."""
        raise NotImplementedError

    def _wrap(self, inner: str, lit: Lit) -> str:
        return " ".join(x for x in (lit(self.start) if self.start else "", inner,
                                    lit(self.end) if self.end else "") if x)


def _objects(body: str) -> list[Any] | None:
    """JSON values in `body`: one value, a list, or several separated by `;` or newlines."""
    body = body.strip()
    if not body:
        return None
    try:
        value = json.loads(body)
        return value if isinstance(value, list) else [value]
    except ValueError:
        pass
    out, decoder, i = [], json.JSONDecoder(), 0
    while i < len(body):
        while i < len(body) and body[i] in " \t\r\n;,":
            i += 1
        if i >= len(body):
            break
        try:
            value, i = decoder.raw_decode(body, i)
        except ValueError:
            return None
        out.append(value)
    return out


def _named_calls(values: list[Any] | None) -> list[ToolCall] | None:
    if not values:
        return None
    calls = []
    for value in values:
        if not isinstance(value, dict):
            return None
        fn = value.get("function") if isinstance(value.get("function"), dict) else value
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            return None
        calls.append(make_call(name, fn.get("arguments", fn.get("parameters", {}))))
    return calls


class JsonTags(ToolFormat):
    """Hermes style (Qwen2.5, Qwen3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`."""

    def parse(self, body, tools):
        return _named_calls(_objects(body))

    def grammar(self, tool, lit):
        return self._wrap(f'"\\n" {json_rule(_call_schema(tool))} "\\n"', lit)


class LlamaJson(ToolFormat):
    """Llama 3.x: the whole reply is `{"name": ..., "parameters": {...}}` (optionally after `<|python_tag|>`)."""

    def parse(self, body, tools):
        return _named_calls(_objects(body.replace("<|python_tag|>", "")))

    def grammar(self, tool, lit):
        return self._wrap(json_rule(_call_schema(tool, "parameters")), lit)


class Mistral(ToolFormat):
    """Mistral: `[TOOL_CALLS][{"name": ..., "arguments": {...}}]`, or since v11 `[TOOL_CALLS]name[ARGS]{...}`."""

    def parse(self, body, tools):
        body = body.strip()
        if body[:1] in "[{":
            return _named_calls(_objects(body))
        calls = []
        for part in filter(None, (p.strip() for p in body.split(self.start or "[TOOL_CALLS]"))):
            name, sep, args = part.partition("[ARGS]")
            if not sep or not name.strip():
                return None
            try:
                calls.append(make_call(name.strip(), json.loads(args)))
            except ValueError:
                return None
        return calls or None

    def grammar(self, tool, lit):
        return self._wrap(f'"[" {json_rule(_call_schema(tool))} "]"', lit)


_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)(?:</function>|$)", re.S)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.S)


class XmlFunction(ToolFormat):
    """Qwen3-Coder: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n
    </tool_call>`. A value is text; it is read as JSON when the tool's schema says it is not a string."""

    def parse(self, body, tools):
        schemas = {t.name: t.parameters.get("properties", {}) for t in tools}
        calls = []
        for name, inner in _FUNCTION.findall(body):
            props = schemas.get(name.strip(), {})
            args = {}
            for key, raw in _PARAMETER.findall(inner):
                value = raw[1:] if raw.startswith("\n") else raw
                value = value[:-1] if value.endswith("\n") else value
                args[key.strip()] = _typed(value, props.get(key.strip(), {}))
            calls.append(make_call(name.strip(), args))
        return calls or None

    def grammar(self, tool, lit):
        props = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        parts = []
        for key, schema in props.items():
            value = _xml_value(schema if isinstance(schema, dict) else {})
            param = f'"<parameter={key}>\\n" {value} "</parameter>\\n"'
            parts.append(param if key in required else f"({param})?")
        inner = f'"\\n<function={tool.name}>\\n" {" ".join(parts)} "</function>\\n"'.replace("  ", " ")
        return self._wrap(inner, lit)


def _typed(value: str, schema: dict) -> Any:
    if schema.get("type") in (None, "string") and "enum" not in schema:
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _xml_value(schema: dict) -> str:
    """A parameter's value and the newline before `</parameter>` (text may hold newlines of its own)."""
    if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
        return "(" + " | ".join(quoted(v + "\n") for v in schema["enum"]) + ")"
    if schema.get("type") == "string":
        return r"/[^<]*\n/"
    return json_rule(schema) + ' "\\n"'


class Pythonic(ToolFormat):
    """Llama 3.2 / Llama 4: `[get_weather(city="Paris"), get_time()]`."""

    def parse(self, body, tools):
        body = body.strip()
        for marker in (self.start, self.end):
            if marker:
                body = body.replace(marker, "")
        try:
            tree = ast.parse(body.strip(), mode="eval").body
        except (SyntaxError, ValueError):
            return None
        nodes = tree.elts if isinstance(tree, ast.List) else [tree]
        calls = []
        for node in nodes:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return None
            try:
                args = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
            except ValueError:
                return None
            calls.append(make_call(node.func.id, args))
        return calls or None

    def grammar(self, tool, lit):
        props = tool.parameters.get("properties", {})
        required = [k for k in tool.parameters.get("required", []) if k in props]
        args = ' ", " '.join(f'"{k}=" {_python_value(props[k])}' for k in required)
        inner = f'"[{tool.name}(" {args} ")]"' if args else f'"[{tool.name}()]"'
        return self._wrap(inner, lit)


_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Name) and node.id in _NAMES:
        return _NAMES[node.id]
    return ast.literal_eval(node)


def _python_value(schema: dict) -> str:
    if schema.get("type") == "boolean":
        return '("True" | "False")'
    return json_rule(schema)


class Harmony(ToolFormat):
    """gpt-oss: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}` ended by `<|call|>`.
    The output splitter reads Harmony's channels itself; this parses a call's header and body."""

    def parse(self, body, tools):
        header, _, args = body.partition("<|message|>")
        match = re.search(r"to=functions\.([^\s<]+)", header)
        if not match:
            return None
        try:
            return [make_call(match.group(1), json.loads(args) if args.strip() else {})]
        except ValueError:
            return None

    def grammar(self, tool, lit):
        return (f'{lit("<|channel|>")} "commentary to=functions.{tool.name} " {lit("<|constrain|>")} "json" '
                f'{lit("<|message|>")} {json_rule(tool.parameters)}')


_FORMATS: dict[str, tuple[type[ToolFormat], str | None, str | None]] = {
    "json_tags": (JsonTags, "<tool_call>", "</tool_call>"),
    "xml_function": (XmlFunction, "<tool_call>", "</tool_call>"),
    "json": (LlamaJson, None, None),
    "mistral": (Mistral, "[TOOL_CALLS]", None),
    "pythonic": (Pythonic, None, None),
    "harmony": (Harmony, None, None),
}
FORMAT_NAMES = tuple(_FORMATS)


def tool_format(name: str, start: str | None = None, end: str | None = None) -> ToolFormat:
    """The format `name`, with the prompt style's markers where it gives them."""
    cls, default_start, default_end = _FORMATS[name]
    return cls(name, start or default_start, end or default_end)
