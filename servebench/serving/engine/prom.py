"""serve-engine's ``/metrics``: the engine's numbers under vLLM's names and meanings, in Prometheus text.

Generated with ``prometheus_client`` in a registry of the app's own (never the process-global one),
labelled ``model_name`` and ``engine="0"`` as vLLM's V1 engine labels them (vllm/v1/metrics/loggers.py),
so a tool that reads vLLM reads this server, and ``servebench load`` diagnoses it end to end:

* gauges, read from the engine at each scrape: ``vllm:num_requests_running`` and
  ``vllm:num_requests_waiting`` (the scheduler's running and waiting sequences),
  ``vllm:kv_cache_usage_perc`` (the scheduler's KV tokens in use over the KV it can hold: whole
  blocks under ``paged``, reserved tokens under ``reserve``; 1 is full);
* counters, the engine loop's running totals: ``vllm:num_preemptions_total`` (sequences preempted),
  ``vllm:prompt_tokens_total`` (prompt tokens computed, cached ones not), ``vllm:generation_tokens_total``
  (tokens emitted), and with prefix caching ``vllm:prefix_cache_queries_total`` and
  ``vllm:prefix_cache_hits_total`` (prompt tokens looked up and found at admission);
* histograms with vLLM's buckets, observed as each request ends: ``vllm:time_to_first_token_seconds``
  (arrival to first token), ``vllm:e2e_request_latency_seconds`` (arrival to end) and
  ``vllm:request_queue_time_seconds`` (arrival to admission) of every admitted request, and
  ``vllm:inter_token_latency_seconds`` for each gap between a request's tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from servebench.serving.scheduler import Outcome

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LABELS = ("model_name", "engine")
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)  # vLLM's
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)  # vLLM's
REQUEST_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                   480.0, 960.0, 1920.0, 7680.0)  # vLLM's request_latency_buckets
COUNTERS = (("vllm:num_preemptions", "preemptions", "Cumulative number of preemption from the engine."),
            ("vllm:prompt_tokens", "prompt_tokens", "Number of prefill tokens processed."),
            ("vllm:generation_tokens", "generation_tokens", "Number of generation tokens processed."))
PREFIX_COUNTERS = (("vllm:prefix_cache_queries", "prefix_queries",
                    "Prefix cache queries, in terms of number of queried tokens."),
                   ("vllm:prefix_cache_hits", "prefix_hits", "Prefix cache hits, in terms of number of cached tokens."))


class _Engine(Collector):
    """The gauges and counters, read from one engine snapshot per scrape (so they agree with each other)."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], labels: list[str], kv_capacity_tokens: int,
                 prefix_caching: bool) -> None:
        self.snapshot = snapshot
        self.labels = labels
        self.kv_capacity_tokens = kv_capacity_tokens
        self.prefix_caching = prefix_caching

    def collect(self) -> Iterator[Any]:
        s = self.snapshot()
        for name, key, text in (("vllm:num_requests_running", "running", "Number of requests in model execution "
                                                                          "batches."),
                                ("vllm:num_requests_waiting", "waiting", "Number of requests waiting to be "
                                                                         "processed."),
                                ("vllm:kv_cache_usage_perc", None, "KV-cache usage. 1 means 100 percent usage.")):
            g = GaugeMetricFamily(name, text, labels=LABELS)
            value = s[key] if key else s["kv_tokens_used"] / self.kv_capacity_tokens
            g.add_metric(self.labels, float(value))
            yield g
        for name, key, text in COUNTERS + (PREFIX_COUNTERS if self.prefix_caching else ()):
            c = CounterMetricFamily(name, text, labels=LABELS)
            c.add_metric(self.labels, float(s[key]))
            yield c


class EngineMetrics:
    """The registry behind serve-engine's ``/metrics``; observes the service's requests (its ``observer``)."""

    def __init__(self, snapshot: Callable[[], dict[str, Any]], model_name: str, kv_capacity_tokens: int,
                 prefix_caching: bool) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = [model_name, "0"]
        self.registry.register(_Engine(snapshot, labels, max(1, kv_capacity_tokens), prefix_caching))

        def histogram(name: str, text: str, buckets: tuple[float, ...]) -> Any:
            return Histogram(name, text, LABELS, buckets=buckets, registry=self.registry).labels(*labels)
        self.ttft = histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                              TTFT_BUCKETS)
        self.itl = histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                             ITL_BUCKETS)
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                             REQUEST_BUCKETS)
        self.queue = histogram("vllm:request_queue_time_seconds",
                               "Histogram of time spent in WAITING phase for request.", REQUEST_BUCKETS)

    def on_token_gap(self, gap_s: float) -> None:
        """Observe one gap between a request's tokens."""
        self.itl.observe(gap_s)

    def on_outcome(self, outcome: Outcome) -> None:
        """Observe a request that ended; one never admitted (rejected) is in no histogram, as in vLLM."""
        if outcome.admitted is None:
            return
        self.queue.observe(outcome.admitted - outcome.start)
        self.e2e.observe(outcome.end - outcome.start)
        if outcome.first_token is not None:
            self.ttft.observe(outcome.first_token - outcome.start)

    def render(self) -> bytes:
        """Return the Prometheus text page."""
        return generate_latest(self.registry)
