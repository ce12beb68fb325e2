"""servebench.dashboard.overview_svg: Summary's overview pictures, drawn from the same numbers as the report."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servebench.dashboard.overview_svg import cdf_picture, nice_ticks, outcome_picture, over_time_picture
from servebench.output.figures.over_time import over_time_bins
from servebench.output.figures.records import record_series
from servebench.records.loaders import read_bytes, to_table


@given(st.floats(0, 1e6), st.floats(1e-3, 1e6))
def test_ticks_are_round_evenly_spaced_and_inside_the_range(low, width) -> None:
    ticks = nice_ticks(low, low + width)
    assert 1 <= len(ticks) <= 6
    assert all(low - 1e-9 * (1 + abs(low)) <= t <= low + width + 1e-9 * (1 + abs(low + width)) for t in ticks)
    steps = np.diff(ticks)
    if steps.size:
        assert np.allclose(steps, steps[0])
        mantissa = steps[0] / 10 ** math.floor(math.log10(steps[0]))
        assert min(abs(mantissa - m) for m in (1, 2, 5, 10)) < 1e-6


def _table():
    data = (b"start,first_token,end,status,output_tokens\n0,0.5,1.5,success,10\n1,1.25,3.5,success,10\n"
            b"2,,3,timeout,\n6,6.5,7.5,success,10\n")
    return to_table(read_bytes(data, "r.csv"))


def test_the_outcome_bar_splits_every_request_by_status() -> None:
    svg = outcome_picture({"success": 3, "timeout": 1, "rejected": 0}, {"success": "Completed", "timeout": "Timed out"})
    assert re.findall(r"<title>([^<]+)</title>", svg) == ["Completed: 3", "Timed out: 1"]  # no empty part
    widths = [float(w) for w in re.findall(r'y="40" width="([\d.]+)"', svg)]
    assert widths[0] == pytest.approx(3 * widths[1], rel=1e-3)


def test_p95_over_time_breaks_where_no_success_ended_and_follows_the_unit() -> None:
    table, ws, we = _table()
    bins = over_time_bins(table, ws, we, bins=4)  # 1.875 s each: successes end in bins 0, 1 and 3
    svg = over_time_picture(bins, "ms")
    assert "p95 over time (ms)" in svg and "4 bins of 1.88 s, by end" in svg
    assert svg.count("<polyline") == 4  # latency and TTFT, each broken by the empty bin 2
    assert ">2,000<" in svg  # a tick of the latency axis (the slowest success, 2.5 s)


def test_the_cdfs_say_how_many_successes_they_count() -> None:
    table, _, _ = _table()
    svg = cdf_picture(record_series(table, max_points=300), "s")
    assert "n = 3 successes" in svg and "seconds" in svg and ">100%<" in svg
    assert svg.count("<polyline") == 2
