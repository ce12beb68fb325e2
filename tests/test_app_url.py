"""Shareable views through AppTest: the Percentile explorer's percentile, metric and unit, and Summary's ms / s."""

from __future__ import annotations

import json
import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from servebench.output.figures.markdown_table import markdown_tables

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")


def _tables(at: AppTest) -> list:
    """Return the page's Markdown tables (its static tables) as frames of the text shown."""
    return markdown_tables(m.value for m in at.markdown)


def _page(page: str, **query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page(page).run()
    assert not at.exception and not at.error
    return at


def test_percentile_explorer_opens_on_the_urls_percentile_metric_and_unit() -> None:
    at = _page("pages/percentiles.py", run="r1_r4.json", q="50", metric="ttft", unit="ms")
    assert at.number_input(key="q_input").value == 50.0 and at.slider(key="q_slider").value == 50.0
    assert at.selectbox(key="metric").value == "ttft"
    m = {x.label: x.value for x in at.metric}
    assert m["p50 (success-only, ms)"] == "250"  # R1-R4's TTFTs 0.25 s and 0.5 s: rank 1 of 2
    at.number_input(key="q_input").set_value(95.0).run()
    at.selectbox(key="metric").select("tpot").run()
    url = dict(at.query_params)
    assert "q" not in url and url["metric"] == "tpot" and url["unit"] == "ms"  # 95 is the default: dropped


def test_percentile_explorer_ignores_a_bad_url() -> None:
    at = _page("pages/percentiles.py", q="250", metric="nonsense")
    assert at.number_input(key="q_input").value == 95.0
    assert at.selectbox(key="metric").value == "latency"


def test_summary_percentile_tables_follow_the_unit() -> None:
    at = _page("pages/summary.py", run="r1_r4.json", ws="0", we="10", unit="s")
    seconds = next(t for t in _tables(at) if t.columns[0] == "Metric")  # Markdown tables, not grids
    assert seconds["Metric"].iloc[0] == "Latency (s)"
    assert seconds["p95 [95% CI]"].iloc[0].startswith("2.5 [")
    at.segmented_control(key="unit").set_value("ms").run()
    assert not at.exception
    tables = [t for t in _tables(at) if t.columns[0] == "Metric"]
    assert tables[0]["Metric"].iloc[0] == "Latency (ms)"
    assert tables[0]["p95 [95% CI]"].iloc[0].startswith("2,500 [")
    extremes = next(t for t in tables if "Max" in t.columns)  # max and mean in their own narrow table
    assert extremes["Max"].iloc[0] == "2,500"  # R1-R4's slowest success, 2.5 s
    assert at.query_params["unit"] == "ms"



def _vega_specs(at: AppTest) -> dict[str, dict]:
    """Return the page's Vega-Lite charts by title."""
    specs = [json.loads(c.proto.spec) for c in at.get("vega_lite_chart")]
    return {s["title"]["text"]: s for s in specs}


def test_summary_times_default_to_milliseconds() -> None:
    at = _page("pages/summary.py", run="r1_r4.json", ws="0", we="10")
    assert at.segmented_control(key="unit").value == "ms" and at.query_params["unit"] == "ms"
    m = {x.label: x.value for x in at.metric}
    assert m["TTFT p95 (ms)"] == "500" and m["Request TPOT p95 (ms)"] == "250"


def test_summary_contract_fields_and_cdf_axes_follow_the_unit_and_fractions_are_percents() -> None:
    at = _page("pages/summary.py", run="r1_r4.json", ws="0", we="10", unit="s")
    m = {x.label: x.value for x in at.metric}
    assert m["Non-success fraction"] == "50%"  # the spec's 0.5, for people
    assert m["Latency p95 (s)"] == "2.5" and m["TTFT p95 (s)"] == "0.5"
    at.session_state["cdfs_open"] = True  # the charts' panel, opened
    at.run()
    assert _vega_specs(at)["Latency"]["layer"][0]["encoding"]["x"]["title"] == "seconds"
    at.segmented_control(key="unit").set_value("ms").run()
    assert not at.exception
    m = {x.label: x.value for x in at.metric}
    assert m["Latency p95 (ms)"] == "2,500" and m["TTFT p95 (ms)"] == "500" and m["Request TPOT p95 (ms)"] == "250"
    assert m["Non-success fraction"] == "50%" and m["Successful requests/s"] == "0.2"  # not times: unchanged
    assert "Latency p95 (s)" not in m
    cdfs = {k: v for k, v in _vega_specs(at).items() if k in ("Latency", "TTFT", "Request TPOT")}
    assert len(cdfs) == 3
    assert all(c["layer"][0]["encoding"]["x"]["title"] == "milliseconds" for c in cdfs.values())
    assert "p95 2,500 ms" in " ".join(cdfs["Latency"]["title"]["subtitle"])


def test_summary_draws_its_charts_only_in_the_panels_opened() -> None:
    at = _page("pages/summary.py", run="r1_r4.json", ws="0", we="10", unit="s")
    # the first view: the overview's pictures (SVG in Markdown: no chart library to load), no chart; no plotly
    drawn = set(_vega_specs(at))
    assert drawn == set() and not at.get("plotly_chart")
    pictures = [md.value for md in at.markdown if md.value.startswith("<svg")]
    assert [re.search(r'aria-label="([^:"]+)', p).group(1) for p in pictures] == [
        "Every request by outcome", "p95 over time (s)", "Latency and TTFT CDF (s)"]
    panels = {"causes_chart_open": {"Non-success causes"},
              "timeline_open": {"Requests over the window"},
              "cdfs_open": {"Latency", "TTFT", "Request TPOT"},  # R1-R4 has no `admitted`: no stage chart
              "over_time_open": {"Successful requests/s (60 bins of 0.167 s)", "TTFT (s) of the successes ending "
                                 "in each bin", "Latency (s) of the successes ending in each bin"}}
    for key, titles in panels.items():
        at.session_state[key] = True
        at.run()
        assert not at.exception
        drawn |= titles
        assert set(_vega_specs(at)) == drawn, key
        assert not at.get("plotly_chart"), key
    # drawn on a canvas: as SVG, the browser's layout and paint of the CDFs' lines were most of opening the panel
    assert {s["usermeta"]["embedOptions"]["renderer"] for s in _vega_specs(at).values()} == {"canvas"}
