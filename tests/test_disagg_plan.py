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
