"""Charts of counts tick in whole numbers (issue 36: a histogram of three records showed 0.5 and 1.5 records)."""

from __future__ import annotations

import numpy as np
from vega_charts import valid

from servebench.output.figures import vegalite, vegalite_tokens
from servebench.output.figures.tokens import StallBins


def _count_axis(encoding: dict) -> dict:
    return encoding.get("axis", {})


def test_the_percentile_histogram_counts_records_in_whole_numbers() -> None:
    spec = valid(vegalite.percentile_histogram(np.array([1.0, 2.0, 2.5, np.inf]), 95, 2.5, "Latency (s)"))
    y = spec["layer"][0]["encoding"]["y"]
    assert y["title"] == "records" and _count_axis(y)["tickMinStep"] == 1 and _count_axis(y)["format"] == ",d"


def test_the_stall_histogram_and_the_cause_bars_count_in_whole_numbers() -> None:
    bins = StallBins(edges_s=np.array([0.0, 0.1, 0.2]), counts=np.array([2, 1]), n=3, threshold_s=0.15, over=1)
    y = valid(vegalite_tokens.stall_chart(bins))["layer"][0]["encoding"]["y"]
    assert _count_axis(y)["tickMinStep"] == 1
    x = valid(vegalite.cause_chart({"timeout": 2, "rejected": 1}))["encoding"]["x"]
    assert _count_axis(x)["tickMinStep"] == 1 and _count_axis(x)["format"] == ",d"


def test_the_stall_histogram_reads_in_the_unit_asked_and_a_cdf_keeps_room_for_its_last_mark() -> None:
    bins = StallBins(edges_s=np.array([0.0, 0.1, 0.2]), counts=np.array([2, 1]), n=3, threshold_s=0.15, over=1)
    spec = valid(vegalite_tokens.stall_chart(bins, "ms"))
    assert spec["datasets"]["bins"] == [{"lo": 0.0, "hi": 100.0, "requests": 2},
                                        {"lo": 100.0, "hi": 200.0, "requests": 1}]
    assert spec["layer"][0]["encoding"]["x"]["title"] == "longest gap between tokens, ms"
    assert spec["layer"][1]["data"]["values"][0]["lo"] == 150.0
    from servebench.output.figures.records import record_series
    from servebench.records.schema import parse_objects
    from servebench.records.table import validate

    table = validate(parse_objects([{"start": 0.0, "first_token": 0.1 * i, "end": 1.0, "status": "success",
                                     "output_tokens": 4} for i in range(1, 6)]), 0, 1)
    x = vegalite.cdf_chart(record_series(table)["ttft"], "ms")["layer"][0]["encoding"]["x"]
    assert x["scale"]["padding"] >= 6  # the p99 diamond sits at the largest TTFT: the plot's right edge
