"""The dashboard's Vega-Lite charts: valid Vega-Lite, the same numbers as the report's tables, in the unit asked.

Token timing's charts are tested beside the site's figures they share their numbers with (test_token_times.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from vega_charts import valid as _valid

from servebench.analysis.percentiles import percentile
from servebench.formatting import fmt
from servebench.output.figures import records as rf
from servebench.output.figures import vegalite
from servebench.records.schema import parse_objects
from servebench.records.table import validate

pytest.importorskip("altair")  # ships with Streamlit; its Vega-Lite schema checks the specs (vega_charts.valid)


@pytest.fixture
def admitted_table():
    rows = [{"start": 0.0, "admitted": 0.5, "first_token": 1.0, "end": 2.0, "status": "success", "output_tokens": 5,
             "slice": "<b>chat</b>"},
            {"start": 0.5, "admitted": 1.0, "first_token": 1.2, "end": 3.0, "status": "success", "output_tokens": 3,
             "slice": "batch"},
            {"start": 1.0, "end": 2.5, "status": "timeout"}]
    return validate(parse_objects(rows), 0, 3)


def test_timeline_has_active_in_service_and_waiting(admitted_table) -> None:
    spec = vegalite.timeline_chart(rf.timeline_series(admitted_table, 0, 3))
    _valid(spec)
    frame = spec["datasets"]["timeline"]
    assert list(frame["series"].unique()) == [rf.TIMELINE_ACTIVE, rf.TIMELINE_IN_SERVICE, rf.TIMELINE_WAITING]
    active = frame[frame["series"] == rf.TIMELINE_ACTIVE].set_index("t")["requests"]
    assert active.loc[1.0] == 3 and active.loc[0.0] == 1  # all three between 1 and 2 s
    assert spec["encoding"]["x"]["scale"]["domain"] == [0.0, 3.0]


def test_cdf_marks_are_the_nearest_rank_values_in_the_unit_asked() -> None:
    values = np.random.default_rng(18).exponential(0.2, 5_000)
    series = rf.cdf_series(values, "ttft", left_out=12, left_out_reason="non-success", max_points=vegalite.LINE_POINTS)
    in_s, in_ms = vegalite.cdf_chart(series, "s"), vegalite.cdf_chart(series, "ms")
    _valid(in_s)
    marks_s, marks_ms = in_s["datasets"]["marks"], in_ms["datasets"]["marks"]
    assert list(marks_s["mark"]) == ["p50", "p95", "p99"]
    assert marks_s["x"].tolist() == [percentile(values, q) for q in (50, 95, 99)]
    assert marks_ms["x"].tolist() == pytest.approx([1000 * percentile(values, q) for q in (50, 95, 99)])
    assert in_ms["layer"][0]["encoding"]["x"]["title"] == "milliseconds"
    assert in_ms["datasets"]["cdf"]["x"].max() == pytest.approx(1000 * values.max())
    assert len(in_ms["datasets"]["cdf"]) <= vegalite.LINE_POINTS + 4  # thinned, the marked ranks kept
    assert "12 requests not in the curve (non-success)" in in_s["title"]["subtitle"][-1]


def test_a_cdf_title_fits_a_third_of_the_page_and_its_mark_labels_stay_inside_the_plot() -> None:
    """Summary's CDF panel at 1,400 px cut 'n = 2,701; 299 requests not in the curve (non-suc…' and clipped the p99
    label at the plot's top (issue 36): every subtitle line now fits, and the labels have room above their marks."""
    values = np.random.default_rng(18).exponential(0.04, 2_701)
    series = rf.cdf_series(values, "tpot", left_out=299, left_out_reason="non-success or a single output token")
    spec = vegalite.cdf_chart(series, "ms")
    _valid(spec)
    lines = spec["title"]["subtitle"]
    assert all(len(line) <= vegalite.NARROW_SUBTITLE_CHARS for line in lines), lines
    said = [series.formula, ", ".join(f"p{q:g} {fmt(v * 1000)} ms" for q, v, _ in series.marks), series.subtitle]
    assert [w.rstrip(";,") for w in " ".join(lines).split()] == [w.rstrip(";,") for w in " ".join(said).split()]
    assert any(line.startswith("299 requests not in the curve") for line in lines)
    (label,) = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    top = label["encoding"]["y"]["scale"]["domain"][1]
    reach_px = -label["mark"]["dy"] + label["mark"]["fontSize"]  # from the mark to the top of its label
    for share in spec["datasets"]["marks"]["share"]:  # p99 at 99%: the highest
        assert (top - share) * vegalite.CDF_MIN_PLOT_PX >= reach_px, (share, top)
    assert label["encoding"]["y"]["axis"]["values"][-1] == 1.0  # ticks stop at 100%; the headroom is for labels


def test_cdf_with_no_values_says_so() -> None:
    spec = vegalite.cdf_chart(rf.cdf_series(np.array([]), "tpot"), "ms")
    assert spec["encoding"]["text"]["value"].startswith("no values")


def test_stages_per_slice_in_ms_with_slice_names_as_text(admitted_table) -> None:
    spec = vegalite.stage_chart(rf.stage_means(admitted_table), "ms")
    _valid(spec)
    rows = spec["datasets"]["stages"]
    assert spec["encoding"]["y"]["sort"] == ["all (n=2)", "<b>chat</b> (n=1)", "batch (n=1)"]  # shown as typed
    chat = rows[rows["group"] == "<b>chat</b> (n=1)"].set_index("stage")["mean"]
    assert chat.to_dict() == pytest.approx({"queue wait": 500.0, "prefill": 500.0, "decode": 1000.0})


def test_causes_largest_first_and_capped() -> None:
    causes = {f"cause {i}": i for i in range(1, 21)}
    spec = vegalite.cause_chart(causes)
    _valid(spec)
    frame = spec["datasets"]["causes"]
    assert len(frame) == 15 and frame["requests"].iloc[0] == 20
    assert frame["cause"].iloc[-1] == "6 other causes" and frame["requests"].iloc[-1] == sum(range(1, 7))
    assert vegalite.cause_chart({}) is None


def test_percentile_charts_are_valid_vega_lite() -> None:
    ok = np.linspace(1, 3, 50)
    fa = np.concatenate([ok, [np.inf] * 5])
    _valid(vegalite.percentile_cdf(ok, fa, 99, 3.0, np.inf, "Latency (s)"))
    _valid(vegalite.percentile_histogram(fa, 99, None, "Latency (s)"))


def _runs() -> dict[str, object]:
    rng = np.random.default_rng(18)
    fast = [{"start": float(i), "first_token": i + 0.1, "end": i + float(d), "status": "success", "output_tokens": 4}
            for i, d in enumerate(rng.uniform(0.2, 1.0, 1_000))]
    slow = [{"start": 0.0, "first_token": 1.0, "end": 3.0, "status": "success", "output_tokens": 5},
            {"start": 1.0, "end": 2.0, "status": "failed"}]
    tables = {"fast": validate(parse_objects(fast), 0, 1_001), "slow \x1b[2J<b>": validate(parse_objects(slow), 0, 3),
              "none": validate(parse_objects(slow[1:]), 0, 3)}
    return {name: rf.record_series(t, max_points=vegalite.LINE_POINTS) for name, t in tables.items()}


def test_overlaid_cdfs_hold_each_runs_curve_from_zero_to_one_in_the_unit_asked() -> None:
    series = _runs()
    spec = vegalite.overlaid_cdf_chart({n: s["latency"] for n, s in series.items()}, "latency", "ms")
    _valid(spec)
    curves = spec["datasets"]["curves"]
    runs = ["fast (n=1,000)", "slow \\x1b[2J<b> (n=1)"]  # the escape shown, markup as typed
    assert spec["encoding"]["color"]["sort"] == runs and curves["run"].unique().tolist() == runs
    fast = curves[curves["run"] == runs[0]]
    assert fast["x"].tolist() == (series["fast"]["latency"].x * 1000).tolist()  # Summary's curve, in ms
    assert fast["share"].iloc[0] == 0.0 and fast["share"].iloc[-1] == 1.0 and fast["share"].is_monotonic_increasing
    assert len(fast) <= vegalite.LINE_POINTS + 4
    assert curves[curves["run"] == runs[1]][["x", "share"]].values.tolist() == [[3000.0, 0.0], [3000.0, 1.0]]
    assert spec["title"]["subtitle"] == ["no values: none"]  # a run with no success is named, not drawn
    assert spec["encoding"]["x"]["title"] == "milliseconds"
    bars = vegalite.percentile_bars({n: {"latency": {50: 1.0}} for n in series})["latency"]["encoding"]["color"]["scale"]
    assert spec["encoding"]["color"]["scale"]["range"] == bars["range"][:2]  # each run the colour of its bars
    empty = vegalite.overlaid_cdf_chart({"none": series["none"]["ttft"]}, "ttft")
    assert empty["encoding"]["text"]["value"] == "no run has a value for this metric"


def test_percentile_bars_per_metric_and_run_in_the_unit_asked() -> None:
    by_run = {"a": {"latency": {50: 1.0, 95: 2.0, 99: 4.0}, "ttft": {50: 0.1, 95: 0.2, 99: None}},
              "b<i>": {"latency": {50: 1.5, 95: 2.5, 99: 3.5}}}
    charts = vegalite.percentile_bars(by_run, "ms")
    assert list(charts) == ["latency", "ttft", "tpot"]
    for spec in charts.values():
        _valid(spec)
    latency = charts["latency"]["datasets"]["bars"].set_index(["run", "mark"])["value"]
    assert latency.to_dict() == {("a", "p50"): 1000.0, ("a", "p95"): 2000.0, ("a", "p99"): 4000.0,
                                 ("b<i>", "p50"): 1500.0, ("b<i>", "p95"): 2500.0, ("b<i>", "p99"): 3500.0}
    ttft = charts["ttft"]["datasets"]["bars"]
    assert ttft[["run", "mark", "value"]].values.tolist() == [["a", "p50", 100.0], ["a", "p95", 200.0]]  # no None bar
    assert charts["ttft"]["encoding"]["y"]["title"] == "milliseconds"
    assert charts["latency"]["encoding"]["color"]["scale"]["domain"] == ["a", "b<i>"]  # as typed: text, not markup
    assert charts["tpot"]["encoding"]["text"]["value"] == "no run has a value for this metric"


def test_marks_at_one_value_share_one_label() -> None:
    """Issue 36: equal p95 and p99 (an ITL of one step time) drew 'p95' and 'p99' a few pixels apart, overlapping."""
    s = rf.CdfSeries(title="ITL", formula=None, x=np.array([0.02, 0.025]), y=np.array([0.5, 1.0]), n=100,
                     marks=((50, 0.02, 50), (95, 0.025, 95), (99, 0.025, 99)), subtitle="")
    spec = vegalite.cdf_chart(s, "ms")
    marks = spec["datasets"]["marks"]
    assert list(marks["mark"]) == ["p50", "", "p95, p99"]
    assert list(marks["x"]) == [20.0, 25.0, 25.0]  # every diamond still drawn, with its own tooltip
    assert list(marks["about"])[1].startswith("p95 = 25 ms")


def test_histograms_of_values_a_float_apart_do_not_raise() -> None:
    """Every request paused 1 s, as 1.4 - 0.4 gives it for each start: numpy raised 'Too many bins for data range'
    and the Token timing page showed a traceback (the Percentile explorer's histogram had the same call)."""
    stalls = np.array([(i + 1.4) - (i + 0.4) for i in range(6)])
    assert np.unique(stalls).size > 1  # the float noise the test is about
    spec = vegalite.percentile_histogram(stalls, 95, float(stalls.max()), "longest stall (s)")
    bins = spec["datasets"]["bins"]
    assert int(bins["records"].sum()) == 6 and bins["lo"].min() < stalls.min() <= stalls.max() < bins["hi"].max()
