"""Checks an answer against what `/openapi.json` documents for its route: its status, its media type and, for
JSON, its body's schema."""

from __future__ import annotations

import json
from functools import lru_cache

import schemathesis


@lru_cache(maxsize=8)
def _parsed(openapi_json: str) -> tuple[dict, object]:
    raw = json.loads(openapi_json)
    return raw, schemathesis.openapi.from_dict(raw)


def assert_documented(response, method: str, path: str, openapi_json: str) -> None:
    """`path` as the document spells it (`/v1/models/{name}`). Raises, with schemathesis' explanation for a body
    that breaks its schema, if the answer is not one the document allows."""
    raw, schema = _parsed(openapi_json)
    answers = raw["paths"][path][method.lower()]["responses"]
    status = str(response.status_code)
    assert status in answers, f"{method.upper()} {path}: status {status} is not documented ({sorted(answers)})"
    media = response.headers.get("content-type", "").split(";")[0].strip()
    if not media and not response.content:  # an empty answer (Ollama's DELETE): nothing more to check
        return
    documented = answers[status].get("content", {})
    assert media in documented, f"{method.upper()} {path}: {media} is not documented for {status} ({list(documented)})"
    response.request.read()  # a multipart upload's body is a stream; schemathesis reads the request it answers
    schema[path][method.upper()].validate_response(response)
