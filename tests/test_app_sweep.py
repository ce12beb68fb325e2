"""The Load sweep page through AppTest: URL state, capacity with its interval, labels, overlays, one poor-fit message."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest
from vega_charts import drawn_charts

from servebench.dashboard.wording import s_to_ms
from servebench.formatting import fmt
from servebench.output.figures.markdown_table import markdown_tables

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")


def _sweep_page(**query: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    for name, value in query.items():
        at.query_params[name] = value
    at.switch_page("pages/sweep.py").run()
    assert not at.exception and not at.error
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def test_scenario_knobs_come_from_the_url_and_go_back_to_it() -> None:
    at = _sweep_page(policy="paged", max_seqs="6", loads="0.5, 1, 2", requests="60", slo_ttft_ms="4000",
                     scenario="no-such.yaml")
    assert at.selectbox(key="sweep_sample").value == "profile_b.yaml"  # an unknown scenario is ignored
    assert at.radio(key="sweep_policy:profile_b").value == "paged"
    assert at.number_input(key="sweep_seqs:profile_b").value == 6
    assert at.text_input(key="loads").value == "0.5, 1, 2"
    assert at.number_input(key="sweep_requests").value == 60
    assert at.number_input(key="sweep_slo_ttft_ms").value == 4000.0
    at.radio(key="sweep_policy:profile_b").set_value("reserve").run()
    at.number_input(key="sweep_seqs:profile_b").set_value(4).run()
    assert not at.exception
    url = dict(at.query_params)
    assert "policy" not in url  # back to the scenario's own policy: a short link
    assert url["max_seqs"] == "4" and url["loads"] == "0.5, 1, 2" and url["requests"] == "60"


def test_capacity_reads_with_its_interval_and_the_table_uses_labels() -> None:
    at = _sweep_page(loads="0.5, 1, 2", requests="100")
    at.button(key="run_sweep").click().run()
    assert not at.exception and not at.error
    m = _metrics(at)
    # 100 requests a point cannot place 95% attainment finely: one decimal, and the range it may lie in
    assert m["Usable capacity"] == "1.0 req/s", m
    assert "Knee (req/s)" in m  # 'Knee 0.8125' had no unit
    # the answer first, in one sentence: the capacity as the metric reads it, the SLOs, the knee with its unit
    assert at.success[0].value.startswith("**One server takes up to 1.0 req/s within the SLOs (95% of requests with "
                                          "TTFT at most 5,000 ms).")
    assert f"Past {m['Knee (req/s)']} req/s latency climbs steeply" in at.success[0].value
    marks = [layer["data"]["values"][0]["label"] for spec, _ in drawn_charts(at).values()
             for layer in spec.get("layer", []) if layer.get("mark", {}).get("type") == "text"
             and "label" in (layer.get("data", {}).get("values") or [{}])[0]]
    load_marks = [label for label in marks if label.startswith(("knee", "capacity"))]
    assert {label.split()[0] for label in load_marks} == {"knee", "capacity"}
    assert all(label.endswith(" req/s") for label in load_marks)  # each chart's marks carry their unit
    low, high = m["Plausible range (req/s)"].split("–")
    assert float(low) <= 1.0 < float(high)
    assert any("cannot be told apart from the 95% target" in c.value for c in at.caption)
    assert any(c.value.startswith("Success-only latency can fall past saturation") for c in at.caption)
    # the workload mix's editor is the page's one grid: the results are Markdown, nothing to load and draw after the run
    assert [d.key for d in at.dataframe] == ["sweep_mix:profile_b"]
    tables = markdown_tables(m.value for m in at.markdown)[-3:]  # the sweep's three tables
    columns = [c for frame in tables for c in frame.columns]
    assert "Latency p95, failures as ∞ (s)" in columns and "SLO attainment" in columns
    assert not [c for c in columns if "_" in c]  # no snake_case keys
    # TTFT and queue wait read in ms, as the SLO input beside them takes TTFT: the table, the chart, its SLO line
    assert {"TTFT p95 (ms)", "Queue wait p95 (ms)"} <= set(columns) and "TTFT p95 (s)" not in columns
    times = next(frame for frame in tables if "TTFT p95 (ms)" in frame.columns)
    result = at.session_state["sweep_result"][1]
    assert times["TTFT p95 (ms)"].tolist() == [fmt(s_to_ms(p.ttft_s["p95"]))
                                               for p in sorted(result.points, key=lambda p: p.load)]
    ttft_spec, ttft_data = drawn_charts(at)["profile_b: TTFT against offered load"]
    assert ttft_spec["layer"][0]["encoding"]["y"]["title"] == "milliseconds"
    assert sorted(ttft_data["lines"].query("series == 'ttft p95'")["y"]) == sorted(
        p.ttft_s["p95"] * 1000 for p in result.points)
    slo_labels = [layer["data"]["values"][0]["label"] for layer in ttft_spec["layer"]
                  if layer["mark"]["type"] == "text" and "SLO" in str(layer.get("data"))]
    assert slo_labels == ["SLO 5,000 ms"]
    assert [len(frame) for frame in tables] == [len(tables[0])] * 3 and len(tables[0]) >= 3  # a row per load


def test_the_slo_inputs_take_ms_and_the_sweep_gets_the_same_seconds() -> None:
    """TTFT and request TPOT limits are typed in ms, as on every other page (they took seconds): 4,000 ms and 80 ms
    reach the sweep as exactly the SLO that 4 s and 0.08 s typed in seconds gave, so its result is the same."""
    from servebench.analysis.summary import SLO

    at = _sweep_page(loads="0.5, 1, 2", requests="100", slo_ttft_ms="4000")
    ttft, tpot = at.number_input(key="sweep_slo_ttft_ms"), at.number_input(key="sweep_slo_tpot_ms")
    assert (ttft.label, ttft.value, tpot.label, tpot.value) == ("SLO: TTFT (ms)", 4000.0, "SLO: request TPOT (ms)",
                                                                None)
    assert at.number_input(key="sweep_slo_latency").label == "SLO: latency (s)"  # latency stays in seconds
    assert at.number_input(key="sweep_slo_ttft_ms").value == 4000.0
    at.number_input(key="sweep_slo_tpot_ms").set_value(80.0).run()
    at.button(key="run_sweep").click().run()
    assert not at.exception and not at.error
    settings, result = at.session_state["sweep_result"]
    assert json.loads(settings)["slo"] == SLO(ttft_s=4.0, tpot_s=0.08).model_dump()
    assert (result.slo.ttft_s, result.slo.tpot_s, result.slo.latency_s) == (4.0, 0.08, None)
    assert "TTFT at most 4,000 ms and request TPOT at most 80 ms" in at.success[0].value  # as typed
    assert dict(at.query_params)["slo_ttft_ms"] == "4000"


def test_sweeps_are_kept_and_overlaid_with_a_measured_sweep(tmp_path: Path) -> None:
    from servebench.analysis.summary import SLO
    from servebench.serving.scenario import load_scenario
    from servebench.serving.sweep import sweep

    at = _sweep_page(loads="0.5, 1.5", requests="40")
    at.toggle(key="sweep_search").set_value(False)
    at.button(key="run_sweep").click().run()
    assert "Sweeps side by side" not in [s.value for s in at.subheader]  # one sweep: nothing to overlay yet
    at.radio(key="sweep_policy:profile_b").set_value("paged").run()
    at.button(key="run_sweep").click().run()
    assert not at.exception and not at.error
    assert "Sweeps side by side" in [s.value for s in at.subheader]
    assert at.multiselect(key="overlay_pick").value == ["profile_b: reserve, 256 seqs, 8 GiB",
                                                        "profile_b: paged, 256 seqs, 8 GiB"]
    # a `servebench load --sweep` result is a SweepResult in sweep.json: upload it as the measured curve
    measured = sweep(load_scenario(REPO / "sample_data" / "scenarios" / "profile_b.yaml"), [0.5, 1.0],
                     slo=SLO(ttft_s=5), requests=30, search=False)
    at.file_uploader(key="validate_sweep_upload").set_value(
        ("sweep.json", measured.model_dump_json().encode(), "application/json")).run()
    assert not at.exception and not at.error
    assert not at.get("plotly_chart")  # Vega-Lite: the sweep page never loads plotly.js
    charts = drawn_charts(at)
    for title in ("TTFT p95 (ms, successes)", "Latency p95 (s, successes)", "Goodput or throughput (requests/s)"):
        lines = charts[title][1]["lines"]
        assert set(lines["series"]) == {"profile_b: reserve, 256 seqs, 8 GiB", "profile_b: paged, 256 seqs, 8 GiB",
                                        "measured: sweep.json"}
        kinds = lines.groupby("series")["measured"].first()
        assert kinds["measured: sweep.json"] == "measured" and kinds["profile_b: paged, 256 seqs, 8 GiB"] == "simulated"
    goodput = charts["Goodput or throughput (requests/s)"][1]["lines"]
    measured_goodput = goodput[goodput["series"] == "measured: sweep.json"].sort_values("x")["y"].tolist()
    assert measured_goodput == [p.goodput_rps for p in sorted(measured.points, key=lambda p: p.load)]


def test_a_validate_sweep_upload_draws_measured_and_simulated_with_both_knees() -> None:
    at = _sweep_page()
    def side(k: float) -> dict:
        return {"ttft_p50_s": k, "ttft_p95_s": 2 * k, "latency_p50_s": 5 * k, "latency_p95_s": 9 * k,
                "throughput_rps": 30 * k, "queue_wait_p50_s": k / 4, "queue_wait_p95_s": k / 2}
    doc = {"scenario": "tiny", "measured_knee_rps": 40, "simulated_knee_rps": 44, "knee_relative_error": 0.1,
           "points": [{"rate_rps": r, "measured": side(r / 10), "simulated": side(r / 11)} for r in (10, 40, 60)]}
    at.file_uploader(key="validate_sweep_upload").set_value(
        ("validate_sweep.json", json.dumps(doc).encode(), "application/json")).run()
    assert not at.exception and not at.error and not at.get("plotly_chart")
    charts = drawn_charts(at)
    assert {"TTFT (ms)", "Latency (s)", "Throughput (requests/s)", "Queue wait (ms)"} <= set(charts)
    table = next(f for f in markdown_tables(m.value for m in at.markdown) if "Rate (req/s)" in f.columns)
    assert table["TTFT p95 measured (ms)"].tolist() == ["2,000", "8,000", "12,000"]  # 2 x rate / 10 s, in ms
    spec, data = charts["Latency (s)"]
    measured = data["lines"][data["lines"]["series"] == "measured p95"].sort_values("x")
    assert measured["y"].tolist() == [9.0, 36.0, 54.0]
    knees = {layer["data"]["values"][0]["label"]: layer["mark"]["align"] for layer in spec["layer"]
             if layer["mark"]["type"] == "text"}
    assert knees == {"measured knee 40/s": "right", "simulated knee 44/s": "left"}  # apart: never over each other


def test_a_poor_step_fit_is_one_message_with_the_choice() -> None:
    at = _sweep_page()
    at.radio(key="step_how:profile_b").set_value("fitted from a timing run").run()
    rng = np.random.default_rng(18)  # step times unrelated to the work: nothing to fit
    rows = [{"duration_s": float(rng.uniform(0.001, 0.2)), "prefill_tokens": int(rng.integers(0, 500)),
             "decode_seqs": int(rng.integers(1, 8)), "kv_tokens_read": int(rng.integers(10, 5000))} for _ in range(60)]
    data = "\n".join(json.dumps(r) for r in rows).encode()
    at.file_uploader(key="trace_upload").set_value(("noise.jsonl", data, "application/jsonl")).run()
    assert not at.exception
    assert len(at.error) == 1 and not at.warning
    assert at.error[0].value.startswith("This step model fits poorly (R² 0.02")
    assert "Suggestion:" in at.error[0].value
    assert "run_sweep" not in {b.key for b in at.button}  # stopped until the user chooses
    at.checkbox(key="allow_poor_fit").check().run()
    assert not at.exception and "run_sweep" in {b.key for b in at.button}


def test_every_step_model_coefficient_has_an_input_and_keeps_its_value() -> None:
    from servebench.capacity.stepmodel import COEFFICIENTS
    at = _sweep_page(requests="60", loads="0.5, 1")
    at.radio(key="step_how:profile_b").set_value("coefficients").run()
    assert not at.exception and not at.error
    keys = {w.key for w in at.number_input if (w.key or "").startswith("coef_")}
    assert keys == {f"coef_{name}:profile_b" for name in COEFFICIENTS}
    last = COEFFICIENTS[-1]  # the one a zip over four columns used to drop
    at.number_input(key=f"coef_{last}:profile_b").set_value(0.002).run()
    assert not at.exception and not at.error
    assert at.number_input(key=f"coef_{last}:profile_b").value == 0.002
