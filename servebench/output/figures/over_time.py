"""Throughput, TTFT and latency over time, in equal bins of the window: data in, data out."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servebench.analysis.contract import success_metrics
from servebench.analysis.percentiles import percentile
from servebench.records.table import RecordTable

OVER_TIME_BINS = 60
OVER_TIME_MARKS: tuple[int, ...] = (50, 95)
OVER_TIME_METRICS: tuple[str, ...] = ("ttft", "latency")


@dataclass(frozen=True)
class OverTimeBins:
    """Successes per second, and percentiles of TTFT and latency, of the successes that end in each bin."""

    width_s: float
    mids_s: np.ndarray  # each bin's middle, in seconds since the window start
    successes_per_s: np.ndarray
    percentiles_s: dict[str, dict[int, list[float | None]]]  # metric -> q -> value per bin (None: no success ended)


def over_time_bins(table: RecordTable, window_start: float, window_end: float,
                   bins: int = OVER_TIME_BINS) -> OverTimeBins:
    """Return throughput, TTFT and latency in ``bins`` equal bins of the window, by when each success ended.

    A bin's percentiles are nearest-rank over the successes that end in it, so warm-up, drift and bursts show.
    A success ending at the window's end counts in the last bin.
    """
    edges = np.linspace(window_start, window_end, bins + 1)
    width = float(edges[1] - edges[0])
    which = np.clip(np.searchsorted(edges, table.end[table.is_success], side="right") - 1, 0, bins - 1)
    order = np.argsort(which, kind="stable")
    splits = np.searchsorted(which[order], np.arange(1, bins))
    metrics = success_metrics(table)
    marked = {}
    for key in OVER_TIME_METRICS:
        groups = np.split(metrics[key][order], splits)
        marked[key] = {q: [percentile(g, q) for g in groups] for q in OVER_TIME_MARKS}
    return OverTimeBins(width, (edges[:-1] + edges[1:]) / 2 - window_start,
                        np.bincount(which, minlength=bins) / width, marked)
