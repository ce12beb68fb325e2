"""What a server's own Prometheus metrics say about a run: known signals, their statistics, its histograms.

Pure: samples in (:class:`~servebench.records.server_samples.ServerSamples`, on the records' clock),
data out. :data:`KNOWN_SIGNALS` names what vLLM, SGLang, TGI and TensorRT-LLM publish under a
common role (``running``, ``waiting``, ``kv_usage``, ``preemptions``, ...); a metric not in it is
kept in the samples and counted, never dropped. Over a window:

* a gauge's mean, max and p95 over the scrapes inside the window (nearest rank);
* a counter's increase from the last scrape at or before the window's start to the first at or
  after its end (a drop is a restart: the count after it is added, as Prometheus's ``increase``
  does), and that increase per second;
* a histogram's observations in the window (the same two scrapes' bucket counts subtracted) and
  its quantiles, interpolated linearly within a bucket as Prometheus's ``histogram_quantile``
  does: an estimate whose error is the bucket's width, reported beside it.

Several label sets of one family (vLLM's engines under data parallelism, one endpoint each) are
summed for counts and histograms; a usage fraction takes the largest (the fullest engine binds).
SGLang publishes per rank: series of a ``tp_rank`` or ``pp_rank`` other than 0 repeat rank 0's and
are left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servebench.analysis.percentiles import percentile
from servebench.records.server_samples import Series, ServerSamples

Kind = Literal["gauge", "counter", "histogram"]
QUANTILES: tuple[float, ...] = (50, 90, 95, 99)  # the client report's (summary.REPORT_QUANTILES)
VLLM_DOC = "https://docs.vllm.ai/en/stable/usage/metrics/ (names from vllm/v1/metrics/loggers.py)"
SGLANG_DOC = "https://docs.sglang.io/references/production_metrics.html (python/sglang/srt/metrics/collector.py)"
TGI_DOC = "https://huggingface.co/docs/text-generation-inference/reference/metrics"
TRTLLM_DOC = "AIPerf's server-metrics reference (trtllm-serve with return_perf_metrics, or through Dynamo)"


@dataclass(frozen=True)
class Signal:
    """One metric family a server publishes: what it measures, under which common role, in which unit."""

    family: str
    server: str
    role: str
    kind: Kind
    unit: str
    meaning: str


def _signals(server: str, rows: Sequence[tuple[str, str, Kind, str, str]]) -> tuple[Signal, ...]:
    return tuple(Signal(family, server, role, kind, unit, meaning) for family, role, kind, unit, meaning in rows)


# Family names as the parser gives them: a counter's without ``_total``, a histogram's without its suffixes.
KNOWN_SIGNALS: tuple[Signal, ...] = (
    *_signals("vLLM", [
        ("vllm:num_requests_running", "running", "gauge", "requests", "requests in model execution batches"),
        ("vllm:num_requests_waiting", "waiting", "gauge", "requests", "requests waiting to be scheduled"),
        ("vllm:kv_cache_usage_perc", "kv_usage", "gauge", "fraction", "share of KV-cache blocks in use (1: full)"),
        ("vllm:gpu_cache_usage_perc", "kv_usage", "gauge", "fraction",
         "share of GPU KV-cache blocks in use (1: full); the name before 0.9"),
        ("vllm:num_preemptions", "preemptions", "counter", "requests",
         "requests preempted to free KV memory (they recompute their prefill later)"),
        ("vllm:prompt_tokens", "prompt_tokens", "counter", "tokens", "prefill tokens processed"),
        ("vllm:generation_tokens", "generation_tokens", "counter", "tokens", "tokens generated"),
        ("vllm:prefix_cache_queries", "prefix_queries", "counter", "tokens", "prompt tokens looked up in the prefix cache"),
        ("vllm:prefix_cache_hits", "prefix_hits", "counter", "tokens", "prompt tokens found in the prefix cache"),
        ("vllm:gpu_prefix_cache_queries", "prefix_queries", "counter", "tokens", "the same, the name before 0.9"),
        ("vllm:gpu_prefix_cache_hits", "prefix_hits", "counter", "tokens", "the same, the name before 0.9"),
        ("vllm:request_success", "requests_finished", "counter", "requests", "requests finished, by finished_reason"),
        ("vllm:num_requests_swapped", "swapped", "gauge", "requests", "requests swapped to CPU memory (V0 engine)"),
        ("vllm:time_to_first_token_seconds", "ttft", "histogram", "s",
         "arrival at the server (tokenization starts) to the first token"),
        ("vllm:e2e_request_latency_seconds", "e2e", "histogram", "s", "arrival at the server to the last token"),
        ("vllm:request_queue_time_seconds", "queue_time", "histogram", "s", "time in the WAITING state"),
        ("vllm:inter_token_latency_seconds", "itl", "histogram", "s", "time between a request's successive tokens"),
        ("vllm:time_per_output_token_seconds", "itl", "histogram", "s",
         "time between successive tokens; the name before inter_token_latency_seconds"),
        ("vllm:request_prefill_time_seconds", "prefill_time", "histogram", "s",
         "scheduled to the first token (the prefill)"),
        ("vllm:request_decode_time_seconds", "decode_time", "histogram", "s", "first to last token (the decode)"),
    ]),
    *_signals("SGLang", [
        ("sglang:num_running_reqs", "running", "gauge", "requests", "requests in the running batch"),
        ("sglang:num_queue_reqs", "waiting", "gauge", "requests", "requests in the waiting queue"),
        ("sglang:token_usage", "kv_usage", "gauge", "fraction", "share of the KV token pool in use (1: full)"),
        ("sglang:num_used_tokens", "kv_used_tokens", "gauge", "tokens", "KV tokens in use"),
        ("sglang:max_total_num_tokens", "kv_capacity_tokens", "gauge", "tokens", "tokens the KV pool holds"),
        ("sglang:cache_hit_rate", "prefix_hit_rate", "gauge", "fraction", "prefix (radix) cache hit rate"),
        ("sglang:gen_throughput", "generation_rate", "gauge", "tokens/s", "generation throughput"),
        ("sglang:num_retracted_requests", "preemptions", "counter", "requests",
         "requests retracted from the batch to free KV memory (SGLang's preemption)"),
        ("sglang:prompt_tokens", "prompt_tokens", "counter", "tokens", "prefill tokens processed"),
        ("sglang:generation_tokens", "generation_tokens", "counter", "tokens", "tokens generated"),
        ("sglang:cached_tokens", "prefix_hits", "counter", "tokens", "prompt tokens served from the prefix cache"),
        ("sglang:time_to_first_token_seconds", "ttft", "histogram", "s", "arrival to the first token"),
        ("sglang:e2e_request_latency_seconds", "e2e", "histogram", "s", "arrival to the last token"),
        ("sglang:queue_time_seconds", "queue_time", "histogram", "s", "time in the waiting queue"),
        ("sglang:inter_token_latency_seconds", "itl", "histogram", "s", "time between successive tokens"),
    ]),
    *_signals("TGI", [
        ("tgi_batch_current_size", "running", "gauge", "requests", "current batch size"),
        ("tgi_queue_size", "waiting", "gauge", "requests", "current queue size"),
        ("tgi_request_count", "requests_received", "counter", "requests", "requests received"),
        ("tgi_request_queue_duration", "queue_time", "histogram", "s", "time spent in the queue"),
        ("tgi_request_duration", "e2e", "histogram", "s", "total time processing the request"),
        ("tgi_request_mean_time_per_token_duration", "tpot", "histogram", "s", "a request's mean time per token"),
    ]),
    *_signals("TensorRT-LLM", [
        ("trtllm_num_requests_running", "running", "gauge", "requests", "active requests"),
        ("trtllm_num_requests_waiting", "waiting", "gauge", "requests", "queued requests"),
        ("trtllm_kv_cache_utilization", "kv_usage", "gauge", "fraction", "KV-cache use (1: full)"),
        ("trtllm_kv_cache_hit_rate", "prefix_hit_rate", "gauge", "fraction", "KV-cache reuse rate"),
        ("trtllm_prompt_tokens", "prompt_tokens", "counter", "tokens", "prefill tokens processed"),
        ("trtllm_generation_tokens", "generation_tokens", "counter", "tokens", "tokens generated"),
        ("trtllm_request_success", "requests_finished", "counter", "requests", "requests finished"),
        ("trtllm_time_to_first_token_seconds", "ttft", "histogram", "s", "arrival to the first token"),
        ("trtllm_e2e_request_latency_seconds", "e2e", "histogram", "s", "arrival to the last token"),
        ("trtllm_request_queue_time_seconds", "queue_time", "histogram", "s", "time in the queue"),
        ("trtllm_time_per_output_token_seconds", "itl", "histogram", "s", "time between successive tokens"),
    ]),
)
BY_FAMILY: dict[str, Signal] = {s.family: s for s in KNOWN_SIGNALS}
COUNT_ROLES = frozenset({"running", "waiting", "swapped", "kv_used_tokens", "kv_capacity_tokens"})  # summed
CLIENT_TWIN = {"ttft": "ttft_s", "e2e": "latency_s", "queue_time": "queue_wait_s", "itl": "itl_s"}
DIFFERENCE_NOTE = ("The server times a request from its arrival at the server to its tokens leaving it; the client "
                   "from the intended send to their arrival. A difference between the two is the network, the "
                   "client (its HTTP stack and stream parsing) and the generator's own lag, not the server.")


def known(series: Series) -> Signal | None:
    """Return the known signal a series belongs to (an untyped counter's name ends in ``_total``)."""
    return BY_FAMILY.get(series.family) or BY_FAMILY.get(series.family.removesuffix("_total"))


# --------------------------------------------------------------------------- the report section


class SignalStats(BaseModel):
    """One known signal over the window: a gauge's mean, max and p95, or a counter's increase and rate."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    family: str
    server: str
    role: str
    kind: Kind
    unit: str
    meaning: str
    scrapes: int = Field(description="Scrapes inside the window (a counter: the two that bound it, and those between).")
    mean: float | None = Field(None, description="Gauge: mean over the window's scrapes.")
    max: float | None = Field(None, description="Gauge: the largest.")
    p95: float | None = Field(None, description="Gauge: nearest-rank p95 over the window's scrapes.")
    increase: float | None = Field(None, description="Counter: increase over the window.")
    rate_per_s: float | None = Field(None, description="Counter: increase / the time between its two scrapes.")


class HistogramStats(BaseModel):
    """One server histogram over the window, beside the client's percentiles of the same measure."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    family: str
    server: str
    role: str
    meaning: str
    count: int = Field(description="Observations in the window.")
    mean_s: float | None
    quantiles_s: dict[str, float | None] = Field(description="p50, p90, p95, p99 estimated from the buckets.")
    bucket_s: dict[str, list[float | None]] = Field(
        description="The bucket each quantile fell in, [lower, upper] s: the estimate's resolution.")
    client_metric: str | None = Field(description="The client report's field for the same measure, if any.")
    client_s: dict[str, float | None] | None = Field(None, description="The client's p50, p90, p95, p99.")


class ServerMetricsReport(BaseModel):
    """The server's own view of a run, from its Prometheus metrics (``summarize``'s ``server_metrics``)."""

    model_config = ConfigDict(ser_json_inf_nan="strings")
    window_start: float
    window_end: float
    endpoints: list[str]
    servers: list[str] = Field(description="Servers whose known names were found (vLLM, SGLang, TGI, TensorRT-LLM).")
    scrapes: int = Field(description="Scrapes inside the window (of the first endpoint).")
    families: int = Field(description="Metric families scraped, known or not.")
    unknown_families: int = Field(description="Families not in servebench's table: kept in the samples, not summarized.")
    signals: list[SignalStats]
    histograms: list[HistogramStats]
    note: str = Field(DIFFERENCE_NOTE)


def server_metrics_report(samples: ServerSamples, window_start: float, window_end: float,
                          client: Mapping[str, Mapping[float, float | None]] | None = None) -> ServerMetricsReport:
    """Return the server-metrics section over [window_start, window_end] (``client``: field -> {q: value}).

    ``client`` holds the client report's percentiles by field (``ttft_s``, ``latency_s``, ...) to show
    beside the server's histograms of the same measure.
    """
    families = {s.family for s in samples.series}
    unknown = {s.family for s in samples.series if known(s) is None}
    first_endpoint = samples.series[0].endpoint if samples.series else None
    scrape_times = _scrape_times(samples, first_endpoint)
    in_window = scrape_times[(scrape_times >= window_start) & (scrape_times <= window_end)]
    stats, hists = [], []
    for sig in _present(samples):
        if sig.kind == "histogram":
            h = histogram_window(samples, sig.family, window_start, window_end)
            if h is None:
                continue
            twin = CLIENT_TWIN.get(sig.role)
            theirs = None if client is None or twin is None or client.get(twin) is None else \
                {f"p{q:g}": client[twin].get(q) for q in QUANTILES}
            hists.append(HistogramStats(
                family=sig.family, server=sig.server, role=sig.role, meaning=sig.meaning, count=int(h.count),
                mean_s=h.sum / h.count if h.count > 0 else None,
                quantiles_s={f"p{q:g}": h.quantile(q)[0] for q in QUANTILES},
                bucket_s={f"p{q:g}": list(h.quantile(q)[1]) for q in QUANTILES},
                client_metric=twin, client_s=theirs))
        elif sig.kind == "counter":
            inc, span = counter_increase(samples, sig.family, window_start, window_end)
            stats.append(SignalStats(**_about(sig), scrapes=int(in_window.size), increase=inc,
                                     rate_per_s=inc / span if inc is not None and span > 0 else None))
        else:
            t, v = gauge_series(samples, sig.family, window_start, window_end)
            stats.append(SignalStats(**_about(sig), scrapes=int(t.size),
                                     mean=float(v.mean()) if v.size else None,
                                     max=float(v.max()) if v.size else None, p95=percentile(v, 95)))
    return ServerMetricsReport(
        window_start=window_start, window_end=window_end,
        endpoints=list(dict.fromkeys(s.endpoint for s in samples.series)),
        servers=sorted({sig.server for sig in _present(samples)}), scrapes=int(in_window.size),
        families=len(families), unknown_families=len(unknown), signals=stats, histograms=hists)


def client_percentiles(report: Any) -> dict[str, dict[float, float | None]]:
    """Return a client report's percentiles by field (``ttft_s``, ``latency_s``, ``queue_wait_s``, ``itl_s``)."""
    out = {}
    for name in CLIENT_TWIN.values():
        dist = getattr(report, name, None)
        if dist is not None and dist.n:
            out[name] = {q: dist.at(q) for q in QUANTILES}
    return out


def _about(sig: Signal) -> dict[str, Any]:
    return {"family": sig.family, "server": sig.server, "role": sig.role, "kind": sig.kind, "unit": sig.unit,
            "meaning": sig.meaning}


def _present(samples: ServerSamples) -> list[Signal]:
    """Return the known signals the samples hold, in the table's order."""
    found = {known(s) for s in samples.series} - {None}
    return [sig for sig in KNOWN_SIGNALS if sig in found]


def _scrape_times(samples: ServerSamples, endpoint: str | None) -> np.ndarray:
    """Return the distinct scrape times of one endpoint, sorted."""
    times = [samples.of(k)[0] for k, s in enumerate(samples.series) if s.endpoint == endpoint]
    return np.unique(np.concatenate(times)) if times else np.zeros(0)


def _repeats_rank0(s: Series) -> bool:
    """Return whether a series is a rank other than 0 of SGLang's per-rank metrics (a repeat of rank 0's)."""
    return any(s.label(k) not in (None, "0") for k in ("tp_rank", "pp_rank"))


def _members(samples: ServerSamples, family: str) -> list[int]:
    """Return the series of ``family`` (by index) that count, SGLang's repeated ranks left out."""
    return [k for k, s in enumerate(samples.series)
            if (s.family == family or s.family.removesuffix("_total") == family) and not _repeats_rank0(s)]


# --------------------------------------------------------------------------- gauges


def gauge_series(samples: ServerSamples, family: str, start: float = -math.inf,
                 end: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
    """Return one gauge over time inside [start, end]: label sets summed (counts) or maxed (fractions).

    With several endpoints, each scrape time takes every endpoint's latest value at or before it.
    """
    sig = BY_FAMILY.get(family)
    combine = np.sum if sig is None or sig.role in COUNT_ROLES else np.max
    per_endpoint: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for endpoint in dict.fromkeys(samples.series[k].endpoint for k in _members(samples, family)):
        parts = [samples.of(k) for k in _members(samples, family) if samples.series[k].endpoint == endpoint]
        t, v = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        times, at = np.unique(t, return_inverse=True)
        order = np.argsort(at, kind="stable")
        starts = np.searchsorted(at[order], np.arange(times.size))  # every scrape time has a row
        reduce = np.add.reduceat if combine is np.sum else np.maximum.reduceat
        per_endpoint[endpoint] = (times, reduce(v[order].astype(np.float64), starts))
    if not per_endpoint:
        return np.zeros(0), np.zeros(0)
    if len(per_endpoint) == 1:
        t, v = next(iter(per_endpoint.values()))
    else:
        t = np.unique(np.concatenate([tt for tt, _ in per_endpoint.values()]))
        cols = []
        for tt, vv in per_endpoint.values():
            i = np.searchsorted(tt, t, side="right") - 1
            cols.append(np.where(i >= 0, vv[np.clip(i, 0, None)], np.nan))
        stacked = np.vstack(cols)
        t, v = t[~np.isnan(stacked).any(axis=0)], combine(stacked[:, ~np.isnan(stacked).any(axis=0)], axis=0)
    keep = (t >= start) & (t <= end) & np.isfinite(v)
    return t[keep], v[keep]


# --------------------------------------------------------------------------- counters


def _bounding(t: np.ndarray, start: float, end: float) -> tuple[int, int] | None:
    """Return the indices of the scrape at or before ``start`` (else the first) and at or after ``end`` (else the last)."""
    if t.size == 0:
        return None
    i = int(np.searchsorted(t, start, side="right")) - 1
    j = int(np.searchsorted(t, end, side="left"))
    return max(i, 0), min(j, t.size - 1)


def _increase(v: np.ndarray) -> float:
    """Return a counter's increase over its samples, a drop read as a restart (the value after it added).

    >>> _increase(np.array([5.0, 7.0, 2.0, 4.0]))
    6.0
    """
    if v.size < 2:
        return 0.0
    d = np.diff(v)
    return float(np.where(d >= 0, d, v[1:]).sum())


def counter_increase(samples: ServerSamples, family: str, start: float, end: float) -> tuple[float | None, float]:
    """Return a counter's increase over [start, end] (summed over its label sets) and the time it spans, s.

    None when no series of it was scraped twice around the window.
    """
    total, span, seen = 0.0, 0.0, False
    for k in _members(samples, family):
        t, v = samples.of(k)
        b = _bounding(t, start, end)
        if b is None or b[1] <= b[0]:
            continue
        total += _increase(v[b[0]:b[1] + 1])
        span = max(span, float(t[b[1]] - t[b[0]]))
        seen = True
    return (total if seen else None), span


def counter_over_time(samples: ServerSamples, family: str, start: float = -math.inf,
                      end: float = math.inf) -> tuple[np.ndarray, np.ndarray]:
    """Return a counter's cumulative increase since its first scrape, at each scrape time in [start, end]."""
    members = _members(samples, family)
    if not members:
        return np.zeros(0), np.zeros(0)
    times = np.unique(np.concatenate([samples.of(k)[0] for k in members]))
    total = np.zeros(times.size)
    for k in members:
        t, v = samples.of(k)
        steps = np.concatenate([[0.0], np.cumsum(np.where(np.diff(v) >= 0, np.diff(v), v[1:]))]) if v.size else v
        i = np.searchsorted(t, times, side="right") - 1
        total += np.where(i >= 0, steps[np.clip(i, 0, None)], 0.0)
    keep = (times >= start) & (times <= end)
    return times[keep], total[keep]


# --------------------------------------------------------------------------- histograms


@dataclass(frozen=True)
class WindowHistogram:
    """A histogram's observations inside a window: cumulative counts per upper bound, their sum and count."""

    bounds: np.ndarray  # upper bounds (le), sorted, +inf last
    cumulative: np.ndarray
    sum: float
    count: float

    def quantile(self, q: float) -> tuple[float | None, tuple[float | None, float | None]]:
        """Return the q-th percentile (Prometheus's interpolation) and the bucket [lower, upper] it fell in.

        In the +Inf bucket the estimate is the largest finite bound, the bucket's lower edge: a floor.

        >>> h = WindowHistogram(np.array([0.1, 0.5, np.inf]), np.array([2.0, 8.0, 10.0]), 3.0, 10.0)
        >>> h.quantile(50)
        (0.3, (0.1, 0.5))
        >>> h.quantile(95)
        (0.5, (0.5, None))
        """
        total = float(self.cumulative[-1]) if self.cumulative.size else 0.0
        if total <= 0:
            return None, (None, None)
        rank = q / 100 * total
        i = int(np.searchsorted(self.cumulative, rank, side="left"))
        i = min(i, self.bounds.size - 1)
        lower = float(self.bounds[i - 1]) if i > 0 else min(0.0, float(self.bounds[0]))
        upper = float(self.bounds[i])
        if math.isinf(upper):
            return (lower if i > 0 else None), ((lower if i > 0 else None), None)
        below = float(self.cumulative[i - 1]) if i > 0 else 0.0
        inside = float(self.cumulative[i]) - below
        frac = (rank - below) / inside if inside > 0 else 1.0
        return round(lower + (upper - lower) * frac, 12), (lower, upper)


def histogram_window(samples: ServerSamples, family: str, start: float, end: float) -> WindowHistogram | None:
    """Return a histogram's observations in [start, end], its label sets summed (buckets matched by ``le``)."""
    buckets: dict[float, float] = {}
    total_sum = total_count = 0.0
    seen = False
    for k in _members(samples, family):
        s = samples.series[k]
        t, v = samples.of(k)
        b = _bounding(t, start, end)
        if b is None or b[1] <= b[0]:
            continue
        inc = _increase(v[b[0]:b[1] + 1])
        if s.metric.endswith("_bucket"):
            le = s.label("le")
            try:
                bound = float(le) if le is not None else math.nan
            except ValueError:
                continue
            if not math.isnan(bound):
                buckets[bound] = buckets.get(bound, 0.0) + inc
                seen = True
        elif s.metric.endswith("_sum"):
            total_sum += inc
        elif s.metric.endswith("_count"):
            total_count += inc
    if not seen:
        return None
    bounds = np.array(sorted(buckets))
    cumulative = np.maximum.accumulate(np.array([buckets[b] for b in bounds]))
    if not math.isinf(bounds[-1]):
        bounds, cumulative = np.append(bounds, math.inf), np.append(cumulative, max(total_count, cumulative[-1]))
    return WindowHistogram(bounds, cumulative, total_sum, total_count or float(cumulative[-1]))


# --------------------------------------------------------------------------- evidence for the diagnosis


class ServerState(BaseModel):
    """What the diagnosis reads from the server's metrics over a window (None: the server does not publish it)."""

    model_config = ConfigDict(extra="forbid")
    scrapes: int = Field(description="Scrapes of the running or waiting count inside the window.")
    running_metric: str | None = None
    running_max: float | None = Field(None, description="The most requests running at once: the batch's ceiling "
                                                       "as observed (or the server's cap when known).")
    running_mean: float | None = None
    running_full_share: float | None = Field(
        None, description="Share of the scrapes with running at >= 90% of that ceiling: the batch is full.")
    waiting_metric: str | None = None
    waiting_share: float | None = Field(None, description="Share of the scrapes with at least one request waiting.")
    waiting_mean: float | None = None
    waiting_max: float | None = None
    full_while_waiting: float | None = Field(
        None, description="Of the scrapes with a request waiting, the share with the batch full.")
    kv_metric: str | None = None
    kv_usage_p95: float | None = Field(None, description="KV-cache use, p95 over the window's scrapes (1: full).")
    kv_usage_max: float | None = None
    preemptions_metric: str | None = None
    preemptions: float | None = Field(None, description="Preemptions (vLLM) or retractions (SGLang) in the window.")


FULL_BATCH = 0.9  # running at >= 90% of its ceiling counts as a full batch


def server_state(samples: ServerSamples, window_start: float, window_end: float,
                 max_running: int | None = None) -> ServerState | None:
    """Return the running, waiting, KV and preemption evidence over the window; None without running or waiting.

    ``max_running``: the server's cap on running requests, when known (vLLM's --max-num-seqs); else the
    ceiling is the most seen running at once.
    """
    present = {sig.role: sig.family for sig in reversed(_present(samples))}  # the table's first name wins
    run_f, wait_f = present.get("running"), present.get("waiting")
    if run_f is None and wait_f is None:
        return None
    out: dict[str, Any] = {"running_metric": run_f, "waiting_metric": wait_f}
    rt, rv = gauge_series(samples, run_f, window_start, window_end) if run_f else (np.zeros(0), np.zeros(0))
    wt, wv = gauge_series(samples, wait_f, window_start, window_end) if wait_f else (np.zeros(0), np.zeros(0))
    out["scrapes"] = int(max(rt.size, wt.size))
    full = None
    if rv.size:
        ceiling = float(max_running) if max_running is not None else float(rv.max())
        full = rv >= FULL_BATCH * ceiling if ceiling > 0 else np.zeros(rv.size, dtype=bool)
        out.update(running_max=ceiling, running_mean=float(rv.mean()), running_full_share=float(full.mean()))
    if wv.size:
        queued = wv >= 1
        out.update(waiting_share=float(queued.mean()), waiting_mean=float(wv.mean()), waiting_max=float(wv.max()))
        if full is not None and queued.any():
            i = np.searchsorted(rt, wt[queued])  # the running scrape at each queued instant (same scrape)
            ok = i < rt.size
            if ok.any():
                out["full_while_waiting"] = float(full[i[ok]].mean())
    kv_f = present.get("kv_usage")
    if kv_f is not None:
        _, kv = gauge_series(samples, kv_f, window_start, window_end)
        if kv.size:
            out.update(kv_metric=kv_f, kv_usage_p95=percentile(kv, 95), kv_usage_max=float(kv.max()))
    pre_f = present.get("preemptions")
    if pre_f is not None:
        inc, _ = counter_increase(samples, pre_f, window_start, window_end)
        out.update(preemptions_metric=_exposed(samples, pre_f), preemptions=inc)
    return ServerState(**out)


def _exposed(samples: ServerSamples, family: str) -> str:
    """Return the name a family's samples are exposed under (a counter's ``_total`` name), for quoting."""
    return next((samples.series[k].metric for k in _members(samples, family)), family)


# --------------------------------------------------------------------------- charts


@dataclass(frozen=True)
class ServerTimeline:
    """The server's signals over time for a chart: running, waiting, KV use and preemptions so far."""

    running: tuple[str, np.ndarray, np.ndarray] | None  # (metric, times s, values)
    waiting: tuple[str, np.ndarray, np.ndarray] | None
    kv_usage: tuple[str, np.ndarray, np.ndarray] | None
    preemptions: tuple[str, np.ndarray, np.ndarray] | None  # cumulative since the first scrape


def server_timeline(samples: ServerSamples, start: float = -math.inf, end: float = math.inf) -> ServerTimeline:
    """Return running, waiting, KV use and cumulative preemptions over [start, end] (None: not published)."""
    present = {sig.role: sig.family for sig in reversed(_present(samples))}

    def gauge(role: str) -> tuple[str, np.ndarray, np.ndarray] | None:
        fam = present.get(role)
        if fam is None:
            return None
        t, v = gauge_series(samples, fam, start, end)
        return (fam, t, v) if t.size else None

    pre = present.get("preemptions")
    pre_series = None
    if pre is not None:
        t, v = counter_over_time(samples, pre, start, end)
        pre_series = (_exposed(samples, pre), t, v) if t.size else None
    return ServerTimeline(gauge("running"), gauge("waiting"), gauge("kv_usage"), pre_series)


def attach(report: Any, samples: ServerSamples | None) -> Any:
    """Return ``report`` (a summary Report) with its ``server_metrics`` section over its window, when samples exist."""
    if samples is None or not len(samples):
        return report
    report.server_metrics = server_metrics_report(samples, report.window_start, report.window_end,
                                                  client_percentiles(report))
    return report
