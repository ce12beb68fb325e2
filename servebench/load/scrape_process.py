"""The scraper's own process: fetch Prometheus pages, parse them, keep the samples (what runs away from the load).

Light on purpose: the standard library's HTTP client, ``prometheus_client``'s parser and the sample
log, so a fresh interpreter starts it quickly. :class:`servebench.load.server_metrics.MetricsScraper`
starts :func:`scrape_process` and talks to it over a pipe.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import time
from multiprocessing.connection import Connection
from typing import Any
from urllib.parse import urlsplit

from servebench.records.server_samples import SampleLog, Series, labels_key

MAX_PAGE_BYTES = 16 * 2**20  # a page above this is refused (a vLLM page is tens of kB)


class ScrapeFailed(Exception):
    """One scrape could not be read as Prometheus text (the message says why)."""


def parse_page(text: str, endpoint: str) -> list[tuple[Series, float]]:
    """Return every sample of a Prometheus text page as (series, value); raise ScrapeFailed if it is not one.

    Parsed by ``prometheus_client.parser``; a family without a TYPE line is ``unknown`` and kept.

    >>> page = '# TYPE vllm:num_preemptions_total counter\\nvllm:num_preemptions_total{engine="0"} 3.0\\n'
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


class Pages:
    """GET pages over one kept-alive connection per host; every failure is a ScrapeFailed with its cause."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self._conns: dict[tuple[str, str], http.client.HTTPConnection] = {}

    def get(self, url: str) -> str:
        """Return the page at ``url``: HTTP 200, not JSON, at most :data:`MAX_PAGE_BYTES`, UTF-8."""
        parts = urlsplit(url)
        key = (parts.scheme, parts.netloc)
        conn = self._conns.get(key)
        if conn is None:
            kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
            conn = self._conns[key] = kind(parts.netloc, timeout=self.timeout_s)
        try:
            conn.request("GET", (parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
                         headers={"Accept": "text/plain"})
            resp = conn.getresponse()
            body = resp.read(MAX_PAGE_BYTES + 1)
            if len(body) > MAX_PAGE_BYTES:
                self._drop(key)  # the rest of a page too large is never read: this connection is done
                raise ScrapeFailed(f"the page is over {MAX_PAGE_BYTES // 2**20} MiB")
            if resp.status != 200:
                raise ScrapeFailed(f"HTTP {resp.status}")
            if "json" in (resp.getheader("content-type") or ""):
                raise ScrapeFailed("the server answered JSON, not Prometheus text")
        except (OSError, http.client.HTTPException) as exc:
            self._drop(key)
            raise ScrapeFailed(f"{type(exc).__name__}: {str(exc)[:120] or 'no answer'}") from None
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            raise ScrapeFailed("the page is not UTF-8 text") from None

    def _drop(self, key: tuple[str, str]) -> None:
        conn = self._conns.pop(key, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        """Close every connection."""
        for key in list(self._conns):
            self._drop(key)


def new_stats(url: str) -> dict[str, Any]:
    """Return one URL's counts as the parent's EndpointStats fields."""
    return {"url": url, "scrapes": 0, "failed": 0, "samples": 0, "first_error": None, "last_error": None}


class Gatherer:
    """The samples kept and each URL's counts; one :meth:`scrape` reads every URL once."""

    def __init__(self, urls: list[str], max_samples: int, pages: Pages) -> None:
        self.urls = urls
        self.max_samples = max_samples
        self.pages = pages
        self.log = SampleLog()
        self.stats = {u: new_stats(u) for u in urls}
        self.stopped_early: str | None = None

    def scrape(self) -> None:
        """Scrape every URL once, keeping its samples or counting its failure; stop at ``max_samples``."""
        for url in self.urls:
            if len(self.log) >= self.max_samples:
                self.stopped_early = (f"stopped after {len(self.log):,} samples (the bound on what one run keeps); "
                                      "raise --metrics-interval-s for a run this long")
                return
            st = self.stats[url]
            sent = time.monotonic()
            try:
                samples = parse_page(self.pages.get(url), url)
            except ScrapeFailed as exc:
                st["failed"] += 1
                st["first_error"] = st["first_error"] or str(exc)
                st["last_error"] = str(exc)
                continue
            t = (sent + time.monotonic()) / 2
            for series, value in samples:
                self.log.add(t, series, value)
            st["scrapes"] += 1
            st["samples"] += len(samples)


def scrape_process(conn: Connection, urls: list[str], interval_s: float, timeout_s: float, max_samples: int) -> None:
    """Scrape once, say ready, answer clock pings until 'go', then scrape every ``interval_s`` until 'stop'.

    At 'stop' it scrapes once more (the state at the run's end) and sends back the samples, each URL's
    counts and why it stopped early (if it did). A closed pipe (the caller is gone) ends it silently.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C and SIGTERM are the caller's: it stops us
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        os.nice(5)  # behind the load generator for the CPU
    pages = Pages(timeout_s)
    gatherer = Gatherer(urls, max_samples, pages)
    try:
        gatherer.scrape()
        conn.send("ready")
        while (msg := conn.recv()) == "clock":  # the caller measures our clock, then says go
            conn.send(time.monotonic())
        next_at = time.monotonic()
        while msg != "stop":
            next_at += interval_s
            now = time.monotonic()
            if next_at < now:  # fell behind (a slow scrape): keep the grid, skip the missed points
                next_at += ((now - next_at) // interval_s + 1) * interval_s
            if conn.poll(next_at - now):
                msg = conn.recv()
                continue
            if gatherer.stopped_early is None:
                gatherer.scrape()
        gatherer.scrape()
        conn.send((gatherer.log.samples(), list(gatherer.stats.values()), gatherer.stopped_early))
    except (EOFError, BrokenPipeError):  # the caller is gone
        return
    finally:
        pages.close()
