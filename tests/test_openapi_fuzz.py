"""Schemathesis over the OpenAPI document: requests generated from every route's schema never get a 5xx, and
every answer is one the document declares (status, media type and body schema)."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from .fakes import offline_fake_app


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with offline_fake_app(tmp_path_factory.mktemp("openapi"), max_tokens=8) as (client, _):
        yield client.app


CHECKS = (not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance)


def test_generated_requests_get_documented_answers_and_never_a_server_error(app):
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures = []
    for operation in schema.get_all_operations():
        op = operation.ok()

        @settings(max_examples=15, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy())
        def check(case):
            response = case.call()
            try:
                case.validate_response(response, checks=CHECKS)
            except Exception as exc:  # collect rather than stop at the first route
                failures.append(f"{op.method.upper()} {op.path}: {str(exc)[:200]}")

        check()
    assert not failures, "\n".join(failures[:10])


CHAT = [{"role": "user", "content": "hi"}]
KNOWN_GOOD = [  # (method, path called, path documented, JSON body): each route's successful answers
    ("post", "/v1/chat/completions", None, {"model": "fake-a", "messages": CHAT}),
    ("post", "/v1/chat/completions", None, {"model": "fake-a", "messages": CHAT, "stream": True}),
    ("post", "/v1/completions", None, {"model": "fake-a", "prompt": "hi"}),
    ("post", "/v1/completions", None, {"model": "fake-a", "prompt": "hi", "stream": True}),
    ("post", "/v1/messages", None, {"model": "fake-a", "max_tokens": 8, "messages": CHAT}),
    ("post", "/v1/messages", None, {"model": "fake-a", "max_tokens": 8, "messages": CHAT, "stream": True}),
    ("post", "/v1/messages/count_tokens", None, {"model": "fake-a", "messages": CHAT}),
    ("post", "/api/chat", None, {"model": "fake-a", "messages": CHAT, "stream": False}),
    ("post", "/api/chat", None, {"model": "fake-a", "messages": CHAT}),
    ("post", "/api/chat", None, {"model": "fake-a", "messages": []}),  # load
    ("post", "/api/generate", None, {"model": "fake-a", "prompt": "hi", "stream": False}),
    ("post", "/api/generate", None, {"model": "fake-a", "prompt": "hi"}),
    ("post", "/api/generate", None, {"model": "fake-a", "keep_alive": 0}),  # unload
    ("post", "/api/show", None, {"model": "fake-a"}),
    ("get", "/api/tags", None, None),
    ("get", "/api/version", None, None),
    ("get", "/", None, None),
    ("post", "/v1/models/fake-b/load", "/v1/models/{name}/load", None),
    ("get", "/api/ps", None, None),
    ("get", "/v1/models", None, None),
    ("get", "/v1/models/loaded", None, None),
    ("get", "/v1/models/fake-b", "/v1/models/{name}", None),
    ("post", "/v1/models/fake-b/unload", "/v1/models/{name}/unload", None),
    ("get", "/api/stats", None, None),
    ("get", "/api/events", None, None),
    ("get", "/api/engine/config", None, None),
    ("post", "/api/engine/config", None, {"max_tokens": 32}),
    ("post", "/api/cache/clear", None, None),
    ("get", "/metrics", None, None),
    ("delete", "/api/delete", None, {"model": "fake-b"}),
    ("get", "/api/catalog", None, None),
    # and some refusals, in each dialect
    ("post", "/v1/chat/completions", None, {"model": "nope", "messages": CHAT}),
    ("post", "/v1/messages", None, {"model": "fake-a", "max_tokens": -1, "messages": CHAT}),
    ("post", "/api/chat", None, {"model": "fake-a", "messages": "x"}),
    ("delete", "/api/delete", None, {"model": "nope"}),
    ("delete", "/api/pull", None, {"model": "nope"}),  # no such pull running
]
REFUSED = [400, 400, 404, 404, 404]


def test_every_route_answers_as_documented(app):
    from fastapi.testclient import TestClient

    from .conformance import assert_documented

    client = TestClient(app)
    document = client.get("/openapi.json").text
    statuses = []
    for method, path, documented, body in KNOWN_GOOD:
        response = client.request(method, path, **({"json": body} if body is not None else {}))
        statuses.append(response.status_code)
        assert_documented(response, method, documented or path, document)
    ok = len(KNOWN_GOOD) - len(REFUSED)
    assert statuses[:ok] == [200] * ok, statuses
    assert sorted(statuses[ok:]) == REFUSED
