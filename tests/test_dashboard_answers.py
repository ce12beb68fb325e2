"""The one-sentence answers of the capacity pages (servebench.dashboard.answers): each says the number it stands on."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import SLO
from servebench.capacity import kv
from servebench.dashboard.answers import kv_answer, kv_load_answer, plan_answer, slo_text, sweep_answer
from servebench.formatting import fmt
from servebench.planning import Option, Plan
from servebench.serving.sweep import Capacity, SweepResult

SHAPE = kv.ModelShape(name="m", layers=32, kv_heads=8, head_dim=128)


@settings(max_examples=200, deadline=None)
@given(budget_mib=st.integers(1, 200_000), prompt=st.integers(0, 200_000), cap=st.integers(1, 32_000),
       policy=st.sampled_from(["reserve", "paged"]))
def test_kv_answer_names_the_limit_and_what_one_request_holds(budget_mib: int, prompt: int, cap: int,
                                                               policy: str) -> None:
    report = kv.analyze(SHAPE, budget_bytes=budget_mib * 2**20, prompt_tokens=prompt, output_cap=cap, policy=policy)
    text = kv_answer(report)
    fits = report.max_concurrent_sequences
    assert text.startswith("No request fits" if not fits else f"{fmt(fits)} sequence")
    assert f"holds {fmt(report.tokens_per_request)} tokens of KV" in text
    assert f"holds {fmt(report.budget_tokens)} tokens." in text
    assert "None" not in text and text.count(".") <= 4  # one sentence (decimals aside)


def test_kv_load_answer_needs_a_rate_and_a_limit() -> None:
    no_rate = kv.analyze(SHAPE, budget_bytes=8 * kv.GIB, prompt_tokens=7800, output_cap=200)
    assert kv_load_answer(no_rate) is None
    nothing_fits = kv.analyze(SHAPE, budget_bytes=kv.GIB // 2, prompt_tokens=7800, output_cap=200, rate_per_s=1.0,
                              time_in_service_s=7.0)
    assert kv_load_answer(nothing_fits) is None


def _option(replicas: int | None, cost: float | None) -> Option:
    return Option(gpu="L4", tensor_parallel=1, max_num_seqs=None if replicas is None else 64,
                  capacity_rps_per_replica=0.0 if replicas is None else 2.0, replicas=replicas,
                  gpus_total=replicas, meets_slo=replicas is not None, cost_per_hour_usd=cost,
                  cost_per_million_output_tokens_usd=None if cost is None else 0.5, limit="decode")


def test_plan_answer_reads_one_replica_in_the_singular_and_money_in_cents() -> None:
    one = _option(1, 0.7)
    assert plan_answer(Plan(rate_rps=1.5, options=[one], best=one, reason="", details=[])) == (
        "1 replica of L4 ×1, $0.70/h: 1 GPU serves 1.5 requests/s within the SLOs ($0.50 per million output tokens).")
    none = _option(None, None)
    assert plan_answer(Plan(rate_rps=1.5, options=[none], best=None, reason="", details=[])) == (
        "No configuration tried serves 1.5 requests/s within the SLOs.")


def _sweep(load: float | None, upper: float | None, knee: float | None) -> SweepResult:
    return SweepResult(scenario="s", mode="rate", seed=1, requests_per_point=100, slo=SLO(ttft_s=0.5),
                       slo_target=0.9, points=[], capacity=Capacity(load=load, upper=upper, evaluations=0, note=""),
                       knee_load=knee, kv_budget_tokens=None)


def test_sweep_answer_says_the_capacity_its_slos_and_the_knee_with_units() -> None:
    text = sweep_answer(_sweep(1.25, 1.5, 1.4))
    assert text.startswith("One server takes up to 1.2 req/s within the SLOs (90% of requests with TTFT at most "
                           "500 ms).")
    assert "Past 1.4 req/s latency climbs steeply" in text
    assert sweep_answer(_sweep(None, 0.25, None)).startswith("Not even the lowest load tried meets the SLOs")
    assert "try higher loads" in sweep_answer(_sweep(2.0, None, None))
    assert not re.search(r"\bNone\b", sweep_answer(_sweep(None, None, None)))


def test_slo_text_writes_ttft_and_tpot_in_ms_as_typed_and_latency_in_s() -> None:
    assert slo_text(SLO(ttft_s=2.0, tpot_s=0.05, latency_s=30.0), 0.95) == (
        "95% of requests with TTFT at most 2,000 ms and request TPOT at most 50 ms and latency at most 30 s")
    assert slo_text(SLO(ttft_s=0.00251, latency_s=0.5), 0.9) == (  # a latency limit under a second in ms too
        "90% of requests with TTFT at most 2.51 ms and latency at most 500 ms")
