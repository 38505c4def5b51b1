"""The event log: what happened to each model and why, filterable, over a fake runner."""

from __future__ import annotations

from .fakes import fake_app
from .server import TEST_CATALOG

MSG = [{"role": "user", "content": "hi"}]


def _events(client, **query) -> list[dict]:
    r = client.get("/api/events", params=query)
    assert r.status_code == 200
    return r.json()["events"]


def test_loads_unloads_and_their_reasons(tmp_path):
    with fake_app(tmp_path, max_loaded_models=1) as (client, _):
        assert client.post("/api/chat", json={"model": "fake-a", "messages": MSG, "stream": False}).status_code == 200
        assert client.post("/api/chat", json={"model": "fake-b", "messages": MSG, "stream": False}).status_code == 200
        client.post("/v1/models/fake-b/unload")
        client.post("/api/chat", json={"model": "fake-a", "messages": MSG, "stream": False, "keep_alive": 0})
        log = [(e["kind"], e["model"], e.get("reason")) for e in _events(client, kind="load,unload")]
        assert log == [("load", "fake-a", None), ("unload", "fake-a", "lru"), ("load", "fake-b", None),
                       ("unload", "fake-b", "request"), ("load", "fake-a", None), ("unload", "fake-a", "keep_alive")]
        first = _events(client)[0]
        assert first["seconds"] >= 0 and first["memory_bytes"] == 1000 and first["time"].endswith("+00:00")
        assert [e["kind"] for e in _events(client, model="fake-b")] == ["load", "unload"]
        newest = _events(client)[-1]["id"]
        assert _events(client, since=newest) == [] and len(_events(client, limit=2)) == 2


def test_refusals_failures_and_request_errors(tmp_path, monkeypatch):
    with fake_app(tmp_path, [TEST_CATALOG], max_memory_gb=1e-6) as (client, _):
        assert client.post("/api/chat", json={"model": "tiny", "messages": MSG}).status_code == 507
        (refused,) = _events(client, kind="refused")
        assert refused["model"] == "tiny:s-f32" and refused["reason"] == "memory budget"
        assert _events(client, model="tiny") == [refused]  # any of its names
        client.post("/v1/chat/completions", json={"model": "nope", "messages": MSG})
        error = _events(client, kind="request_error")[-1]
        assert error["status"] == 404 and error["path"] == "/v1/chat/completions"
    with fake_app(tmp_path / "b") as (client, registry):
        async def broken(spec):
            raise RuntimeError("weights are corrupt")

        monkeypatch.setitem(registry._openers, "mlx-lm", broken)
        assert client.post("/api/chat", json={"model": "fake-a", "messages": MSG}).status_code == 500
        (failed,) = _events(client, kind="load_failed")
        assert "weights are corrupt" in failed["error"] and str(tmp_path) not in failed["error"]
        assert client.get("/api/events", params={"limit": 0}).status_code == 400


def test_stats_report_state_usage_and_memory(tmp_path):
    with fake_app(tmp_path) as (client, _):
        assert client.get("/api/stats").json()["models"] == []
        for _ in range(2):
            client.post("/v1/chat/completions", json={"model": "fake-a", "messages": MSG, "max_tokens": 3})
        stats = client.get("/api/stats").json()
        (row,) = stats["models"]
        assert row["name"] == "fake-a" and row["state"] == "ready" and row["batch_size"] == 2
        usage = row["usage"]
        assert usage["requests"] == 2 and usage["completion_tokens"] == 6 and usage["prompt_tokens"] == 2
        assert usage["ttft_seconds"]["last"] > 0 and usage["decode_tokens_per_second"]["mean"] > 0
        assert stats["process"]["rss_bytes"] > 10 * 2**20 and stats["pulls"] == []


def test_metrics_count_requests_tokens_and_latency(tmp_path):
    with fake_app(tmp_path) as (client, _):
        client.post("/v1/chat/completions", json={"model": "fake-a", "messages": MSG, "max_tokens": 3})
        client.post("/v1/chat/completions", json={"model": "nope", "messages": MSG})
        client.post("/v1/messages", json={"model": "fake-a", "messages": MSG, "max_tokens": 2})
        text = client.get("/metrics").text
        assert 'mlx_service_requests_total{dialect="openai",endpoint="/v1/chat/completions",status="200"} 1.0' in text
        assert 'mlx_service_requests_total{dialect="openai",endpoint="/v1/chat/completions",status="404"} 1.0' in text
        assert 'mlx_service_requests_total{dialect="anthropic",endpoint="/v1/messages",status="200"} 1.0' in text
        assert 'mlx_service_generated_tokens_total{model="fake-a"} 5.0' in text
        assert 'mlx_service_time_to_first_token_seconds_count{model="fake-a"} 2.0' in text
        assert 'mlx_service_loaded_models 1.0' in text and 'mlx_service_memory_bytes{kind="rss"}' in text
        client.post("/v1/chat/completions", json={"model": "fake-a", "messages": MSG, "max_tokens": 3})
        assert 'mlx_service_generated_tokens_total{model="fake-a"} 8.0' in client.get("/metrics").text


def test_a_real_runner_reports_prefix_cache_hits_and_mlx_memory(server):
    import httpx

    body = {"model": "tiny", "messages": [{"role": "user", "content": "the same long question " * 10}],
            "max_tokens": 2}
    for _ in range(2):
        assert httpx.post(server.url + "/v1/chat/completions", json=body).status_code == 200
    stats = httpx.get(server.url + "/api/stats").json()
    row = next(m for m in stats["models"] if m["name"] == "tiny:s-f32")
    assert row["prefix_cache"]["ram"]["hits"] >= 1 and row["kind"] == "text"
    assert stats["process"]["mlx"]["active_bytes"] > 0
    assert 'mlx_service_prefix_cache_total{model="tiny:s-f32",result="hit",tier="ram"}' in httpx.get(
        server.url + "/metrics").text


def test_engine_settings_apply_to_the_next_request_and_refuse_bad_values(tmp_path):
    with fake_app(tmp_path) as (client, registry):
        settings = client.get("/api/engine/config").json()["settings"]
        assert settings["max_tokens"] == 4096 and "batch_size" in settings and "port" not in settings
        r = client.post("/api/engine/config", json={"max_tokens": 2})
        assert r.status_code == 200 and r.json()["settings"]["max_tokens"] == 2 and r.json()["rebuilding"] == []
        client.post("/v1/chat/completions", json={"model": "fake-a", "messages": MSG})
        assert registry.opened["fake-a"].jobs[-1].max_tokens == 2  # the next request
        for body, needle in (({"max_tokens": 0}, "max_tokens"), ({"port": 9}, "port"), ({"batch_size": "x"},
                             "batch_size"), ({"max_queue": -1, "max_tokens": 5}, "max_queue")):
            r = client.post("/api/engine/config", json=body)
            assert r.status_code == 400 and needle in r.json()["error"]
        assert client.get("/api/engine/config").json()["settings"]["max_tokens"] == 2  # nothing half-applied
        events = client.get("/api/events", params={"kind": "configured"}).json()["events"]
        assert events[-1]["changes"] == {"max_tokens": 2}


def test_a_batch_setting_rebuilds_loaded_models_in_the_background(tmp_path):
    import time

    with fake_app(tmp_path) as (client, registry):
        client.post("/v1/chat/completions", json={"model": "fake-a", "messages": MSG})
        old = registry.opened["fake-a"]
        r = client.post("/api/engine/config", json={"prefill_step_size": 512})
        assert r.json()["rebuilding"] == ["fake-a"]
        deadline = time.time() + 10
        while client.get("/api/engine/config").json()["rebuilding"] and time.time() < deadline:
            time.sleep(0.02)
        new = registry.opened["fake-a"]
        assert new is not old and new.spec.prefill_step_size == 512 and old.closed
        assert client.post("/v1/chat/completions", json={"model": "fake-a", "messages": MSG}).status_code == 200
        assert new.jobs and [e["kind"] for e in client.get("/api/events").json()["events"]][-1] == "rebuilt"


def test_the_openapi_document_describes_every_route_and_its_body(tmp_path):
    with fake_app(tmp_path) as (client, _):
        spec = client.get("/openapi.json").json()
        assert client.get("/docs").status_code == 200
    paths = spec["paths"]
    for route in ("/v1/chat/completions", "/v1/messages", "/api/chat", "/v1/embeddings", "/api/embed",
                  "/v1/audio/transcriptions", "/api/engine/config", "/api/stats", "/metrics", "/api/events"):
        assert route in paths, route
    for route, operations in paths.items():
        for verb, operation in operations.items():
            if verb in ("post", "delete") and not route.endswith(("/load", "/unload")) and route != "/api/cache/clear":
                assert "requestBody" in operation, (verb, route)
    chat = paths["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "messages" in chat["properties"] and "tools" in chat["properties"]
