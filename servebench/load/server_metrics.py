"""Scrape a server's Prometheus ``/metrics`` through a load run, in a process of its own.

vLLM, SGLang, TGI and TensorRT-LLM publish their queue, batch, KV-cache use and preemptions on
``/metrics``; a load run keeps every sample (known names or not) so the report and the diagnosis can
say what limited the server from its own evidence (:mod:`servebench.analysis.server_metrics`).

The scraper never touches the load generator: a process of its own (:class:`MetricsScraper`) with
its own HTTP client scrapes every ``interval_s`` (once before the first request, then on a fixed
grid, and once more when the run ends), parses the text with ``prometheus_client``'s parser and
keeps the samples (:mod:`servebench.load.scrape_process`). A sample's time is the middle of its
scrape's round trip, moved onto the load generator's ``time.monotonic``; the caller moves it to the
run's origin. A scrape that fails (refused, timed out, an HTTP error, a page that is not Prometheus
text, a page over 16 MiB) is counted with its cause and the scraping goes on: it is never fatal to
the run.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

from servebench.errors import ConfigError
from servebench.load.client import normalize_url
from servebench.load.scrape_process import Pages, ScrapeFailed, parse_page, scrape_process
from servebench.records.rundir import SERVER_METRICS
from servebench.records.server_samples import ServerSamples

DEFAULT_INTERVAL_S = 0.5  # AIPerf scrapes every 333 ms; half a second resolves a queue that builds in seconds
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 60.0
MAX_SAMPLES = 10_000_000  # about 240 MB kept; past it scraping stops and says so
PROBE_TIMEOUT_S = 2.0
TRTLLM_PATH = "/prometheus/metrics"  # trtllm-serve answers /metrics with JSON and serves Prometheus here


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


def discover(base_url: str, timeout_s: float = PROBE_TIMEOUT_S) -> tuple[str | None, str]:
    """Return the metrics URL a server at ``base_url`` answers (or None) and what the probe found.

    ``base_url/metrics`` first; when that answers JSON (trtllm-serve's iteration stats), its
    ``/prometheus/metrics``. Anything else (404, refused, not Prometheus text) means no metrics.
    """
    first = metrics_url(normalize_url(base_url))
    tried = []
    pages = Pages(timeout_s)
    try:
        for url in (first, normalize_url(base_url) + TRTLLM_PATH):
            try:
                parse_page(pages.get(url), url)
                return url, f"found {url}"
            except ScrapeFailed as exc:
                tried.append(f"{url}: {exc}")
                if "JSON" not in str(exc):
                    break
    finally:
        pages.close()
    return None, "no Prometheus metrics found (" + "; ".join(tried) + ")"


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
    """Scrape ``urls`` every ``interval_s`` in a process of its own, from :meth:`start` until :meth:`stop`.

    A process, not a thread: parsing a page holds a Python thread's interpreter lock for milliseconds
    (a 600-sample vLLM page), and a thread beside the load generator's event loop measurably delayed
    its sends (p99 schedule lag 6 ms without scraping, 13 to 26 ms with a thread scraping every 0.5 s,
    at 50 req/s on a loaded 2-core machine). The process runs at a lower priority (``nice`` +5) and
    ignores Ctrl-C and SIGTERM: the caller stops it. Its clock is measured against the caller's
    before the run, as the load workers' are (:func:`servebench.load.workers.clock_offset`), and each
    sample's time is moved onto the caller's ``time.monotonic``.
    """

    def __init__(self, urls: Sequence[str], interval_s: float = DEFAULT_INTERVAL_S,
                 timeout_s: float | None = None, max_samples: int = MAX_SAMPLES) -> None:
        if not MIN_INTERVAL_S <= interval_s <= MAX_INTERVAL_S:
            raise ConfigError(f"--metrics-interval-s {interval_s:g}: must be between {MIN_INTERVAL_S:g} and "
                              f"{MAX_INTERVAL_S:g} s")
        self.urls = list(dict.fromkeys(urls))
        self.interval_s = interval_s
        self.timeout_s = timeout_s if timeout_s is not None else max(1.0, 2 * interval_s)
        self.max_samples = max_samples
        self._conn: Connection | None = None
        self._process: Any = None
        self._offset_s = 0.0
        self._done: Scraped | None = None

    def start(self) -> "MetricsScraper":
        """Start the process; return once it has scraped once (the baseline before the first request)."""
        from servebench.load.workers import clock_offset

        ctx = mp.get_context("spawn")  # never fork a process that may run threads (a server in a test, Ray)
        parent, child = ctx.Pipe()
        self._conn = parent
        self._process = ctx.Process(target=scrape_process, daemon=True, name="servebench-metrics-scraper",
                                    args=(child, self.urls, self.interval_s, self.timeout_s, self.max_samples))
        self._process.start()
        child.close()
        patience = 30.0 + self.timeout_s * max(1, len(self.urls))  # the interpreter's start, then one scrape
        if not parent.poll(patience):
            self._process.terminate()
            raise ScrapeFailed(f"the scraper process did not start within {patience:g} s")
        parent.recv()  # ready: the first scrape is done

        def ping() -> float:
            parent.send("clock")
            return float(parent.recv())
        self._offset_s = clock_offset(ping).offset_s
        parent.send("go")
        return self

    def stop(self) -> Scraped:
        """Scrape once more (the state at the run's end), stop, and return what was gathered on our clock."""
        if self._done is not None:
            return self._done
        assert self._conn is not None, "start() first"
        stopped_early = None
        got: tuple[Any, ...] | None = None
        try:
            self._conn.send("stop")
            if self._conn.poll(self.timeout_s * max(1, len(self.urls)) + 10.0):
                got = self._conn.recv()
        except (OSError, EOFError):
            got = None
        if got is None:
            stopped_early = "the scraper process did not answer at the end of the run; its samples are lost"
            self._process.terminate()
            samples, stats, early = ServerSamples(), [EndpointStats(url=u) for u in self.urls], None
        else:
            samples, counts, early = got
            stats = [EndpointStats(**c) for c in counts]
        self._process.join(timeout=5.0)
        self._conn.close()
        self._done = Scraped(samples.shifted(self._offset_s), stats, self.interval_s, stopped_early or early)
        return self._done


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
    try:
        return MetricsScraper(urls, interval_s).start(), note
    except ScrapeFailed as exc:  # never fatal to the run
        return None, f"server metrics not scraped: {exc}"


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
