"""How Summary splits its wide tables so each fits a 1,400 px page: data in, frames out (no Streamlit)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from servebench.analysis.summary import Distribution
from servebench.output.figures.summary import distribution_frame

RATE_SUFFIXES = ("_per_second", "_s", "_ms")  # a slice column that is a rate or a time


def distribution_tables(rows: Mapping[str, Distribution | None], scale: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Return each metric's percentiles with their intervals, and apart, its max and mean (times x ``scale``).

    One table of both was wider than the page at 1,400 px (eight columns, four of them 'value [low, high]').
    """
    frame = distribution_frame(rows, scale).rename(columns={"metric": "Metric", "max": "Max", "mean": "Mean"})
    return frame.drop(columns=["Max", "Mean"]), frame[["Metric", "Max", "Mean"]]


def slice_tables(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split the slices' table in two that each fit the page: counts and shares; rates and p95 times.

    >>> counts, rates = slice_tables(pd.DataFrame({"slice": ["a"], "requests": [3], "p95_ttft_ms": [1.0],
    ...                                            "goodput_requests_per_second": [0.5]}))
    >>> list(counts.columns), list(rates.columns)
    (['slice', 'requests'], ['slice', 'p95_ttft_ms', 'goodput_requests_per_second'])
    """
    rates = [k for k in frame.columns if k.endswith(RATE_SUFFIXES)]
    return frame.drop(columns=rates), frame[["slice", *rates]]
