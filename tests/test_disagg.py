"""Disaggregated prefill and decode (servebench.serving.disagg): transfers, conservation, TPOT and TTFT."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.capacity.kv import ModelShape, kv_bytes
from servebench.errors import ConfigError
from servebench.serving.disagg import (
    GB,
    simulate_deployment,
    simulate_disaggregated,
    transfer_s,
)
from servebench.serving.fleet import simulate_fleet
from servebench.serving.scenario import FleetSpec, Scenario, parse_scenario
from servebench.serving.workload import Workload, draw_workload

SHAPE = {"layers": 32, "kv_heads": 8, "head_dim": 128, "bytes_per_element": 2}  # 128 KiB a token
STEP = {"base_s": 0.01, "per_prefill_token_s": 0.0001, "per_decode_seq_s": 0.001, "per_kv_token_s": 0.000001}


def scenario(fleet: dict | None = None, **server: object) -> Scenario:
    """A server of 4 GiB of KV for a 128 KiB-a-token model, its steps linear in every term."""
    doc: dict = {"seed": 5, "server": {"model": SHAPE, "kv_budget_gib": 4, "max_num_seqs": 16, **server},
                 "step_model": dict(STEP),
                 "workload": {"arrival": {"kind": "poisson", "rate_rps": 10}, "num_requests": 200,
                              "classes": [{"prompt": {"kind": "uniform", "low": 100, "high": 3000},
                                           "output": {"kind": "uniform", "low": 2, "high": 100}}]}}
    if fleet is not None:
        doc["fleet"] = fleet
    return parse_scenario(doc)


def workload(arrival_s: list[float], prompt_tokens: list[int], output_tokens: list[int]) -> Workload:
    n = len(arrival_s)
    return Workload(arrival_s=np.array(arrival_s), prompt_tokens=np.array(prompt_tokens, dtype=np.int64),
                    output_tokens=np.array(output_tokens, dtype=np.int64),
                    max_output_tokens=np.array(output_tokens, dtype=np.int64), class_index=np.zeros(n, dtype=np.int64),
                    class_names=("default",), class_timeout_s=(None,))


def token_times(records, row: int) -> np.ndarray:
    return np.array(records.token_times[row].as_py())


PD = {"prefill_replicas": 1, "decode_replicas": 1, "kv_transfer_gbps": 10}


# ---------------------------------------------------------------------- the transfer and the first token
def test_transfer_time_is_the_kv_calculators_bytes_over_the_link() -> None:
    shape = ModelShape(**SHAPE)
    sc = scenario(PD)
    run = simulate_disaggregated(sc, workload=workload([0.0], [3000], [4]))
    expected = kv_bytes(shape, 3000) / (10 * GB)
    assert kv_bytes(shape, 3000) == 3000 * 131072  # 393,216,000 bytes: 39.3 ms at 10 GB/s
    assert run.kv_transfer_s[0] == expected == transfer_s(shape, 3000, 10)
    assert run.result.records.extra["kv_transfer_s"].to_pylist() == [expected]


def test_a_sliding_window_model_moves_only_its_windows_kv() -> None:
    shape = ModelShape(**SHAPE, sliding_window=1024, layer_pattern=["local", "global"])
    assert transfer_s(shape, 4096, 1) == kv_bytes(shape, 4096) / GB < 4096 * 131072 / GB


def test_ttft_is_prefill_plus_transfer_plus_the_first_decode_step() -> None:
    run = simulate_disaggregated(scenario(PD), workload=workload([0.0], [2000], [5])).result
    t = run.records
    prefill = STEP["base_s"] + STEP["per_prefill_token_s"] * 2000
    transfer = 2000 * 131072 / (10 * GB)
    first_step = STEP["base_s"] + STEP["per_decode_seq_s"] + STEP["per_kv_token_s"] * 2000
    assert t.first_token[0] - t.start[0] == pytest.approx(prefill + transfer + first_step, rel=1e-12)
    assert t.admitted[0] == t.start[0]  # admitted to the prefill instance at once
    assert t.output_tokens[0] == 5 and t.status[0] == 0


def test_decode_steps_carry_no_prefill_so_long_prompts_arriving_leave_tpot_alone() -> None:
    """Chats decode while 8,000-token documents arrive: colocated, a document's whole prefill stalls every
    stream for 0.8 s; disaggregated, each decode step takes base_s whoever joins."""
    step = {"base_s": 0.02, "per_prefill_token_s": 0.0001}
    doc = {"seed": 1, "server": {"model": SHAPE, "kv_budget_gib": 8, "chunked_prefill": False},
           "step_model": step, "workload": {"arrival": {"kind": "poisson", "rate_rps": 2}, "num_requests": 1}}
    base = parse_scenario(doc | {"workload": {**doc["workload"], "classes": [
        {"prompt": {"kind": "fixed", "value": 100}, "output": {"kind": "fixed", "value": 10}}]}})
    chats = [0.0, 0.1, 0.2]
    docs = [0.5, 1.5, 2.5]
    w = workload(chats + docs, [100] * 3 + [8000] * 3, [200] * 3 + [2] * 3)
    pd = simulate_disaggregated(base, FleetSpec(**PD), workload=w).result.records
    colocated = simulate_fleet(base, FleetSpec(replicas=2), workload=w).result.records
    for i in range(3):
        gaps = np.diff(token_times(pd, i))
        assert gaps.size == 199 and np.allclose(gaps, 0.02, rtol=0, atol=1e-12)
        assert np.diff(token_times(colocated, i)).max() > 0.8  # a document's prefill inside the step
    tpot = (pd.end[:3] - pd.first_token[:3]) / 199
    assert np.allclose(tpot, 0.02, rtol=0, atol=1e-12)


def test_decode_admission_holds_the_decode_instances_kv() -> None:
    """Reserve: a decode instance of 4 GiB (32,768 tokens) holds three requests of 10,000 prompt + 100 output."""
    w = workload([0.0] * 4, [10000] * 4, [100] * 4)
    run = simulate_disaggregated(scenario({**PD, "prefill_replicas": 2}), workload=w).result
    t = run.records
    assert list(t.status) == [0, 0, 0, 0]
    order = np.argsort(t.first_token, kind="stable")
    assert t.first_token[order[3]] > t.end[order[:3]].min()  # the fourth decodes only when one has left
    assert t.first_token[order[2]] < t.end[order[:3]].min()  # three decode at once


# ---------------------------------------------------------------------- every request prefilled once, decoded once
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prefill=st.integers(1, 3), decode=st.integers(1, 3), gbps=st.sampled_from([1e-6, 0.5, 5.0, 100.0]),
       router=st.sampled_from(["round_robin", "least_outstanding", "power_of_two"]),
       policy=st.sampled_from(["reserve", "paged"]), lane=st.sampled_from(["shared", "separate"]),
       budget=st.sampled_from([None, 512]), timeout=st.sampled_from([None, 0.5, 3.0]),
       cancel=st.booleans(), n=st.integers(1, 40), rate=st.sampled_from([5.0, 50.0]), seed=st.integers(0, 9))
def test_every_request_is_prefilled_once_and_decoded_once(prefill: int, decode: int, gbps: float, router: str,
                                                          policy: str, lane: str, budget: int | None,
                                                          timeout: float | None, cancel: bool, n: int, rate: float,
                                                          seed: int) -> None:
    server: dict = {"policy": policy, "prefill_lane": lane, "max_num_seqs": 4, "kv_budget_gib": 1}
    if budget is not None:
        server["max_num_batched_tokens"] = budget
    if timeout is not None:
        server["timeout_s"] = timeout
    sc = scenario({"prefill_replicas": prefill, "decode_replicas": decode, "kv_transfer_gbps": gbps,
                   "router": router}, **server)
    doc = sc.model_dump(exclude_none=True) | {"seed": seed}
    doc["workload"] |= {"num_requests": n, "arrival": {"kind": "poisson", "rate_rps": rate}}
    if cancel:
        doc["cancel"] = {"probability": 0.3, "after_s": 0.5}
    sc = parse_scenario(doc)
    run = simulate_disaggregated(sc)
    t = run.result.records
    assert len(t) == n and len(set(t.request_id)) == n  # each request ended once (a second end raises)
    assert (run.prefill_replica >= 0).all() and (run.prefill_replica < prefill).all()
    ok = t.is_success
    reached = run.decode_replica >= 0
    assert (reached[ok]).all() and (run.decode_replica < decode).all()
    assert not np.isnan(run.kv_transfer_s[reached]).any() and np.isnan(run.kv_transfer_s[~reached]).all()
    drawn = draw_workload(sc.workload, sc.rng(), sc.cancel).plan()
    assert np.array_equal(t.start, drawn.arrival_s)  # every record starts at its arrival, crossing or not
    assert np.isfinite(t.end).all() and (t.end >= t.start).all()
    assert (t.first_token[ok] - t.start[ok] >= run.kv_transfer_s[ok]).all()
    wanted = draw_workload(sc.workload, sc.rng(), sc.cancel).plan().output_tokens
    assert np.array_equal(t.output_tokens[ok], wanted[ok])  # a success generated every token, once
    prefill_traces, decode_traces = run.traces[:prefill], run.traces[prefill:]
    for tr in decode_traces:  # a decode instance never computes a prompt: it takes each in with one decode step
        assert (tr.lane == 0).all()
    if ok.all() and policy == "reserve":  # nothing lost or preempted: the work adds up exactly
        computed = sum(int((tr.prefill_tokens * tr.steps).sum()) for tr in prefill_traces)
        assert computed == int(t.prompt_tokens.sum())
        taken_in = sum(int(tr.prefill_tokens.sum()) for tr in decode_traces)
        assert taken_in == int(t.prompt_tokens.sum())
        decoded = sum(int((tr.decode_seqs * tr.steps).sum()) for tr in decode_traces)
        assert decoded == int((t.output_tokens - 1).sum())
        assert sum(int((tr.decode_seqs * tr.steps).sum()) for tr in prefill_traces) == 0


# ---------------------------------------------------------------------- the scenario's fleet key
@pytest.mark.parametrize("fleet, message", [
    ({"prefill_replicas": 2, "decode_replicas": 2}, "kv_transfer_gbps missing"),
    ({**PD, "replicas": 3}, "replicas 3 with prefill_replicas and decode_replicas"),
    ({**PD, "router": "session_affinity"}, "router session_affinity does not route a disaggregated fleet"),
    ({**PD, "kv_transfer_gbps": 0}, "greater than 0"),
])
def test_a_bad_disaggregated_fleet_is_one_line(fleet: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        scenario(fleet)
    text = str(err.value)
    assert message in text and "\n" not in text and text.startswith("scenario, field 'fleet")


def test_disaggregation_needs_the_model_shape_to_count_kv_bytes() -> None:
    doc = scenario().model_dump(exclude_none=True)
    doc["server"] = {"kv_budget_tokens": 20000}
    with pytest.raises(ConfigError, match="give server.model"):
        parse_scenario(doc | {"fleet": PD})


def _without_model(doc: dict) -> None:
    doc["server"] = {"kv_budget_tokens": 20000}


def _retrying(doc: dict) -> None:
    doc["client"] = {"max_attempts": 3}


def _closed_loop(doc: dict) -> None:
    doc["workload"].pop("arrival")
    doc["workload"]["closed_loop"] = {"users": 4}


@pytest.mark.parametrize("change, message", [
    (_without_model, ("kv_transfer_gbps moves each prompt's KV bytes: give server.model (and kv_budget_gib) so "
                      "the KV calculator can count them")),
    (_retrying, "retrying clients are not simulated with disaggregated prefill and decode; leave client.retries out"),
    (_closed_loop, ("requests that follow others' ends (closed_loop users, conversations) are not simulated with "
                    "disaggregated prefill and decode")),
])
def test_what_disaggregation_does_not_simulate_is_refused_naming_the_fleet_field(
        change: Callable[[dict], None], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = scenario().model_dump(mode="json", exclude_none=True) | {"fleet": PD}
    change(doc)
    path = tmp_path / "pd.json"
    path.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "simulate", str(path), "-o", str(tmp_path / "out"))
    assert code == 2 and out == ""
    assert err.strip() == f"error: {path}, field 'fleet': {message}"


def test_the_scenario_runs_as_its_fleet_says() -> None:
    pd = simulate_deployment(scenario(PD), token_times=False)
    assert {"prefill_replica", "decode_replica", "kv_transfer_s"} <= set(pd.records.extra)
    one = simulate_deployment(scenario(), token_times=False)
    assert "prefill_replica" not in one.records.extra


# ---------------------------------------------------------------------- the command line
def test_simulate_writes_the_disaggregated_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pd.json"
    doc = scenario(PD).model_dump(mode="json", exclude_none=True)
    doc["workload"]["num_requests"] = 30
    path.write_text(json.dumps(doc))
    code, _, err = run_cli(capsys, "simulate", str(path), "-o", str(tmp_path / "out"), "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 30 and all(r["prefill_replica"] == 0 and r["decode_replica"] == 0 for r in rows)
    alone = [transfer_s(ModelShape(**SHAPE), r["prompt_tokens"], 10) for r in rows]
    assert all(r["kv_transfer_s"] >= t * (1 - 1e-12) for r, t in zip(rows, alone))  # or later: the link was busy
    assert rows[0]["kv_transfer_s"] == alone[0]  # the first found the link free
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    section = summary["report"]["disaggregated"]
    assert section["transfers"] == 30 and section["prefill_requests"] == {"0": 30}
    code, out, err = run_cli(capsys, "summarize", str(tmp_path / "out"), "--json")
    assert code == 0 and json.loads(out)["disaggregated"] == section
    code, out, err = run_cli(capsys, "summarize", str(tmp_path / "out"), "--engine", "duckdb")
    assert code == 2 and "does not compute the report's 'disaggregated' section yet" in err and err.count("\n") == 1


def test_simulate_refuses_a_half_given_disaggregated_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "pd.json"
    doc = scenario().model_dump(mode="json", exclude_none=True) | {"fleet": {"prefill_replicas": 1}}
    path.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "simulate", str(path), "-o", str(tmp_path / "out"))
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and str(path) in line and "decode_replicas, kv_transfer_gbps missing" in line


def test_a_sweep_point_runs_the_disaggregated_fleet_and_the_replica_fleet_refuses_it() -> None:
    from servebench.analysis.summary import SLO
    from servebench.serving.sweep import evaluate
    sc = scenario(PD)
    _, sim = evaluate(sc, 5.0, "rate", SLO(ttft_s=1.0), 0.9, requests=40)
    assert len(sim.records) == 40 and "decode_replica" in sim.records.extra
    with pytest.raises(ConfigError, match="prefill and decode instances runs in servebench.serving.disagg"):
        simulate_fleet(sc)


def test_the_report_counts_each_instance_and_the_transfers() -> None:
    from servebench.analysis.summary import build_report
    sc = scenario({"prefill_replicas": 2, "decode_replicas": 3, "kv_transfer_gbps": 10, "router": "round_robin"})
    run = simulate_disaggregated(sc, token_times=False)
    t = run.result.records
    pd = build_report(t, 0.0, float(t.end.max())).disaggregated
    assert pd is not None and sum(pd.prefill_requests.values()) == len(t) == 200
    assert pd.prefill_requests == {"0": 100, "1": 100} and pd.prefill_load_imbalance == 1.0  # round robin
    reached = run.decode_replica >= 0
    assert sum(pd.decode_requests.values()) == int(reached.sum()) and len(pd.decode_requests) == 3
    moved = run.kv_transfer_s[~np.isnan(run.kv_transfer_s)]
    assert pd.transfers == moved.size and pd.kv_transfer_max_s == moved.max()
    assert pd.kv_transfer_p50_s <= pd.kv_transfer_p95_s <= pd.kv_transfer_max_s
    one = simulate_deployment(scenario(), token_times=False).records
    report = build_report(one, 0.0, float(one.end.max()))
    assert report.disaggregated is None and "disaggregated" not in report.model_dump()


def test_a_request_no_decode_instance_can_hold_is_prefilled_then_rejected_when_its_kv_arrives() -> None:
    """Reserve, 32,768 tokens a decode instance: 30,000 prompt tokens fit to prefill, not with 5,000 output."""
    run = simulate_disaggregated(scenario(PD), workload=workload([0.0], [30000], [5000]))
    t = run.result.records
    assert t.status[0] == 4 and t.error[0] == "kv_exceeds_budget"  # rejected
    assert run.decode_replica[0] == 0 and t.end[0] > run.kv_transfer_s[0] > 0  # on arrival there, after prefill and transfer


def test_a_deadline_during_the_transfer_is_a_valid_timeout_record_and_the_run_summarizes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A link of 1 byte/s: every prompt's KV takes days, so each request times out while it crosses."""
    path = tmp_path / "pd.json"
    doc = scenario(PD | {"kv_transfer_gbps": 0.000000001}, timeout_s=5).model_dump(mode="json", exclude_none=True)
    doc["workload"]["num_requests"] = 20
    path.write_text(json.dumps(doc))
    code, out, err = run_cli(capsys, "simulate", str(path), "-o", str(tmp_path / "out"))
    assert code == 0, err
    assert "no request reached a decode instance; 0 KV transfers" in " ".join(out.split())
    rows = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert len(rows) == 20 and all(r["status"] == "timeout" and r.get("decode_replica") is None for r in rows)
    arrivals = draw_workload(scenario().workload, np.random.default_rng(5)).plan().arrival_s[:20]
    assert [r["start"] for r in rows] == pytest.approx(arrivals.tolist())
    assert all(r["end"] == pytest.approx(r["start"] + 5) for r in rows)  # at the deadline
    assert all(r.get("kv_transfer_s") is None for r in rows)  # no KV arrived
    code, out, err = run_cli(capsys, "summarize", str(tmp_path / "out"), "--json")
    assert code == 0, err
    assert json.loads(out)["disaggregated"]["transfers"] == 0
