"""Measured vs simulated: the overhead model a timing run is fitted with, the knee finder, validate-sweep."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from servebench.analysis.summary import SLO
from servebench.cli.core import app
from servebench.errors import ConfigError, InputFormatError
from servebench.records.schema import parse_objects
from servebench.records.table import validate
from servebench.serving.engine.sweep_validation import (
    compare_sweeps,
    knee_rps,
    pooled,
    pooled_point,
    read_sweep_validation,
    rel_error,
    sweep_validation_doc,
)
from servebench.serving.engine.validation import arrival_lag_s, busy_arrival_lags, emit_lead_s, fit_trace
from servebench.serving.sweep import SweepPoint

runner = CliRunner()


# --------------------------------------------------------------------------- the overhead model of a timing run


def engine_like_run(lag_s: float | list[float], trailing_s: float) -> tuple[list[dict], list[dict]]:
    """Return records and a step trace of an engine serving lone requests: one prefill step and 4 decodes each
    (request i seen ``lag_s`` late, or ``lag_s[i]`` late)."""
    steps, records = [], []
    for i in range(12 if isinstance(lag_s, float) else len(lag_s)):
        arrival = i * 1.0
        lag = lag_s if isinstance(lag_s, float) else lag_s[i]
        t = arrival + lag  # the engine notices the arrival lag late, and plans then
        first_token = None
        for k in range(5):
            compute_s = 0.004 if k == 0 else 0.001
            compute_start = t + 0.0001
            steps.append({"start": t, "duration_s": 0.0001 + compute_s + trailing_s, "compute_s": compute_s,
                          "compute_start": compute_start, "prefill_tokens": 100 if k == 0 else 0,
                          "decode_seqs": 0 if k == 0 else 1, "kv_tokens": 0 if k == 0 else 100 + k,
                          "prefill_seqs": 1 if k == 0 else 0, "running": 1, "waiting": 0})
            emitted = compute_start + compute_s
            first_token = emitted if first_token is None else first_token
            t += 0.0001 + compute_s + trailing_s
        records.append({"request_id": f"r{i}", "start": arrival, "admitted": arrival + lag,
                        "first_token": first_token, "end": emitted, "status": "success", "prompt_tokens": 100,
                        "output_tokens": 5})
    return records, steps


def test_fit_trace_measures_the_arrival_lag_and_the_emit_lead() -> None:
    records, steps = engine_like_run(lag_s=0.0006, trailing_s=0.00005)
    table = validate(parse_objects(records, "run"), 0.0, 20.0)
    assert arrival_lag_s(table, steps) == pytest.approx(0.0006)
    assert emit_lead_s(steps) == pytest.approx(0.00005)
    fit = fit_trace(steps, table)
    assert fit.model.arrival_lag_s == pytest.approx(0.0006) and fit.model.emit_lead_s == pytest.approx(0.00005)
    assert fit_trace(steps).model.arrival_lag_s == 0  # no records: the lag is not known
    old = [{k: v for k, v in s.items() if k not in ("compute_start", "prefill_seqs")} for s in steps]
    assert emit_lead_s(old) is None and fit_trace(old).model.per_prefill_seq_s == 0  # an older trace


def test_fit_trace_measures_the_arrival_lags_spread() -> None:
    lags = [0.0002 + 0.0001 * (i % 10) for i in range(38)] + [0.02, 0.03]  # two late wake-ups
    records, steps = engine_like_run(lags, trailing_s=0.0)
    table = validate(parse_objects(records, "run"), 0.0, 60.0)
    model = fit_trace(steps, table).model
    assert model.arrival_lag_s == pytest.approx(np.median(lags))
    assert len(model.arrival_lags_s) == 20 and np.mean(model.arrival_lags_s) == pytest.approx(np.mean(lags))
    assert model.arrival_lags_s[-1] == pytest.approx(0.025)  # the slowest 5%: both late wake-ups
    assert fit_trace(steps, table, noise=False).model.arrival_lags_s == ()


def test_lags_of_arrivals_while_a_step_runs_come_from_the_send_lags() -> None:
    records, steps = engine_like_run(lag_s=0.0006, trailing_s=0.0)
    busy = [{"request_id": f"b{i}", "start": i + 0.0026, "admitted": i + 0.0051, "first_token": i + 0.01,
             "end": i + 0.02, "status": "success", "prompt_tokens": 10, "output_tokens": 2} for i in range(12)]
    table = validate(parse_objects(records + busy, "run"), 0.0, 20.0)
    send = {f"r{i}": 0.0002 for i in range(12)} | {f"b{i}": 0.001 + 0.0001 * i for i in range(12)}
    lags = busy_arrival_lags(table, steps, send)
    assert sorted(lags) == pytest.approx([0.001 + 0.0001 * i for i in range(12)])  # only arrivals mid-step
    model = fit_trace(steps, table, send_lags_s=send).model
    assert np.mean(model.busy_arrival_lags_s) == pytest.approx(np.mean(lags))
    assert model.arrival_lag_s == pytest.approx(0.0006)  # idle arrivals: admitted - start, as before
    assert fit_trace(steps, table).model.busy_arrival_lags_s == ()  # no send lags: as at an idle engine


def test_a_sweeps_traces_are_laid_end_to_end_before_the_fit() -> None:
    from servebench.serving.engine.sweep_validation import _after

    _, first = engine_like_run(lag_s=0.0006, trailing_s=0.0)
    second = [{"start_s": s["start"], "duration_s": s["duration_s"], "compute_start_s": s["compute_start"]}
              for s in first]
    rows = [{"start_s": s["start"], "duration_s": s["duration_s"]} for s in first]
    moved = _after(rows, second)
    first_end = max(r["start_s"] + r["duration_s"] for r in rows)
    assert moved[0]["start_s"] == pytest.approx(first_end + 1.0 + second[0]["start_s"])  # after the first run
    assert [m["compute_start_s"] - m["start_s"] for m in moved] == pytest.approx(
        [s["compute_start_s"] - s["start_s"] for s in second])
    assert _after([], second) is second


def test_arrivals_while_busy_do_not_count_toward_the_lag() -> None:
    records, steps = engine_like_run(lag_s=0.0006, trailing_s=0.0)
    # a request arriving mid-step waits for the step: admitted at the next plan, not lag_s later
    records.append({"request_id": "busy", "start": 3.0 + 0.0006 + 0.002, "admitted": 3.0 + 0.0006 + 0.0041,
                    "first_token": 3.02, "end": 3.03, "status": "success", "prompt_tokens": 10, "output_tokens": 2})
    table = validate(parse_objects(records, "run"), 0.0, 20.0)
    assert arrival_lag_s(table, steps) == pytest.approx(0.0006)


# --------------------------------------------------------------------------- the knee finder


def point(rate: float, ttft_p95: float | None, meets: bool = True, **extra: float) -> SweepPoint:
    q = {"p50": None if ttft_p95 is None else ttft_p95 / 2, "p95": ttft_p95, "p99": ttft_p95}
    lat = {"p50": extra.get("lat50"), "p95": extra.get("lat95"), "p99": None}
    return SweepPoint(load=rate, offered=100, accepted=100, completed=100, rejected=0, timed_out=0, cancelled=0,
                      failed=0, window_s=10, offered_rps=rate, throughput_rps=extra.get("thr", rate),
                      output_tokens_per_s=0, goodput_rps=rate, slo_attainment=1.0 if meets else 0.5,
                      meets_slo=meets, ttft_s=q, tpot_s=q, latency_s=lat, queue_wait_s=q, peak_active=None,
                      mean_active=None, peak_waiting=None, max_kv_tokens_used=None, preemptions=None)


def hockey_stick(rates: list[float], capacity: float) -> list[SweepPoint]:
    """TTFT p95 of an M/M/1-like server: 0.1 s / (1 - rate / capacity), infinite past capacity."""
    return [point(r, 0.1 / (1 - r / capacity) if r < capacity else None) for r in rates]


def test_knee_on_synthetic_curves() -> None:
    rates = [1, 2, 3, 4, 5, 6, 7, 8]
    # 0.1 / (1 - r / 10) doubles its value at the lowest rate (0.111) where r >= 5.5: first grid rate 6
    assert knee_rps(hockey_stick(rates, 10)) == 6
    assert knee_rps(hockey_stick(rates, 5)) == 3  # 0.1/(1-3/5) = 0.25 >= 2 x 0.125
    assert knee_rps(hockey_stick([1, 2, 3], 100)) is None  # flat: no knee in range
    assert knee_rps([point(1, 0.1), point(2, 0.2)]) == 2  # exactly twice counts
    assert knee_rps([point(2, None), point(1, 0.1)]) == 2  # by rate, not by order; no successes: past the knee
    assert knee_rps([point(1, None), point(2, 0.1)]) == 1
    assert knee_rps([]) is None


def test_one_noisy_p95_below_the_knee_is_not_the_knee() -> None:
    spike = [point(1, 0.1), point(2, 0.25), point(3, 0.12), point(4, 0.5), point(5, 0.9)]
    assert knee_rps(spike) == 4  # 2/s crossed twice its value at 1/s, but 3/s came back: one stall, not the knee
    assert knee_rps([point(1, 0.1), point(2, 0.25), point(3, 0.12)]) is None  # back below at the top: no knee
    slo = [point(1, 0.1), point(2, 0.1, meets=False), point(3, 0.1), point(4, 0.1, meets=False)]
    assert knee_rps(slo, slo_given=True) == 4


def test_knee_with_slos_is_where_the_slo_capacity_falls() -> None:
    pts = [point(1, 0.1), point(2, 0.5), point(3, 0.6, meets=False), point(4, 9.0, meets=False)]
    assert knee_rps(pts, slo_given=True) == 3
    assert knee_rps(pts) == 2
    assert knee_rps([point(1, 0.1), point(2, 0.1)], slo_given=True) is None


def test_compare_sweeps_errors_and_below_knee() -> None:
    measured = [point(r, t, lat50=1.0, lat95=2.0, thr=r) for r, t in ((1, 0.1), (2, 0.12), (4, 0.5))]
    simulated = [point(r, t, lat50=1.05, lat95=1.9, thr=r) for r, t in ((1, 0.1), (2, 0.11), (4, 0.3))]
    points, summary = compare_sweeps(measured, simulated)
    assert summary["measured_knee_rps"] == 4 and summary["simulated_knee_rps"] == 4
    assert summary["knee_relative_error"] == 0
    assert [p.below_knee for p in points] == [True, True, False]
    assert points[1].rel_error["ttft_p95_s"] == pytest.approx(-1 / 12)
    assert points[0].rel_error["latency_p50_s"] == pytest.approx(0.05)
    assert summary["max_below_knee_rel_error"] == pytest.approx(1 / 12)  # the point past the knee is not held to it
    assert rel_error(0.0, 1.0) is None and rel_error(None, 1.0) is None and rel_error(2.0, 3.0) == 0.5


def test_compare_sweeps_reports_the_engines_own_spread() -> None:
    measured = [point(r, t, lat50=1.0, lat95=2.0) for r, t in ((1, 0.1), (2, 0.12), (4, 0.5))]
    again = [point(r, t, lat50=1.1, lat95=2.0) for r, t in ((1, 0.1), (2, 0.15), (4, 0.6))]
    simulated = [point(r, t, lat50=1.05, lat95=2.3) for r, t in ((1, 0.1), (2, 0.135), (4, 0.3))]
    points, summary = compare_sweeps(measured, simulated, repeated=again, fit_summaries=["a", "b", "c"])
    assert points[1].engine_rel_diff["ttft_p95_s"] == pytest.approx(0.25)
    # TTFT p95 off by 12.5% where the engine's second run was off by 25%; latency p95 off by 15%, the engine 0%
    assert "ttft_p95_s" in points[1].within_engine_spread and "latency_p50_s" in points[1].within_engine_spread
    assert "latency_p95_s" not in points[1].within_engine_spread
    assert summary["max_below_knee_engine_rel_diff"] == pytest.approx(0.25)  # 4/s is past the knee: not counted
    assert [p.fit_summary for p in points] == ["a", "b", "c"]
    assert compare_sweeps(measured, simulated)[0][0].engine_rel_diff is None
    with pytest.raises(ConfigError, match="repeated engine runs"):
        compare_sweeps(measured, simulated, repeated=again[:2])


def test_pooled_replays_keep_the_rate_and_pool_the_percentiles() -> None:
    from servebench.serving.scenario import parse_scenario
    from servebench.serving.simulate import simulate
    from servebench.serving.sweep import point_from

    sc = parse_scenario({"seed": 1, "server": {"kv_budget_tokens": 4096},
                         "step_model": {"base_s": 0.002, "per_prefill_token_s": 1e-5, "noise_excess_s": [-0.001, 0.003]},
                         "workload": {"arrival": {"kind": "poisson", "rate_rps": 20}, "num_requests": 50,
                                      "classes": [{"prompt": {"kind": "uniform", "low": 16, "high": 64},
                                                   "output": {"kind": "uniform", "low": 4, "high": 16}}]}})
    sims = [simulate(sc, replica=k, token_times=False) for k in range(3)]
    both = pooled(sims)
    assert len(both.records) == 150 and len(set(both.records.request_id)) == 150
    ttft = np.concatenate([s.records.first_token - s.records.start for s in sims])
    np.testing.assert_allclose(np.sort(both.records.first_token - both.records.start), np.sort(ttft), atol=1e-9)
    one, three = (point_from(x, 20, "rate", SLO(), 0.95) for x in (sims[0], both))
    assert three.throughput_rps == pytest.approx(np.mean([point_from(s, 20, "rate", SLO(), 0.95).throughput_rps
                                                          for s in sims]), rel=0.05)
    assert three.offered == 150 and one.offered == 50
    # the replays share their arrivals: pooled, they offer one replay's rate (the gaps between replays counted, the
    # pooled span read 149 gaps over about three runs' span: a few % over it)
    assert three.offered_rps != pytest.approx(one.offered_rps, rel=1e-3)
    point = pooled_point(sims, 20, SLO(), 0.95)
    assert point.offered_rps == one.offered_rps and point.offered == 150
    assert point.attempted_rps == pytest.approx(one.offered_rps)  # no retries: every attempt a user request
    assert point.model_dump(exclude={"offered_rps", "attempted_rps"}) == \
        three.model_dump(exclude={"offered_rps", "attempted_rps"})


def test_reading_a_result_names_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"points": [{"rate_rps": 1}]}))
    with pytest.raises(InputFormatError, match="point 1: needs rate_rps, measured and simulated"):
        read_sweep_validation(bad)
    with pytest.raises(InputFormatError, match="no 'points' list"):
        sweep_validation_doc([], "y.json")
    with pytest.raises(InputFormatError, match="not a validate-sweep result"):
        read_sweep_validation(tmp_path / "missing")


def test_rates_are_checked_before_anything_runs(tmp_path: Path) -> None:
    scenario = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "tiny_cpu.yaml"
    res = runner.invoke(app, ["validate-sweep", str(scenario), "--rates", "10,x", "-o", str(tmp_path / "o")])
    assert res.exit_code != 0 and "'x' is not a number" in str(res.exception or res.output)
    res = runner.invoke(app, ["validate-sweep", str(scenario), "--rates", "10", "-o", str(tmp_path / "o")])
    assert res.exit_code != 0 and "at least two rates" in str(res.exception or res.output)


# --------------------------------------------------------------------------- end to end, on the engine

TINY_SWEEP = """
name: tiny_sweep
seed: 3
server: {policy: paged, kv_budget_tokens: 4096, max_num_seqs: 16, max_num_batched_tokens: 128, timeout_s: 10}
step_model: {base_s: 0.001}
workload:
  arrival: {kind: poisson, rate_rps: 20}
  num_requests: 30
  classes:
    - {name: chat, prompt: {kind: uniform, low: 16, high: 96}, output: {kind: uniform, low: 4, high: 12}}
"""


def test_validate_sweep_end_to_end(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(TINY_SWEEP)
    out = tmp_path / "vs"
    res = runner.invoke(app, ["validate-sweep", str(scenario), "--rates", "10,40", "--requests", "20", "-o", str(out),
                              "--device", "cpu", "--allow-poor-fit", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert {"points", "measured_knee_rps", "simulated_knee_rps", "knee_relative_error"} <= set(doc)
    assert [p["rate_rps"] for p in doc["points"]] == [10, 40]
    for p in doc["points"]:
        assert sum(p["measured_status"].values()) == 20 and sum(p["simulated_status"].values()) == 20
        for side in ("measured", "simulated"):
            assert set(p[side]) == {"ttft_p50_s", "ttft_p95_s", "latency_p50_s", "latency_p95_s", "throughput_rps",
                                    "queue_wait_p50_s", "queue_wait_p95_s"}
            assert p[side]["ttft_p95_s"] > 0
    assert doc["fit"]["steps"] > 0 and "R²" in doc["fit_summary"]
    assert doc["engine_repeats"] == 2 and doc["replicas"] == 8  # the CLI's defaults
    for p in doc["points"]:  # each rate served twice: the engine's own spread beside the simulated error
        assert set(p["engine_rel_diff"]) >= {"ttft_p95_s", "latency_p95_s"} and "R²" in p["fit_summary"]
    assert read_sweep_validation(out)["points"] == doc["points"]
    html = (out / "validate_sweep.html").read_text()
    assert "measured" in html and "simulated" in html and "plotly" in html.lower()
    assert (out / "rate_10" / "records.jsonl").is_file() and (out / "rate_40" / "steps.jsonl").is_file()
    measured_ttft = np.array([p["measured"]["ttft_p95_s"] for p in doc["points"]])
    assert np.all(np.isfinite(measured_ttft))


def test_compare_pools_the_simulated_replays() -> None:
    from servebench.serving.engine.validation import compare

    def table(ttfts: list[float]) -> object:
        rows = [{"request_id": f"r{i}", "start": float(i), "first_token": i + t, "end": i + t + 0.1,
                 "status": "success", "prompt_tokens": 10, "output_tokens": 5} for i, t in enumerate(ttfts)]
        return validate(parse_objects(rows, "t"), 0.0, 100.0)

    measured = table([0.2, 0.2, 0.2, 0.2])
    low, high = table([0.1, 0.1, 0.1, 0.1]), table([0.3, 0.3, 0.3, 0.3])
    ttft = {(c.metric, c.q): c for c in compare(measured, [low, high])}
    assert ttft[("ttft", 50)].simulated_s == pytest.approx(0.1)  # p50 of the 8 pooled values: the 4th
    assert ttft[("ttft", 95)].simulated_s == pytest.approx(0.3)
    assert compare(measured, low)[0].simulated_s == pytest.approx(0.1)  # one table: as before
