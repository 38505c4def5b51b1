"""Schemathesis over the OpenAPI document: requests generated from every route's schema never get a 5xx."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error

from .fakes import offline_fake_app


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    with offline_fake_app(tmp_path_factory.mktemp("openapi"), max_tokens=8) as (client, _):
        yield client.app


def test_generated_requests_never_get_a_server_error(app):
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
                case.validate_response(response, checks=(not_a_server_error,))
            except Exception as exc:  # collect rather than stop at the first route
                failures.append(f"{op.method.upper()} {op.path}: {str(exc)[:200]}")

        check()
    assert not failures, "\n".join(failures[:10])
