"""servebench plan --disaggregated: prefill and decode instances in the search (servebench.planning.disaggregated)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli

from servebench.planning.disaggregated import splits

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
    chosen = (o["prefill_replicas"], o["decode_replicas"])
    met = [t for t in o["tries"] if t["meets_slo"]]
    assert chosen in [(t["prefill_replicas"], t["decode_replicas"]) for t in met]
    n = sum(chosen)
    if n > 2:  # one instance fewer was tried and no split of it met the SLOs
        fewer = [t for t in o["tries"] if t["prefill_replicas"] + t["decode_replicas"] == n - 1]
        assert fewer and not any(t["meets_slo"] for t in fewer)
    assert all(t["prefill_replicas"] + t["decode_replicas"] >= n for t in met)
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


def test_splits_start_at_the_prefill_share_and_stay_inside() -> None:
    for n in range(2, 12):
        for share in (0.0, 0.3, 0.5, 0.97, 1.0):
            got = splits(n, share)
            assert got and all(1 <= p <= n - 1 for p in got) and len(set(got)) == len(got)
            assert abs(got[0] - n * share) <= max(abs(p - n * share) for p in got)
