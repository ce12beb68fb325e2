"""The planner verifies replica counts by simulating the whole fleet (issue 35, section 3)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from servebench.analysis.summary import SLO
from servebench.capacity.model_presets import get_preset
from servebench.planning import PlanRequest, Workload, plan
from servebench.planning.planner import MAX_FLEET_REQUESTS, price
from servebench.serving.workload import ArrivalSpec, ClassSpec, LengthSpec


def bursty(cv: float) -> Workload:
    """Chat lengths (lognormal prompts and outputs) arriving in bursts: gamma gaps of coefficient of variation cv."""
    return Workload(classes=[ClassSpec(name="chat", prompt=LengthSpec(kind="lognormal", median=1000, sigma=1.0,
                                                                       max_tokens=16000),
                                       output=LengthSpec(kind="lognormal", median=200, sigma=0.8, max_tokens=2000))],
                    arrival=ArrivalSpec(kind="gamma", rate_rps=1.0, cv=cv))


def request(cv: float, router: str = "round_robin", **changes: object) -> PlanRequest:
    return PlanRequest(model=get_preset("llama-3.1-8b"), workload=bursty(cv), slo=SLO(ttft_s=1, tpot_s=0.05),
                       gpus=["H100"], tensor_parallel=[1], max_num_seqs=[64], router=router, **changes)


def test_bursts_need_more_replicas_than_division_says() -> None:
    """A replica's capacity search (300 requests) misses the bursts a fleet's 1,200 requests meet: 4 by division,
    5 needed; the cost follows the verified count."""
    evaluation, result = plan(request(2.0, headroom=0.1), 30)
    best = result.best
    assert best is not None and best.fleet_verified and best.router == "round_robin"
    assert (best.replicas_by_division, best.replicas, best.gpus_total) == (4, 5, 5)
    divided = price(evaluation, 30).best
    assert divided is not None and divided.replicas == 4 and not divided.fleet_verified
    assert best.cost_per_hour_usd == pytest.approx(divided.cost_per_hour_usd * 5 / 4)
    check = result.details[0].fleet
    assert check is not None and [t.replicas for t in check.tries] == [4, 5]
    assert not check.tries[0].meets_slo and check.tries[1].meets_slo and check.requests == 1500
    assert "4 replicas by division, 5 needed under bursts" in check.note
    assert "needs 5, where division says 4" in (result.reason or "")


@pytest.mark.parametrize("router", ["round_robin", "least_outstanding", "power_of_two", "session_affinity"])
@pytest.mark.parametrize(("cv", "rate"), [(3.0, 12.0), (2.0, 45.0), (4.0, 25.0)])
def test_the_verified_count_is_never_below_the_divided_count(router: str, cv: float, rate: float) -> None:
    _, result = plan(request(cv, router, headroom=0.0), rate)
    verified = [o for o in result.options if o.fleet_verified]
    assert verified, "the cheapest option meeting the SLOs is always verified"
    for o, d in zip(result.options, result.details):
        assert o.replicas_by_division is not None or not o.meets_slo
        if o.fleet_verified:
            assert d.fleet is not None and d.fleet.tries[0].replicas == o.replicas_by_division
            assert o.replicas is None or o.replicas >= o.replicas_by_division  # type: ignore[operator]
            assert d.fleet.requests <= MAX_FLEET_REQUESTS
        else:
            assert o.router is None and d.fleet is None


def test_without_the_fleet_check_the_plan_divides() -> None:
    evaluation, result = plan(request(2.0, headroom=0.1, verify_fleet=False), 30)
    assert result == price(evaluation, 30) and not any(o.fleet_verified for o in result.options)


def test_prefix_affinity_needs_prefix_caching() -> None:
    with pytest.raises(ValueError, match="prefix_affinity routes by the replicas' cached prefixes"):
        request(1.0, "prefix_affinity")


def test_plan_cli_router_and_fleet_keys(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("plan", "--model", "llama-3.1-8b", "--rate", "20", "--prompt-tokens", "1000", "--output-tokens", "200",
            "--slo-ttft", "2", "--slo-tpot", "0.05", "--gpus", "H100", "--tp", "1", "--max-num-seqs", "64")
    code, out, _ = run_cli(capsys, *args, "--router", "least_outstanding", "--json")
    assert code == 0
    doc = json.loads(out)
    best = doc["best"]
    assert best["router"] == "least_outstanding" and best["fleet_verified"] is True
    assert best["replicas"] >= best["replicas_by_division"] and doc["fleet"]["router"] == "least_outstanding"
    assert doc["fleet"]["most_requests_per_fleet"] == MAX_FLEET_REQUESTS
    code, out, _ = run_cli(capsys, *args)
    text = " ".join(out.split())  # rich wraps lines at the terminal's width
    assert code == 0 and "1 option(s) verified by simulating the whole fleet behind round_robin" in text
    code, _, err = run_cli(capsys, *args, "--router", "random")
    assert code == 2 and "--router 'random':" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, *args, "--router", "prefix_affinity")
    assert code == 2 and err.count("\n") <= 1 and "--router prefix_affinity" in err
