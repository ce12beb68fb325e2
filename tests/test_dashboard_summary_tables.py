"""servebench.dashboard.summary_tables: Summary's wide tables split in two, every row and value kept."""

from __future__ import annotations

import numpy as np

from servebench.analysis.summary import build_report
from servebench.dashboard.summary_tables import distribution_tables, slice_tables
from servebench.formatting import fmt
from servebench.output.figures.summary import slice_frame
from servebench.records.loaders import read_bytes, to_table


def _report():
    rng = np.random.default_rng(7)
    rows = ["start,first_token,end,status,output_tokens,slice"]
    for i in range(40):
        ttft = rng.uniform(0.1, 0.5)
        rows.append(f"{i},{i + ttft},{i + ttft + 1},success,10,{'chat' if i % 2 else 'batch'}")
    table, ws, we = to_table(read_bytes("\n".join(rows).encode(), "r.csv"))
    return build_report(table, ws, we)


def test_the_percentiles_and_the_extremes_share_their_rows_and_scale() -> None:
    report = _report()
    percentiles, extremes = distribution_tables({"TTFT (ms)": report.ttft_s, "none": None}, 1000.0)
    assert list(percentiles["Metric"]) == list(extremes["Metric"]) == ["TTFT (ms)"]  # a None row is left out
    assert "Max" not in percentiles.columns and list(extremes.columns) == ["Metric", "Max", "Mean"]
    assert extremes["Max"].iloc[0] == fmt(report.ttft_s.max * 1000)


def test_the_slices_split_into_counts_and_rates_with_every_column_once() -> None:
    frame = slice_frame(_report(), "ms")
    counts, rates = slice_tables(frame)
    assert list(counts["slice"]) == list(rates["slice"]) == list(frame["slice"])
    assert sorted(set(counts.columns) | set(rates.columns)) == sorted(frame.columns)
    assert set(counts.columns) & set(rates.columns) == {"slice"}
    assert all(c.endswith(("_per_second", "_s", "_ms")) for c in rates.columns if c != "slice")
