"""The Load sweep's Vega-Lite charts: the site's plotly figures' numbers, marks apart, ∞ at the top, SLO lines."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from vega_charts import valid

from servebench.output.figures import sweep as sf
from servebench.output.figures import validate_sweep as vf
from servebench.output.figures import vegalite_sweep as vs
from servebench.output.figures.vegalite import Y_LABELS_PX
from servebench.records.steps import parse_columns

pytest.importorskip("altair")  # its Vega-Lite schema checks the specs (vega_charts.valid)


def _series(frame, name: str) -> list[float | None]:
    """Return one series' y values in x order, None where the frame has NaN."""
    rows = frame[frame["series"] == name].sort_values("x")
    return [None if math.isnan(v) else v for v in rows["y"]]


def _layers(spec: dict, mark: str) -> list[dict]:
    return [layer for layer in spec["layer"] if (layer["mark"] if isinstance(layer["mark"], str)
                                                 else layer["mark"]["type"]) == mark]


def test_latency_charts_draw_the_numbers_the_site_figure_draws(saturated_sweep) -> None:
    d = sf.latency_by_load(saturated_sweep)
    charts = vs.latency_charts(d)
    assert set(charts) == {"latency", "ttft"}
    points = sorted(saturated_sweep.points, key=lambda p: p.load)
    figure = {t.name: list(t.y) for t in sf.latency_vs_load(saturated_sweep).data}
    for metric, spec in charts.items():
        valid(spec)
        lines = spec["datasets"]["lines"]
        k = {"latency": 1, "ttft": 1000}[metric]  # TTFT in ms, as the page's SLO input; latency in s, as its own
        assert spec["layer"][0]["encoding"]["y"]["title"] == {"latency": "seconds", "ttft": "milliseconds"}[metric]
        for q in ("p50", "p95", "p99"):
            measured = [getattr(p, f"{metric}_s")[q] for p in points]
            assert measured == figure[f"{metric} {q}"]  # the site's plotly figure stays in seconds
            assert _series(lines, f"{metric} {q}") == [None if v is None else v * k for v in measured]
        assert sorted(set(lines["x"])) == [p.load for p in points]
    # the TTFT SLO (5 s, typed as 5,000 ms) is a labelled rule on the TTFT chart, in ms; there is no latency SLO
    rules = [layer["data"]["values"][0] for layer in _layers(charts["ttft"], "rule") if "y" in layer["encoding"]]
    assert rules == [{"y": 5000.0, "label": "SLO 5,000 ms"}]
    assert not [layer for layer in _layers(charts["latency"], "rule") if "y" in layer["encoding"]]


def test_capacity_and_knee_are_marked_with_their_labels_on_opposite_sides(saturated_sweep) -> None:
    marks = sf.load_marks(saturated_sweep)
    assert [m.label.split()[0] for m in sorted(marks, key=lambda m: m.label)] == ["capacity", "knee"]
    lower, higher = marks
    assert lower.load <= higher.load and (lower.side, higher.side) == ("left", "right")
    for spec in (*vs.latency_charts(sf.latency_by_load(saturated_sweep)).values(),
                 vs.outcomes_chart(sf.outcome_rates(saturated_sweep))):
        texts = [layer for layer in _layers(spec, "text") if "label" in layer["data"].get("values", [{}])[0]
                 and layer["encoding"]["y"] == {"value": -8}]
        placed = {t["data"]["values"][0]["label"]: (t["data"]["values"][0]["x"], t["mark"]["align"], t["mark"]["dx"])
                  for t in texts}
        assert placed == {lower.label: (lower.load, "right", -4), higher.label: (higher.load, "left", 4)}
        assert all(t["mark"]["clip"] is False for t in texts)  # above the plot, where a zoom would clip them
        rules = {layer["data"]["values"][0]["x"] for layer in _layers(spec, "rule") if "x" in layer["encoding"]
                 and "values" in layer["data"]}
        assert rules == {lower.load, higher.load}
        assert spec["layer"][0]["encoding"]["x"]["scale"]["domain"][1] > higher.load  # room for its label


def test_one_mark_is_labelled_right_of_its_line() -> None:
    (mark,) = sf.sided([(2.0, "knee 2", "red", "dot")])
    assert mark.side == "right"


def test_an_infinite_failure_aware_p95_is_drawn_at_the_top_marked_infinity(saturated_sweep) -> None:
    d = sf.latency_by_load(saturated_sweep)
    spec = vs.latency_charts(d)["latency"]
    fa = d.failure_aware
    assert fa is not None and any(fa.infinite) and not all(fa.infinite)
    points = sorted(saturated_sweep.points, key=lambda p: p.load)
    assert fa.p95_s == [p.failure_aware_latency_s["p95"] for p in points]
    lines = spec["datasets"]["lines"]
    drawn = lines[lines["series"] == sf.FAILURE_AWARE_NAME].sort_values("x")
    assert drawn["y"].tolist() == fa.drawn_s
    assert [t.startswith("∞") for t in drawn["text"]] == fa.infinite  # the tooltip says ∞, not the height drawn
    finite = [v for v in lines["y"] if not math.isnan(v) and v != fa.top_s]
    assert fa.top_s > max(finite)
    infinite = spec["datasets"]["infinite"]
    assert infinite["x"].tolist() == [p.load for p, inf in zip(points, fa.infinite) if inf]
    assert set(infinite["y"]) == {fa.top_s} and set(infinite["label"]) == {"∞"}
    triangle, = [layer for layer in _layers(spec, "point") if layer["data"]["name"] == "infinite"]
    assert triangle["mark"]["shape"] == "triangle-up"
    assert _layers(spec, "text")[0]["encoding"]["text"] == {"field": "label"}
    assert spec["layer"][0]["encoding"]["y"]["scale"]["domain"][1] > fa.top_s  # headroom: the ∞ stays in the plot
    # the site's figure draws the same line: the ∞ points at the same height, labelled the same
    trace = next(t for t in sf.latency_vs_load(saturated_sweep).data if t.name == sf.FAILURE_AWARE_NAME)
    assert list(trace.y) == fa.drawn_s and [t == "∞" for t in trace.text] == fa.infinite


def test_outcomes_chart_draws_each_outcome_per_second(saturated_sweep) -> None:
    d = sf.outcome_rates(saturated_sweep)
    spec = valid(vs.outcomes_chart(d))
    points = sorted(saturated_sweep.points, key=lambda p: p.load)
    frame = vs.outcomes_chart(d)["datasets"]["lines"]
    assert [line.name for line in d.lines] == [t.name for t in sf.outcomes_vs_load(saturated_sweep).data]
    assert "attempted (with retries)" not in {line.name for line in d.lines}  # no point retried
    assert _series(frame, "completed") == [p.throughput_rps for p in points]
    assert _series(frame, "within SLOs") == [p.goodput_rps for p in points]
    assert _series(frame, "timed out") == pytest.approx([p.timed_out / p.window_s for p in points])
    dashes = dict(zip(spec["layer"][0]["encoding"]["strokeDash"]["scale"]["domain"],
                      spec["layer"][0]["encoding"]["strokeDash"]["scale"]["range"]))
    assert dashes["within SLOs"] == [6, 4] and dashes["completed"] == [1, 0]


def _trace(rows: int) -> dict:
    rng = np.random.default_rng(18)
    running = rng.integers(0, 9, rows)
    return {"start_s": np.arange(rows) * 0.01, "running": running, "waiting": rng.integers(0, 5, rows),
            "kv_tokens_used": running * 1000, "kv_tokens_held": running * 900}


def test_trace_charts_are_thinned_step_lines_that_keep_the_peaks_and_the_budget() -> None:
    raw = _trace(5000)
    series = sf.trace_series(raw, max_points=600)
    charts = vs.trace_charts(series, kv_budget_tokens=8000, title="Engine over time at load 1")
    assert set(charts) == {"sequences", "kv"}
    for spec in charts.values():
        valid(spec)
        assert {layer["mark"]["type"] for layer in spec["layer"]} <= {"line", "rule", "text"}  # no point, no tooltip
        assert spec["layer"][0]["mark"]["interpolate"] == "step-after"
    sequences = charts["sequences"]["datasets"]["lines"]
    assert len(sequences) == 2 * 600
    assert max(_series(sequences, "running")) == raw["running"].max()  # thinned to each bucket's largest
    assert _series(sequences, "running") == series.running.tolist()
    kv = charts["kv"]["datasets"]["lines"]
    assert _series(kv, "KV tokens computed") == series.kv_computed.tolist()
    budget = [layer["data"]["values"][0] for layer in _layers(charts["kv"], "rule")]
    assert budget == [{"y": 8000, "label": "budget 8,000"}]
    # the site's figure draws the same trace, thinned the same way to its own bound
    site = sf.trace_over_time(raw, kv_budget_tokens=8000)
    parsed = parse_columns({k: list(v) for k, v in raw.items()}, "trace")
    assert list(site.data[0].y) == sf.trace_series(parsed).running.tolist()


def test_overlay_keeps_each_sweeps_numbers_simulated_solid_measured_dashed(saturated_sweep) -> None:
    a, b = sf.series_of(saturated_sweep, "A <b>"), sf.series_of(saturated_sweep, "B", measured=True)
    charts = vs.overlay_charts([a, b])
    assert set(charts) == {"ttft", "latency", "rate"}
    for key, spec in charts.items():
        valid(spec)
        frame = spec["datasets"]["lines"]
        values = {"ttft": [v * 1000 for v in a.ttft_p95_s], "latency": a.latency_p95_s, "rate": a.rate_rps}[key]
        assert _series(frame, "A <b>") == values  # the name as typed: Vega-Lite draws text; TTFT in ms
        assert ("ms" in spec["title"]["text"]) == (key == "ttft")
        assert set(frame.loc[frame["series"] == "B", "measured"]) == {"measured"}
        line, points = spec["layer"]
        assert line["encoding"]["strokeDash"]["scale"] == {"domain": ["simulated", "measured"],
                                                           "range": [[1, 0], [6, 4]]}
        assert points["encoding"]["shape"]["scale"]["range"] == ["circle", "diamond"]
        assert line["encoding"]["x"]["title"] == "Offered load (requests/s)"


VALIDATION = {"scenario": "tiny", "measured_knee_rps": 60.0, "simulated_knee_rps": 55.0, "knee_relative_error": -0.083,
              "points": [{"rate_rps": r, "measured": {"ttft_p95_s": 0.1 * r, "ttft_p50_s": 0.05 * r,
                                                       "latency_p95_s": r, "latency_p50_s": None,
                                                       "throughput_rps": min(r, 50), "queue_wait_p95_s": 0.01 * r,
                                                       "queue_wait_p50_s": 0.0},
                                      "simulated": {"ttft_p95_s": 0.09 * r, "ttft_p50_s": 0.04 * r,
                                                    "latency_p95_s": 0.9 * r, "latency_p50_s": 0.5 * r,
                                                    "throughput_rps": min(r, 52), "queue_wait_p95_s": 0.02 * r,
                                                    "queue_wait_p50_s": 0.0}}
                         for r in (10.0, 40.0, 80.0)]}


def test_validation_charts_mark_both_knees_apart_and_draw_the_files_numbers() -> None:
    d = vf.validation_curves(VALIDATION)
    assert [(k.label, k.side) for k in d.knees] == [("simulated knee 55/s", "left"), ("measured knee 60/s", "right")]
    charts = vs.validation_charts(d)
    assert list(charts) == ["ttft", "latency", "throughput_rps", "queue_wait"]
    for spec in charts.values():
        valid(spec)
        sides = {t["data"]["values"][0]["label"]: t["mark"]["align"] for t in _layers(spec, "text")}
        assert sides == {"simulated knee 55/s": "right", "measured knee 60/s": "left"}
    latency = charts["latency"]["datasets"]["lines"]
    assert _series(latency, "measured p95") == [10.0, 40.0, 80.0]
    assert _series(latency, "measured p50") == [None, None, None]  # not in the file: no line, never a 0
    assert _series(charts["throughput_rps"]["datasets"]["lines"], "simulated throughput") == [10.0, 40.0, 52.0]
    # TTFT and queue wait in ms, as the page's inputs; the file's (and the plotly figure's) numbers are seconds
    assert charts["ttft"]["title"]["text"] == "TTFT (ms)" and charts["queue_wait"]["title"]["text"] == "Queue wait (ms)"
    assert _series(charts["ttft"]["datasets"]["lines"], "measured p95") == [0.1 * r * 1000 for r in (10.0, 40.0, 80.0)]
    assert _series(charts["queue_wait"]["datasets"]["lines"], "simulated p95") == [0.02 * r * 1000
                                                                                   for r in (10.0, 40.0, 80.0)]
    assert "knee error -8.3%" in charts["ttft"]["title"]["subtitle"][0]
    # the CLI's plotly report marks the same knees on the same sides
    fig = vf.measured_vs_simulated(VALIDATION)
    assert {(a.text, a.xanchor) for a in fig.layout.annotations if "knee" in a.text} == {
        ("simulated knee 55/s", "right"), ("measured knee 60/s", "left")}


def test_the_charts_stacked_on_the_sweep_page_reserve_one_width_for_their_y_labels(saturated_sweep) -> None:
    """Latency, TTFT, outcomes and the engine's two traces are drawn one above another: a KV budget's wide labels
    ("65,536") must not push its plot right of the others', or the load and time axes do not line up."""
    charts = [*vs.latency_charts(sf.latency_by_load(saturated_sweep)).values(),
              vs.outcomes_chart(sf.outcome_rates(saturated_sweep)),
              *vs.trace_charts(sf.trace_series(_trace(500), max_points=600), kv_budget_tokens=65_536).values()]
    extents = {json.dumps(layer["encoding"]["y"].get("axis")) for spec in charts for layer in spec["layer"]
               if "y" in layer.get("encoding", {}) and "field" in layer["encoding"]["y"]}
    assert extents == {json.dumps({"minExtent": Y_LABELS_PX})}
