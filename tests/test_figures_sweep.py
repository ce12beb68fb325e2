"""Sweep figures and tables: capacity read with its precision, marks that do not overlap, failure-aware latency.

The site's plotly figures; the dashboard's Vega-Lite charts of the same numbers: test_figures_vegalite_sweep.py.
"""

from __future__ import annotations

import math

import pytest

from servebench.formatting import fmt
from servebench.output.figures import sweep as sf


@pytest.fixture
def saturated(saturated_sweep):
    return saturated_sweep  # profile B past saturation (conftest.py)


def test_capacity_is_rounded_down_to_what_the_requests_resolve(saturated) -> None:
    reading = sf.capacity_reading(saturated)
    cap = saturated.capacity
    assert reading.low <= cap.load < cap.upper <= reading.high
    digits = len(reading.value.split(".")[1]) if "." in reading.value else 0
    assert 10 ** -digits <= reading.high - reading.low < 10 ** (1 - digits)  # one digit of the interval's width
    assert float(reading.value) <= cap.load  # never claims more than was measured


def test_wilson_interval_matches_a_known_case() -> None:
    lo, hi = sf._wilson(95, 100)
    assert lo == pytest.approx(0.8883, abs=1e-4) and hi == pytest.approx(0.9785, abs=1e-4)


def test_capacity_and_knee_labels_point_away_from_each_other(saturated) -> None:
    fig = sf.latency_vs_load(saturated)
    labels = {a.text.split()[0]: (a.x, a.xanchor) for a in fig.layout.annotations
              if a.text.startswith(("capacity", "knee"))}
    assert set(labels) == {"capacity", "knee"}
    (x1, side1), (x2, side2) = sorted(labels.values())
    assert x1 <= x2 and side1 == "right" and side2 == "left"  # the left mark's text ends at its line


def test_failure_aware_latency_is_drawn_beside_success_only(saturated) -> None:
    fig = sf.latency_vs_load(saturated)
    fa = next(t for t in fig.data if t.name == "latency p95, failures as ∞")
    points = sorted(saturated.points, key=lambda p: p.load)
    infinite = [math.isinf(p.failure_aware_latency_s["p95"]) for p in points]
    assert any(infinite)
    assert [t == "∞" for t in fa.text] == infinite
    top = max(fa.y)
    success_p95 = [p.latency_s["p95"] for p in points]
    assert all(top > v for v in success_p95)  # the ∞ points sit above every finite value


def test_sweep_table_has_labels_and_percent_attainment(saturated) -> None:
    frame = sf.sweep_frame(saturated)
    assert not [c for c in frame.columns if "_" in c]
    assert frame["SLO attainment"].str.endswith("%").all()
    assert "∞" in set(frame["Latency p95, failures as ∞ (s)"])
    # TTFT and queue wait in ms through fmt, as the page's SLO input takes them; latency stays in s
    points = sorted(saturated.points, key=lambda p: p.load)
    assert frame["TTFT p95 (ms)"].tolist() == [fmt(p.ttft_s["p95"] * 1000) for p in points]
    assert frame["Queue wait p95 (ms)"].tolist() == [fmt(p.queue_wait_s["p95"] * 1000) for p in points]
    assert not [c for c in frame.columns if c.startswith(("TTFT", "Queue wait")) and c.endswith("(s)")]


def test_sweep_tables_keep_every_column_once_each_led_by_the_load(saturated) -> None:
    whole = sf.sweep_frame(saturated)
    parts = sf.sweep_frames(saturated)
    load = whole.columns[0]
    assert all(frame.columns[0] == load for _, frame in parts)
    shown = [c for _, frame in parts for c in frame.columns[1:]]
    assert sorted(shown) == sorted(whole.columns[1:]) and len(shown) == len(set(shown))
    for _, frame in parts:
        assert frame.equals(whole[frame.columns])


def test_a_scenario_name_is_shown_in_the_plotly_titles_not_applied_as_markup(saturated) -> None:
    named = saturated.model_copy(update={"scenario": '<a href="javascript:alert(1)">x</a>'})
    titles = [sf.latency_vs_load(named).layout.title.text, sf.outcomes_vs_load(named).layout.title.text,
              sf.trace_over_time({"start_s": [0.0, 1.0], "running": [1, 2], "waiting": [0, 1],
                                  "kv_tokens_used": [10, 20]}, title=f"{named.scenario}: engine over time").layout.title.text]
    assert all(t.startswith("&lt;a href=\"javascript:alert(1)\"&gt;x&lt;/a&gt;: ") for t in titles), titles
