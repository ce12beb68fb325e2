"""Scrape a server's Prometheus ``/metrics`` through a load run, on a thread of its own.

vLLM, SGLang, TGI and TensorRT-LLM publish their queue, batch, KV-cache use and preemptions on
``/metrics``; a load run keeps every sample (known names or not) so the report and the diagnosis can
say what limited the server from its own evidence (:mod:`servebench.analysis.server_metrics`).

The scraper never touches the load generator's event loop: a daemon thread with its own HTTP client
scrapes every ``interval_s`` (once before the first request, then on a fixed grid, and once more
when the run ends), parses the text with ``prometheus_client``'s parser and keeps the samples
(:class:`~servebench.records.server_samples.SampleLog`). A sample's time is the middle of its
scrape's round trip on ``time.monotonic``, the load generator's clock; the caller moves it to the
run's origin. A scrape that fails (refused, timed out, an HTTP error, a page that is not Prometheus
text, a page over :data:`MAX_PAGE_BYTES`) is counted with its cause and the scraping goes on: it is
never fatal to the run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field

from servebench.errors import ConfigError
from servebench.load.client import normalize_url
from servebench.records.rundir import SERVER_METRICS
from servebench.records.server_samples import SampleLog, ServerSamples, Series, labels_key

DEFAULT_INTERVAL_S = 0.5  # AIPerf scrapes every 333 ms; half a second resolves a queue that builds in seconds
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 60.0
MAX_PAGE_BYTES = 16 * 2**20  # a page above this is refused (a vLLM page is tens of kB)
MAX_SAMPLES = 10_000_000  # about 240 MB kept; past it scraping stops and says so
PROBE_TIMEOUT_S = 2.0
TRTLLM_PATH = "/prometheus/metrics"  # trtllm-serve answers /metrics with JSON and serves Prometheus here


class ScrapeFailed(Exception):
    """One scrape could not be read as Prometheus text (the message says why)."""


class EndpointStats(BaseModel):
    """What scraping one URL gave: scrapes answered and failed, the first and last failure's cause."""

    url: str
    scrapes: int = Field(0, description="Scrapes read and parsed.")
    failed: int = Field(0, description="Scrapes that failed (counted, never fatal).")
    samples: int = Field(0, description="Samples kept from this URL.")
    first_error: str | None = None
    last_error: str | None = None


class ScrapeReport(BaseModel):
    """How a run's server metrics were gathered (metadata.json's ``server_metrics``)."""

    file: str | None = Field(description="The samples' file in the run folder; None when none was kept.")
    interval_s: float
    endpoints: list[EndpointStats]
    samples: int
    stopped_early: str | None = Field(None, description="Why scraping stopped before the run ended, if it did.")
    clock: str = ("t_s: seconds on the load generator's clock since the run's origin t0 (a record's start is on "
                  "it); each sample at the middle of its scrape's round trip")
    note: str | None = Field(None, description="Why no metrics were scraped (nothing found at URL/metrics), if so.")

    def warnings(self) -> list[str]:
        """Return one line per endpoint whose scrapes failed, and a stop or a missing endpoint."""
        out = [f"server metrics: {e.failed} of {e.failed + e.scrapes} scrapes of {e.url} failed (first: "
               f"{e.first_error}); the run went on" for e in self.endpoints if e.failed]
        if self.stopped_early:
            out.append(f"server metrics: {self.stopped_early}")
        return out


def metrics_url(url: str) -> str:
    """Return the URL to scrape for ``url``: its ``/metrics`` when it names no path, else the URL as given.

    >>> metrics_url("http://127.0.0.1:8000/v1"), metrics_url("http://h:8002/metrics")
    ('http://127.0.0.1:8000/metrics', 'http://h:8002/metrics')
    >>> metrics_url("http://h:9400/custom/path")
    'http://h:9400/custom/path'
    """
    base = url.strip()
    if not base.startswith(("http://", "https://")) or not urlsplit(base).netloc:
        raise ConfigError(f"--server-metrics {url!r}: expected an http:// or https:// URL")
    path = urlsplit(base).path.rstrip("/")
    return normalize_url(base) + "/metrics" if path in ("", "/v1") else base


def parse_page(text: str, endpoint: str) -> list[tuple[Series, float]]:
    """Return every sample of a Prometheus text page as (series, value); raise ScrapeFailed if it is not one.

    Parsed by ``prometheus_client.parser``; a family without a TYPE line is ``unknown`` and kept.

    >>> page = '# TYPE vllm:num_preemptions counter\\nvllm:num_preemptions_total{engine="0"} 3.0\\n'
    >>> [(s.metric, s.family, s.type, s.labels, v) for s, v in parse_page(page, "u")]
    [('vllm:num_preemptions_total', 'vllm:num_preemptions', 'counter', (('engine', '0'),), 3.0)]
    """
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                out.append((Series(endpoint, s.name, family.name, family.type, labels_key(s.labels)), float(s.value)))
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # the parser's ways of refusing a line
        raise ScrapeFailed(f"not Prometheus text ({str(exc)[:120]})") from None
    return out


def fetch_page(client: httpx.Client, url: str) -> str:
    """GET one page; raise ScrapeFailed with the cause (HTTP status, JSON, too large, unreadable)."""
    try:
        with client.stream("GET", url) as resp:
            if resp.status_code != 200:
                raise ScrapeFailed(f"HTTP {resp.status_code}")
            if "json" in resp.headers.get("content-type", ""):
                raise ScrapeFailed("the server answered JSON, not Prometheus text")
            chunks, size = [], 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > MAX_PAGE_BYTES:
                    raise ScrapeFailed(f"the page is over {MAX_PAGE_BYTES // 2**20} MiB")
                chunks.append(chunk)
    except httpx.HTTPError as exc:
        raise ScrapeFailed(f"{type(exc).__name__}: {str(exc)[:120] or 'no answer'}") from None
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError:
        raise ScrapeFailed("the page is not UTF-8 text") from None


def discover(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str | None, str]:
    """Return the metrics URL a server at ``base_url`` answers (or None) and what the probe found.

    ``base_url/metrics`` first; when that answers JSON (trtllm-serve's iteration stats), its
    ``/prometheus/metrics``. Anything else (404, refused, not Prometheus text) means no metrics.
    """
    first = metrics_url(normalize_url(base_url))
    tried = []
    with _http(timeout_s) as client:
        for url in (first, normalize_url(base_url) + TRTLLM_PATH):
            try:
                parse_page(fetch_page(client, url), url)
                return url, f"found {url}"
            except ScrapeFailed as exc:
                tried.append(f"{url}: {exc}")
                if "JSON" not in str(exc):
                    break
    return None, "no Prometheus metrics found (" + "; ".join(tried) + ")"


def _http(timeout_s: float) -> httpx.Client:
    return httpx.Client(timeout=httpx.Timeout(timeout_s), trust_env=False, follow_redirects=False)


@dataclass
class Scraped:
    """What a scraper gathered: samples on its clock, and each endpoint's counts."""

    samples: ServerSamples
    endpoints: list[EndpointStats]
    interval_s: float
    stopped_early: str | None

    def report(self, file: str | None) -> ScrapeReport:
        """Return the run metadata's account of the scraping (``file``: where the samples were written)."""
        return ScrapeReport(file=file, interval_s=self.interval_s, endpoints=self.endpoints,
                            samples=len(self.samples), stopped_early=self.stopped_early)


class MetricsScraper:
    """Scrape ``urls`` every ``interval_s`` on a daemon thread, from :meth:`start` until :meth:`stop`."""

    def __init__(self, urls: Sequence[str], interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic, timeout_s: float | None = None,
                 max_samples: int = MAX_SAMPLES) -> None:
        if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
            raise ConfigError(f"--metrics-interval-s {interval_s:g}: must be between {MIN_INTERVAL_S:g} and "
                              f"{MAX_INTERVAL_S:g} s")
        self.urls = list(dict.fromkeys(urls))
        self.interval_s = interval_s
        self.clock = clock
        self.timeout_s = timeout_s if timeout_s is not None else max(1.0, 2 * interval_s)
        self.max_samples = max_samples
        self.log = SampleLog()
        self.stats = {u: EndpointStats(url=u) for u in self.urls}
        self.stopped_early: str | None = None
        self._stop = threading.Event()
        self._first = threading.Event()
        self._thread = threading.Thread(target=self._run, name="servebench-metrics-scraper", daemon=True)

    def start(self) -> "MetricsScraper":
        """Scrape once (the baseline before the first request: this waits for it), then keep scraping on the thread."""
        self._thread.start()
        self._first.wait(timeout=self.timeout_s * max(1, len(self.urls)) + 1.0)
        return self

    def stop(self) -> Scraped:
        """Scrape once more (the state at the run's end), stop, and return what was gathered."""
        self._stop.set()
        self._thread.join(timeout=self.timeout_s * max(1, len(self.urls)) + 5.0)
        if self._thread.is_alive():
            self.stopped_early = self.stopped_early or "the last scrape did not finish; its samples are not kept"
        return Scraped(self.log.samples(), [self.stats[u] for u in self.urls], self.interval_s, self.stopped_early)

    def scrape_once(self, client: httpx.Client) -> None:
        """Scrape every URL once, keeping its samples or counting its failure."""
        for url in self.urls:
            if len(self.log) >= self.max_samples:
                self.stopped_early = (f"stopped after {len(self.log):,} samples (the bound on what one run keeps); "
                                      "raise --metrics-interval-s for a run this long")
                return
            st = self.stats[url]
            sent = self.clock()
            try:
                samples = parse_page(fetch_page(client, url), url)
            except ScrapeFailed as exc:
                st.failed += 1
                st.first_error = st.first_error or str(exc)
                st.last_error = str(exc)
                continue
            t = (sent + self.clock()) / 2
            for series, value in samples:
                self.log.add(t, series, value)
            st.scrapes += 1
            st.samples += len(samples)

    def _run(self) -> None:
        try:
            self._scrape_until_stopped()
        except Exception as exc:  # never fatal to the run: say so and keep what was gathered
            self.stopped_early = f"scraping stopped: {type(exc).__name__}: {str(exc)[:120]}"
        finally:
            self._first.set()

    def _scrape_until_stopped(self) -> None:
        with _http(self.timeout_s) as client:
            next_at = self.clock()
            while True:
                self.scrape_once(client)
                self._first.set()
                if self._stop.is_set() or self.stopped_early:
                    return
                next_at += self.interval_s
                now = self.clock()
                if next_at < now:  # fell behind (a slow scrape): keep the grid, skip the missed points
                    next_at += ((now - next_at) // self.interval_s + 1) * self.interval_s
                if self._stop.wait(next_at - now):
                    self.scrape_once(client)  # the state at the run's end
                    return


def start_scraping(server_url: str, explicit: Sequence[str] | None, enabled: bool,
                   interval_s: float) -> tuple[MetricsScraper | None, str | None]:
    """Start scraping for a run against ``server_url``; return the scraper (None: nothing to scrape) and a note.

    ``explicit`` URLs are scraped as given (their failures are counted); without them the server's
    own ``/metrics`` is probed and scraped when it answers Prometheus text.
    """
    if not enabled:
        return None, "server metrics off (--no-server-metrics)"
    if explicit:
        urls = [metrics_url(u) for u in explicit]
        note = None
    else:
        found, note = discover(server_url)
        if found is None:
            return None, note
        urls = [found]
    return MetricsScraper(urls, interval_s).start(), note


def split_urls(values: Sequence[str] | None) -> list[str]:
    """Return the URLs of repeated or comma-separated ``--server-metrics`` values, in order, once each.

    >>> split_urls(["http://a:1/metrics,http://b:2", "http://a:1/metrics"])
    ['http://a:1/metrics', 'http://b:2']
    """
    out = [u.strip() for v in values or () for u in v.split(",") if u.strip()]
    return list(dict.fromkeys(out))


class MetricsOptions(BaseModel):
    """What ``servebench load`` scrapes: explicit URLs (else the server's /metrics, if any), whether, how often."""

    urls: list[str] = Field(default_factory=list)
    enabled: bool = True
    interval_s: float = Field(DEFAULT_INTERVAL_S, ge=MIN_INTERVAL_S, le=MAX_INTERVAL_S)


class RunScrape:
    """One run's scraping: started before its first request, finished after its last (samples on its clock)."""

    def __init__(self, server_url: str, options: MetricsOptions | None) -> None:
        opts = options or MetricsOptions(enabled=False)
        self.interval_s = opts.interval_s
        self.started_at = time.monotonic()
        self.scraper, self.note = start_scraping(server_url, opts.urls, opts.enabled, opts.interval_s)
        self._done: tuple[ServerSamples | None, ScrapeReport] | None = None

    def finish(self, t0_monotonic_s: float | None) -> tuple[ServerSamples | None, ScrapeReport]:
        """Stop scraping; return the samples moved onto the run's clock (t0: its origin) and their account.

        Idempotent: a second call returns the first's answer.
        """
        if self._done is None:
            if self.scraper is None:
                self._done = None, ScrapeReport(file=None, interval_s=self.interval_s, endpoints=[], samples=0,
                                                note=self.note)
            else:
                scraped = self.scraper.stop()
                origin = t0_monotonic_s if t0_monotonic_s is not None else self.started_at
                samples = scraped.samples.shifted(-origin)
                report = scraped.report(SERVER_METRICS if len(samples) else None)
                self._done = (samples if len(samples) else None), report
        return self._done
