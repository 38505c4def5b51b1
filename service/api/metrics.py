"""`GET /metrics`: Prometheus exposition (prometheus-client) of what the service already counts.

Nothing is observed per token: requests are counted once as they finish (`RequestCounts`, fed by the
middleware; `usage.ModelUsage`, fed once per generation), and gauges (memory, loaded models, queues, batches,
prefix-cache hits) are read from the manager when Prometheus scrapes."""

from __future__ import annotations

from collections import Counter, defaultdict

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from ..usage import Histogram
from .errors import OLLAMA
from .process import mlx_memory, rss_bytes
from .schemas import documented

router = APIRouter()


class RequestCounts:
    """HTTP requests by dialect, endpoint (the route's template) and status, and their durations."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.durations: dict[tuple[str, str], Histogram] = defaultdict(Histogram)

    def add(self, path: str, endpoint: str, status: int, seconds: float) -> None:
        dialect = ("anthropic" if path.startswith("/v1/messages") else "openai" if path.startswith("/v1/")
                   else "ollama" if path.startswith("/api/") or path == "/" else "other")
        self.counts[(dialect, endpoint, str(status))] += 1
        self.durations[(dialect, endpoint)].observe(seconds)


def _histogram(family: HistogramMetricFamily, labels: list[str], h: Histogram) -> None:
    running, buckets = 0, []
    for edge, count in zip(list(h.buckets) + [float("inf")], h.counts):
        running += count
        buckets.append(("+Inf" if edge == float("inf") else repr(edge), running))
    family.add_metric(labels, buckets, h.total)


class ServiceCollector:
    def __init__(self, app):
        self.app = app

    def collect(self):
        state = self.app.state
        manager, requests = state.manager, state.request_counts
        total = CounterMetricFamily("mlx_service_requests", "HTTP requests", labels=["dialect", "endpoint", "status"])
        for labels, count in sorted(requests.counts.items()):
            total.add_metric(list(labels), count)
        yield total
        duration = HistogramMetricFamily("mlx_service_request_duration_seconds", "HTTP request duration",
                                         labels=["dialect", "endpoint"])
        for labels, h in sorted(requests.durations.items()):
            _histogram(duration, list(labels), h)
        yield duration
        memory = GaugeMetricFamily("mlx_service_memory_bytes", "Process memory", labels=["kind"])
        memory.add_metric(["rss"], rss_bytes())
        for key, value in (mlx_memory() or {}).items():
            memory.add_metric([f"mlx_{key.removesuffix('_bytes')}"], value)
        yield memory
        yield GaugeMetricFamily("mlx_service_loaded_models", "Models loaded", value=len(manager.models))
        per_model = {
            "prompt_tokens": CounterMetricFamily("mlx_service_prompt_tokens", "Prompt tokens", labels=["model"]),
            "completion_tokens": CounterMetricFamily("mlx_service_generated_tokens", "Generated tokens",
                                                     labels=["model"]),
            "requests": CounterMetricFamily("mlx_service_model_requests", "Finished requests", labels=["model"]),
        }
        hists = {"ttft": HistogramMetricFamily("mlx_service_time_to_first_token_seconds", "Time to first token",
                                               labels=["model"]),
                 "per_token": HistogramMetricFamily("mlx_service_time_per_output_token_seconds",
                                                    "Time per output token after the first", labels=["model"]),
                 "queued": HistogramMetricFamily("mlx_service_queue_wait_seconds", "Waiting for a place in the batch",
                                                 labels=["model"])}
        gauges = {"queue": GaugeMetricFamily("mlx_service_queue_depth", "Requests waiting", labels=["model"]),
                  "batch": GaugeMetricFamily("mlx_service_batch_size", "Requests decoded together", labels=["model"]),
                  "running": GaugeMetricFamily("mlx_service_running", "Requests running", labels=["model"])}
        cache = CounterMetricFamily("mlx_service_prefix_cache", "Prefix-cache lookups",
                                    labels=["model", "tier", "result"])
        for name, served in sorted(manager.models.items()):
            usage, stats = served.usage, served.runner.stats()
            for key, family in per_model.items():
                family.add_metric([name], getattr(usage, key))
            for key, family in hists.items():
                _histogram(family, [name], getattr(usage, key))
            gauges["queue"].add_metric([name], stats.get("waiting", 0) + served.waiting)
            gauges["batch"].add_metric([name], served.runner.capacity)
            gauges["running"].add_metric([name], stats.get("running", 0))
            for tier, prefix in (("ram", "cache"), ("disk", "disk")):
                for result, label in (("hits", "hit"), ("misses", "miss")):
                    if f"{prefix}_{result}" in stats:
                        cache.add_metric([name, tier, label], stats[f"{prefix}_{result}"])
        yield from per_model.values()
        yield from hists.values()
        yield from gauges.values()
        yield cache


@router.get("/metrics", responses=documented(OLLAMA, also=("text/plain",)))
async def metrics(request: Request):
    registry = getattr(request.app.state, "metrics_registry", None)
    if registry is None:
        registry = request.app.state.metrics_registry = CollectorRegistry(auto_describe=False)
        registry.register(ServiceCollector(request.app))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
