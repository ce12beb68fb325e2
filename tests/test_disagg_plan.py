"""servebench plan --disaggregated: prefill and decode instances in the search (servebench.planning.disaggregated)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

# a prompt-heavy load with a tight TPOT: prompt chunks in colocated steps break it, decode instances do not
ARGS = ("plan", "--model", "llama-3.1-8b", "--rate", "30", "--prompt-tokens", "3000", "--output-tokens", "200",
        "--slo-ttft", "1", "--slo-tpot", "0.025", "--gpus", "H100", "--tp", "1", "--max-num-seqs", "64",
        "--requests", "100")


def test_plan_finds_the_fewest_disaggregated_instances_and_says_against_colocated(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *ARGS, "--disaggregated", "--json")
    assert code == 0, err
    doc = json.loads(out)
    dis = doc["disaggregated"]
    assert dis["kv_transfer_gbps"] == 50 and len(dis["options"]) == 1
    o = dis["options"][0]
    assert o["meets_slo"] and o["gpus_total"] == o["prefill_replicas"] + o["decode_replicas"]
    p, d = o["prefill_replicas"], o["decode_replicas"]
    tried = {(t["prefill_replicas"], t["decode_replicas"]): t["meets_slo"] for t in o["tries"]}
    assert tried[(p, d)]  # the answer was simulated and met the SLOs
    top = max(t["decode_replicas"] for t in o["tries"])
    assert tried[(top, top)]  # as many of each kind as the start met them
    if p > 1:  # one prefill instance fewer, with every decode instance, missed them
        assert tried[(p - 1, top)] is False
    if d > 1:  # one decode instance fewer, with the fewest prefill instances, missed them
        assert tried[(p, d - 1)] is False
    n = p + d
    colocated = doc["best"]
    assert o["colocated_gpus"] == colocated["gpus_total"]
    assert o["cost_per_hour_usd"] == pytest.approx(colocated["cost_per_hour_usd"] / colocated["gpus_total"] * n)
    assert dis["best"] == o


def test_plan_prints_the_disaggregated_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *ARGS, "--disaggregated", "--kv-transfer-gbps", "25", "--no-fleet-check")
    assert code == 0, err
    assert "Disaggregated prefill and decode (25 GB/s links)" in out and "disaggregated:" in out


def test_a_bad_link_speed_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *ARGS, "--disaggregated", "--kv-transfer-gbps", "0")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--kv-transfer-gbps 0" in err


def test_plan_past_256_replicas_keeps_each_configuration_unsimulated_with_a_note(
        capsys: pytest.CaptureFixture[str]) -> None:
    """10,000 req/s: the colocated option needs more replicas than a simulation holds, so P/D starts past 256."""
    args = [a if a != "30" else "10000" for a in ARGS]
    code, out, err = run_cli(capsys, *args, "--disaggregated", "--no-fleet-check", "--json")
    assert code == 0, err
    options = json.loads(out)["disaggregated"]["options"]
    assert options and all(o["tries"] == [] and not o["meets_slo"] and "256" in o["note"] for o in options)


def test_plan_refuses_a_router_disaggregated_fleets_do_not_have(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *ARGS, "--disaggregated", "--router", "session_affinity")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "--router session_affinity" in err and "round_robin, least_outstanding, power_of_two" in err


def test_plan_notes_a_scenarios_disaggregated_fleet_it_does_not_search(
        tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = {"server": {"model": {"layers": 32, "kv_heads": 8, "head_dim": 128}, "kv_budget_gib": 4},
                "step_model": {"base_s": 0.01}, "workload": {
                    "arrival": {"kind": "poisson", "rate_rps": 10}, "num_requests": 50,
                    "classes": [{"prompt": {"kind": "fixed", "value": 500}, "output": {"kind": "fixed", "value": 50}}]},
                "fleet": {"prefill_replicas": 1, "decode_replicas": 1, "kv_transfer_gbps": 10}}
    path = tmp_path / "pd.json"
    path.write_text(json.dumps(scenario))
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--scenario", str(path), "--rate", "5",
                             "--slo-ttft", "2", "--gpus", "H100", "--tp", "1", "--max-num-seqs", "64",
                             "--requests", "50", "--no-fleet-check", "--json")
    assert code == 0, err
    assert "fleet is disaggregated" in err and "--disaggregated" in err and err.count("\n") == 1
    assert "disaggregated" not in json.loads(out)
