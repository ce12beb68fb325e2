"""The KV calculator's and the planner's Vega-Lite charts: the concurrency limit on a log axis, cost against traffic."""

from __future__ import annotations

import math

import pytest
from vega_charts import valid

from servebench.analysis.summary import SLO
from servebench.capacity import kv
from servebench.capacity.model_presets import get_preset
from servebench.output.figures.planner import cost_curves
from servebench.output.figures.summary import concurrency_by_prompt
from servebench.output.figures.vegalite_capacity import concurrency_chart, cost_chart
from servebench.planning import PlanRequest, Workload, cost_curve, evaluate_configurations, price

pytest.importorskip("altair")  # its Vega-Lite schema checks the specs (vega_charts.valid)

PROFILE_B = kv.ModelShape(layers=32, kv_heads=8, head_dim=128)


def test_concurrency_chart_marks_profile_b_at_8_on_a_log_axis_and_never_rises() -> None:
    curve = concurrency_by_prompt(PROFILE_B, 8 * kv.GIB, 7800, 200)
    assert curve.here == 8 == kv.analyze(PROFILE_B, budget_bytes=8 * kv.GIB, prompt_tokens=7800,
                                         output_cap=200).max_concurrent_sequences
    assert curve.counts == kv.concurrency_curve(PROFILE_B, 8 * kv.GIB, curve.prompts, 200)
    assert curve.prompts[0] == 0 and curve.counts[0] == 65536 // 200  # an empty prompt still reserves the cap
    assert all(a >= b for a, b in zip(curve.counts, curve.counts[1:]))
    spec = valid(concurrency_chart(curve))
    line = concurrency_chart(curve)["datasets"]["curve"]
    assert line["x"].tolist() == curve.prompts and line["y"].tolist() == curve.counts
    y = spec["layer"][0]["encoding"]["y"]
    assert y["scale"]["type"] == "log" and y["axis"]["values"] == curve.ticks
    assert curve.ticks[:4] == [1, 2, 5, 10] and curve.ticks[-1] <= 2 * max(curve.counts)
    assert spec["layer"][0]["mark"]["interpolate"] == "step-after" and "tooltip" not in spec["layer"][0]["encoding"]
    assert spec["datasets"]["here"] == [{"x": 7800, "y": 8, "label": "8 at 7,800 tokens"}]
    assert spec["title"]["text"] == "Max concurrent sequences against prompt length (output cap 200, reserve)"


def test_a_prompt_that_no_sequence_fits_is_left_off_the_log_axis_and_named() -> None:
    curve = concurrency_by_prompt(PROFILE_B, kv.GIB, 2000, 200)  # 8,192 tokens: 3 requests of 2,200
    assert curve.here == 3 and curve.counts[-1] == 0  # a prompt of 8,000 and its cap of 200 do not fit
    spec = concurrency_chart(curve)
    line = spec["datasets"]["curve"]
    assert (line["y"] > 0).all() and len(line) == sum(n > 0 for n in curve.counts)  # no log of 0
    first = next(p for p, n in zip(curve.prompts, curve.counts) if n == 0)
    assert spec["title"]["subtitle"] == [f"not one sequence fits from {first:,} prompt tokens"]


@pytest.fixture(scope="module")
def evaluation():
    request = PlanRequest(model=get_preset("llama-3.1-8b"), workload=Workload.fixed(1000, 100),
                          slo=SLO(ttft_s=1.0, tpot_s=0.05), gpus=["H100", "A100-80GB"], tensor_parallel=[1],
                          max_num_seqs=[64], requests_per_simulation=120)
    return evaluate_configurations(request)


def test_cost_chart_draws_each_gpus_cheapest_cost_and_the_plans_cheapest(evaluation) -> None:
    rates = [2.0, 5.0, 10.0, 20.0]
    curves = cost_curves(evaluation, rates, 10.0)
    assert list(curves.by_gpu) == ["A100-80GB", "H100"]
    for i, rate in enumerate(rates):
        plan = price(evaluation, rate)
        for gpu, costs in curves.by_gpu.items():
            meeting = [o.cost_per_hour_usd for o in plan.options if o.gpu == gpu and o.meets_slo]
            assert costs[i] == (min(meeting) if meeting else None)
        assert curves.cheapest[i] == min(c[i] for c in curves.by_gpu.values() if c[i] is not None)
    assert curves.cheapest == [c["cost_per_hour_usd"] for c in cost_curve(evaluation, rates)]  # the CLI's numbers
    spec = valid(cost_chart(curves))
    frame = cost_chart(curves)["datasets"]["lines"]
    for name, values in (*curves.by_gpu.items(), ("cheapest", curves.cheapest)):
        got = frame[frame["series"] == name].sort_values("x")
        assert got["x"].tolist() == rates
        assert [None if math.isnan(v) else v for v in got["y"]] == values
    widths = spec["layer"][0]["encoding"]["strokeWidth"]["scale"]
    assert dict(zip(widths["domain"], widths["range"]))["cheapest"] == 4
    planned = [layer for layer in spec["layer"] if layer["mark"]["type"] == "text"]
    assert [(p["data"]["values"][0]["x"], p["data"]["values"][0]["label"]) for p in planned] == [(10.0,
                                                                                                 "planned traffic")]
    # a point at the last traffic level sat on the plot's edge, cut in half (a zoom clips marks to the plot): the
    # scales of the lines and their points keep room for a point's radius at each end
    for layer in spec["layer"][:2]:
        assert layer["encoding"]["x"]["scale"]["padding"] >= 4 and layer["encoding"]["y"]["scale"]["padding"] >= 4
