"""Load-limit diagnosis: the spec's A/B profiles, record sets (hand-made and simulated) for every limit."""

from __future__ import annotations

import heapq
import json
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from servebench.analysis.diagnosis import (
    PRECEDENCE,
    ProfileMeasurements,
    ProfileTable,
    Thresholds,
    diagnose,
    diagnose_records,
    diagnose_table,
    measure,
    tpot_by_load,
)
from servebench.analysis.percentiles import percentile
from servebench.capacity.kv import GIB, ModelShape
from servebench.cli.core import app
from servebench.errors import ConfigError
from servebench.records.loaders import read_bytes, to_table
from servebench.records.table import RecordTable

AB = Path(__file__).resolve().parent.parent / "sample_data" / "profiles_ab.json"
SPEC = ModelShape(layers=32, kv_heads=8, head_dim=128)
runner = CliRunner()


def ab() -> ProfileTable:
    return ProfileTable.model_validate_json(AB.read_text())


# --------------------------------------------------------------------------- the spec's A and B


def test_ab_table_holds_the_spec_numbers() -> None:
    t = ab()
    a, b = t.profiles
    assert (t.model.layers, t.model.kv_heads, t.model.head_dim, t.model.bytes_per_element) == (32, 8, 128, 2)
    assert (t.kv_budget_gib, t.policy) == (8, "reserve")
    assert (a.prompt_tokens, a.requests, a.timeouts, a.queue_wait_p50_s, a.queue_wait_p95_s) == (1000, 300, 0, 0.0, 0.02)
    assert (a.prefill_p50_s, a.prefill_p95_s, a.ttft_p95_s, a.tpot_p50_s, a.peak_active) == (0.15, 0.25, 0.26, 0.030, 13)
    assert a.share_at_peak_is_upper_bound and a.share_at_peak == 0.01
    assert (b.prompt_tokens, b.requests, b.timeouts, b.queue_wait_p50_s, b.queue_wait_p95_s) == (7800, 300, 3, 2.4, 8.7)
    assert (b.prefill_p50_s, b.prefill_p95_s, b.ttft_p95_s, b.tpot_p50_s, b.peak_active) == (1.2, 1.9, 10.3, 0.031, 8)
    assert b.share_at_peak == 0.72
    for p in (a, b):
        assert (p.arrival_rate_per_s, p.output_tokens, p.output_cap, p.deadline_s, p.duration_s) == (1, 200, 200, 20, 300)


def test_ab_verdicts_with_every_number() -> None:
    a, b = diagnose_table(ab())
    for v in (a, b):
        assert v.bytes_per_token == 131_072 and v.budget_tokens == 65_536
    assert (a.tokens_per_request, a.max_concurrent_sequences) == (1200, 54)
    assert (b.tokens_per_request, b.max_concurrent_sequences) == (8000, 8)
    assert a.time_in_service_s == pytest.approx(0.15 + 199 * 0.030) and a.in_service == pytest.approx(6.12)
    assert b.time_in_service_s == pytest.approx(1.2 + 199 * 0.031) and b.in_service == pytest.approx(7.369)
    assert round(b.in_service, 2) == 7.37
    assert a.utilization == pytest.approx(6.12 / 54) and b.utilization == pytest.approx(7.369 / 8)
    assert a.limit == "none" and b.limit == "kv_memory"
    assert b.queue_share_of_ttft == pytest.approx(8.7 / 10.3)
    assert b.prefill_share_of_ttft == pytest.approx(1.9 / 10.3)
    assert b.prefill_share_of_service == pytest.approx(1.2 / 7.369)
    assert b.tpot_growth == pytest.approx(0.031 / 0.030)
    ev = {e.measurement: e for e in b.evidence}
    assert ev["peak_active / max_concurrent_sequences"].value == 1.0 and ev["peak_active / max_concurrent_sequences"].crossed
    assert ev["share_at_peak"].value == 0.72 and ev["share_at_peak"].threshold == 0.25 and ev["share_at_peak"].crossed
    assert ev["queue_share_of_ttft"].crossed and "8.7 s of TTFT p95 10.3 s" in ev["queue_share_of_ttft"].note
    assert ev["tpot_growth"].rule == "<" and ev["tpot_growth"].crossed  # TPOT unchanged
    assert all(e.crossed for e in b.evidence)
    assert "1.2 s p50" in b.prefill and "not the limit" in b.prefill and "6.17" in b.prefill
    assert "16 sequences" in b.experiment.action and "stays at 8" in b.experiment.refute
    assert "8.82/s" in a.experiment.action  # 54 / 6.12
    assert "Nothing limits" in a.summary and "under 1%" in {e.measurement: e for e in a.evidence}["share_at_peak"].note


def test_cli_diagnose_profile_table_json() -> None:
    res = runner.invoke(app, ["diagnose", str(AB), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["input"] == "profile table"
    a, b = out["profiles"]["A"], out["profiles"]["B"]
    for v in (a, b):
        assert {"limit", "evidence", "in_service", "max_concurrent_sequences", "experiment"} <= set(v)
    assert (a["limit"], a["max_concurrent_sequences"]) == ("none", 54)
    assert (b["limit"], b["max_concurrent_sequences"]) == ("kv_memory", 8)
    assert b["in_service"] == pytest.approx(7.369) and a["in_service"] == pytest.approx(6.12)
    assert set(b["experiment"]) == {"action", "confirm", "refute"}
    human = runner.invoke(app, ["diagnose", str(AB)])
    assert human.exit_code == 0 and "limit = kv_memory" in human.output


def test_cli_diagnose_prints_profile_names_verbatim(tmp_path: Path) -> None:
    doc = json.loads(AB.read_text())
    doc["profiles"][0]["name"], doc["profiles"][1]["name"] = "A[/]x", "[red]B"  # markup is text here
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(doc))
    res = runner.invoke(app, ["diagnose", str(path)])
    assert res.exit_code == 0, res.output
    assert "A[/]x: limit = none" in res.output and "[red]B: limit = kv_memory" in res.output


def test_cli_overrides_change_the_limit() -> None:
    res = runner.invoke(app, ["diagnose", str(AB), "--budget-gib", "16", "--json"])
    b = json.loads(res.output)["profiles"]["B"]
    assert b["max_concurrent_sequences"] == 16
    assert b["limit"] == "queueing"  # peak 8 is now below the limit: something else caps it


# --------------------------------------------------------------------------- hand-made records


def fifo(arrivals: list[float], *, cap: int, prefill_s: float, tpot_s: float | list[float], n_out: int,
         prompt: int) -> list[dict]:
    """Return records of a first-come server holding at most ``cap`` requests in service."""
    free = [0.0] * cap
    recs = []
    for i, a in enumerate(arrivals):
        adm = max(a, heapq.heappop(free))
        tp = tpot_s[i] if isinstance(tpot_s, list) else tpot_s
        ft = adm + prefill_s
        end = ft + (n_out - 1) * tp
        heapq.heappush(free, end)
        recs.append({"request_id": f"r{i}", "start": a, "admitted": adm, "first_token": ft, "end": end,
                     "status": "success", "prompt_tokens": prompt, "output_tokens": n_out})
    return recs


def as_table(recs: list[dict]) -> tuple[RecordTable, float, float]:
    return to_table(read_bytes(json.dumps(recs).encode(), "hand.json"))


def run(recs: list[dict], budget_gib: float = 8, **kw) -> object:
    t, ws, we = as_table(recs)
    return diagnose_records(t, ws, we, shape=SPEC, budget_bytes=int(budget_gib * GIB), **kw)


def test_records_kv_memory() -> None:
    # 7,800 + 200 tokens per request in 8 GiB: 8 sequences; the server admits up to that limit.
    recs = fifo([i * 0.8 for i in range(150)], cap=8, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    v = run(recs)
    assert v.max_concurrent_sequences == 8 and v.measurements.peak_active == 8
    assert v.measurements.share_at_peak > 0.5
    assert v.limit == "kv_memory", v.summary


def test_records_queueing_below_the_kv_limit() -> None:
    recs = fifo([i / 0.6 for i in range(100)], cap=4, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    v = run(recs)
    assert v.max_concurrent_sequences == 8 and v.measurements.peak_active == 4
    assert v.limit == "queueing", v.summary
    assert "above 4" in v.experiment.action


def test_records_queueing_without_a_kv_shape() -> None:
    recs = fifo([i / 0.6 for i in range(100)], cap=4, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    t, ws, we = as_table(recs)
    v = diagnose_records(t, ws, we)
    assert v.max_concurrent_sequences is None and v.bytes_per_token is None
    assert v.limit == "queueing"


def test_records_prefill() -> None:
    recs = fifo([i * 2.0 for i in range(60)], cap=1000, prefill_s=3.0, tpot_s=0.02, n_out=20, prompt=1000)
    v = run(recs)
    assert v.measurements.queue_wait_p95_s == 0.0
    assert v.limit == "prefill", v.summary
    assert v.prefill_share_of_ttft == pytest.approx(1.0)


def test_records_decode() -> None:
    # 60 lone requests decode at 20 ms per token; then 120 arrive twice a second and decode at 80 ms.
    arrivals = [i * 2.0 for i in range(60)] + [120 + i * 0.5 for i in range(120)]
    tpots = [0.02] * 60 + [0.08] * 120
    recs = fifo(arrivals, cap=1000, prefill_s=0.1, tpot_s=tpots, n_out=50, prompt=1000)
    t, ws, we = as_table(recs)
    low, high = tpot_by_load(t)
    assert (low, high) == (pytest.approx(0.02), pytest.approx(0.08))
    v = run(recs)
    assert v.tpot_growth == pytest.approx(4.0)
    assert v.limit == "decode", v.summary


def test_records_none() -> None:
    recs = fifo([float(i) for i in range(100)], cap=1000, prefill_s=0.1, tpot_s=0.02, n_out=20, prompt=1000)
    v = run(recs)
    assert v.limit == "none"
    assert v.max_concurrent_sequences == 64  # 65,536 // (1,000 + 20)
    assert v.in_service == pytest.approx(1.0 * (0.1 + 19 * 0.02))
    assert v.measurements.mean_in_service == pytest.approx(0.48, rel=0.02)  # Little's law holds


def test_measure_reuses_the_report_percentiles() -> None:
    recs = fifo([i * 0.8 for i in range(150)], cap=8, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    t, ws, we = as_table(recs)
    m = measure(t, ws, we, name="kv")
    qw = t.admitted - t.start
    assert m.queue_wait_p95_s == percentile(qw, 95) and m.queue_wait_p50_s == percentile(qw, 50)
    assert m.ttft_p95_s == percentile(t.first_token - t.start, 95)
    assert m.arrival_rate_per_s == pytest.approx(1 / 0.8)
    assert (m.requests, m.output_tokens, m.output_cap, m.prompt_tokens) == (150, 200, 200, 7800)


def test_measure_needs_admitted_times() -> None:
    recs = [{k: v for k, v in r.items() if k != "admitted"}
            for r in fifo([0.0, 1.0], cap=1, prefill_s=0.1, tpot_s=0.01, n_out=5, prompt=10)]
    t, ws, we = as_table(recs)
    with pytest.raises(ConfigError, match="no 'admitted' times"):
        measure(t, ws, we)


def test_timeouts_count_and_stay_in_the_verdict() -> None:
    recs = fifo([i * 0.8 for i in range(150)], cap=8, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    recs += [{"start": 100.0 + i, "end": 120.0 + i, "status": "timeout"} for i in range(3)]
    v = run(recs)
    assert v.measurements.timeouts == 3 and v.measurements.requests == 153
    assert v.limit == "kv_memory"
    assert any(e.measurement == "timeouts" and e.crossed for e in v.evidence)


def test_cli_diagnose_records(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    recs = fifo([i * 0.8 for i in range(150)], cap=8, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    res = runner.invoke(app, ["diagnose", str(path), "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                              "--budget-gib", "8", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["input"] == "records"
    v = out["profiles"]["b.jsonl"]
    assert (v["limit"], v["max_concurrent_sequences"]) == ("kv_memory", 8)


def test_thresholds_and_unknowns() -> None:
    m = ProfileMeasurements(name="x", requests=10, arrival_rate_per_s=1, output_tokens=10, ttft_p95_s=3.0,
                            queue_wait_p95_s=0.1, prefill_p95_s=2.9)
    assert diagnose(m).limit == "prefill"
    assert diagnose(m, thresholds=Thresholds(ttft_objective_s=5)).limit == "none"
    v = diagnose(m)
    assert v.in_service is None and v.max_concurrent_sequences is None and v.utilization is None
    with pytest.raises(ValueError, match="unique"):
        ProfileTable(profiles=[m, m])
    with pytest.raises(ConfigError, match="'x': a KV budget needs the model shape"):
        diagnose(m, budget_bytes=8 * GIB)  # silently dropping the budget would hide the KV limit


# --------------------------------------------------------------------------- simulator records


def test_simulated_profiles_a_and_b() -> None:
    """The simulator's spec scenarios, diagnosed from their records, give the spec's verdicts."""
    from servebench.serving.scenario import load_scenario
    from servebench.serving.simulate import simulate

    scenarios = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios"
    verdicts = {}
    for name in ("profile_a", "profile_b"):
        r = simulate(load_scenario(scenarios / f"{name}.yaml"))
        verdicts[name] = diagnose_records(r.records, r.window_start_s, r.window_end_s, shape=SPEC,
                                          budget_bytes=8 * GIB, output_cap=200, name=name)
    a, b = verdicts["profile_a"], verdicts["profile_b"]
    assert (a.limit, a.max_concurrent_sequences) == ("none", 54)
    assert (b.limit, b.max_concurrent_sequences) == ("kv_memory", 8)
    assert b.measurements.peak_active == 8 and b.measurements.share_at_peak > 0.5
    assert b.measurements.tpot_p50_s == pytest.approx(0.031, abs=1e-3)
    assert a.time_in_service_s == pytest.approx(6.12, abs=0.05) and b.time_in_service_s == pytest.approx(7.37, abs=0.05)
    for v in (a, b):  # the Poisson draw's own rate, so in service is near, not at, the spec's 6.12 and 7.37
        assert v.in_service == pytest.approx(v.measurements.arrival_rate_per_s * v.time_in_service_s)
        assert 0.85 < v.measurements.arrival_rate_per_s < 1.15


def simulated(name: str, seed: int | None = None, **server: object) -> object:
    """Diagnose a shipped scenario's simulated records, with server limits changed."""
    from servebench.serving.scenario import load_scenario
    from servebench.serving.simulate import simulate

    sc = load_scenario(Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / f"{name}.yaml")
    sc = sc.model_copy(update={"server": sc.server.model_copy(update=server)})
    r = simulate(sc, rng=None if seed is None else np.random.default_rng(seed))
    return diagnose_records(r.records, r.window_start_s, r.window_end_s, shape=SPEC, budget_bytes=8 * GIB,
                            output_cap=200)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_simulated_profile_b_is_kv_memory_at_other_seeds(seed: int) -> None:
    v = simulated("profile_b", seed)
    assert v.limit == "kv_memory", v.summary
    assert v.max_concurrent_sequences == 8 and v.measurements.peak_active == 8


def test_simulated_cap_below_the_kv_limit_is_queueing() -> None:
    v = simulated("profile_b", max_num_seqs=6)
    assert (v.limit, v.max_concurrent_sequences, v.measurements.peak_active) == ("queueing", 8, 6)
    assert "above 6" in v.experiment.action


def test_simulated_rejections_are_a_symptom() -> None:
    # A behind 3 slots and a 1-place queue: about half the arrivals are turned away. Even with a TTFT
    # objective nothing crosses, the rejections alone make it a queueing limit, not 'none'.
    from servebench.serving.scenario import load_scenario
    from servebench.serving.simulate import simulate

    sc = load_scenario(Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "profile_a.yaml")
    r = simulate(sc.model_copy(update={"server": sc.server.model_copy(update={"max_num_seqs": 3, "max_waiting": 1})}))
    v = diagnose_records(r.records, r.window_start_s, r.window_end_s, shape=SPEC, budget_bytes=8 * GIB,
                         output_cap=200, thresholds=Thresholds(ttft_objective_s=60))
    assert v.measurements.rejected == r.status_counts()["rejected"] > 100
    assert v.limit == "queueing", v.summary
    assert any(e.measurement == "rejected" and e.crossed for e in v.evidence)
    assert f"{v.measurements.rejected} of 300 requests were rejected" in v.summary


def _synthetic(step: dict, lane: str, rate: float, prompt: int, output: int) -> object:
    from servebench.serving.scenario import parse_scenario
    from servebench.serving.simulate import simulate

    sc = parse_scenario({
        "name": "synthetic", "seed": 1,
        "server": {"model": SPEC.model_dump(exclude_none=True), "kv_budget_gib": 8, "timeout_s": 60,
                   "prefill_lane": lane},
        "step_model": step,
        "workload": {"arrival": {"kind": "poisson", "rate_rps": rate}, "num_requests": 300,
                     "classes": [{"prompt": {"value": prompt}, "output": {"value": output}}]}})
    r = simulate(sc)
    return diagnose_records(r.records, r.window_start_s, r.window_end_s, shape=SPEC, budget_bytes=8 * GIB)


def test_simulated_decode_limit() -> None:
    # every decoding sequence adds 4 ms to each step: TPOT grows several-fold as the batch fills
    v = _synthetic({"base_s": 0.01, "per_decode_seq_s": 0.004, "per_prefill_token_s": 1e-5}, "shared", 2.0, 500, 200)
    assert v.limit == "decode", v.summary
    assert v.tpot_growth is not None and v.tpot_growth > 2


def test_simulated_prefill_limit() -> None:
    # 3 s prefills of 4,000-token prompts at 0.5/s: no queue, TTFT is all prefill
    v = _synthetic({"flat": {"prefill_s": 3.0, "prompt_tokens": 4000, "tpot_s": 0.02}}, "separate", 0.5, 4000, 50)
    assert v.limit == "prefill", v.summary
    assert v.measurements.queue_wait_p95_s == 0.0 and v.prefill_share_of_ttft == pytest.approx(1.0)


# --------------------------------------------------------------------------- load-aware verdicts


def test_ab_rules_precedence_explanation_and_first_to_bind() -> None:
    a, b = diagnose_table(ab())
    assert [r.limit for r in b.rules] == list(PRECEDENCE)
    holding = {r.limit: r.holds for r in b.rules}
    assert holding == {"kv_memory": True, "decode": False, "queueing": False, "prefill": False}
    assert b.explanation.startswith("kv_memory because its whole pattern holds")
    assert a.limit == "none" and "nothing limits it" in a.explanation
    assert (a.first_to_bind.limit, a.first_to_bind.in_service) == ("kv_memory", 54)
    assert a.first_to_bind.rate_per_s == pytest.approx(54 / 6.12)  # Little's law: limit / time in service
    assert a.first_to_bind.headroom == pytest.approx(54 / 6.12)  # at 1 request/s
    assert "binds first, at about 8.82" in a.summary


def burst_records() -> list[dict]:
    """Lone requests at 10 ms TPOT, and 40 pairs arriving together that decode at 14 ms (TPOT grows 1.4x)."""
    recs = fifo([i * 1.0 for i in range(200)], cap=1000, prefill_s=0.01, tpot_s=0.010, n_out=40, prompt=200)
    for k, start in enumerate(300.0 + 2 * (i // 2) + 0.001 * (i % 2) for i in range(80)):
        recs.append({"request_id": f"b{k}", "start": start, "admitted": start, "first_token": start + 0.01,
                     "end": start + 0.01 + 39 * 0.014, "status": "success", "prompt_tokens": 200,
                     "output_tokens": 40})
    return recs


def test_tpot_growth_in_bursts_is_not_a_limit_below_saturation() -> None:
    # like the tiny CPU run: TPOT grows with the batch (top vs bottom quarter crosses 1.25), but the
    # typical request decodes alone, so nothing limits the server at this load
    t, ws, we = as_table(burst_records())
    v = diagnose_records(t, ws, we, budget_tokens=8192, max_num_seqs=64, policy="paged")
    assert v.tpot_growth is not None and v.tpot_growth >= 1.25
    assert v.tpot_growth_at_load is not None and v.tpot_growth_at_load < 1.25
    assert v.limit == "none", v.summary
    decode = next(r for r in v.rules if r.limit == "decode")
    assert not decode.holds and [c.crossed for c in decode.conditions] == [True, False]
    assert v.first_to_bind is not None and v.first_to_bind.rate_per_s > v.measurements.arrival_rate_per_s
    assert {b.limit for b in v.bindings} == {"kv_memory", "decode"}  # max_num_seqs 64 is above the KV limit
    assert v.max_concurrent_sequences == 8192 // 240  # paged: 200 + 40 tokens, a whole number of 16-token blocks


def test_first_to_bind_is_the_cap_on_running_sequences_when_it_is_lowest() -> None:
    recs = fifo([float(i) for i in range(100)], cap=1000, prefill_s=0.1, tpot_s=0.02, n_out=20, prompt=1000)
    t, ws, we = as_table(recs)
    v = diagnose_records(t, ws, we, shape=SPEC, budget_bytes=8 * GIB, max_num_seqs=4)
    assert v.limit == "none"
    assert v.first_to_bind.limit == "queueing" and v.first_to_bind.in_service == 4
    assert v.first_to_bind.rate_per_s == pytest.approx(4 / (0.1 + 19 * 0.02))
    kv_bind = next(b for b in v.bindings if b.limit == "kv_memory")
    assert kv_bind.rate_per_s == pytest.approx(64 / (0.1 + 19 * 0.02))


def test_a_fitted_step_model_gives_decode_its_binding_rate() -> None:
    from servebench.capacity.stepmodel import StepModel
    recs = fifo([float(i) for i in range(100)], cap=1000, prefill_s=0.1, tpot_s=0.02, n_out=20, prompt=1000)
    t, ws, we = as_table(recs)
    step = StepModel(base_s=0.02, per_decode_seq_s=0.001)  # TPOT 21 ms alone, +1 ms per sequence
    v = diagnose_records(t, ws, we, shape=SPEC, budget_bytes=8 * GIB, step_model=step)
    dec = next(b for b in v.bindings if b.limit == "decode")
    n = 1 + 0.25 * 0.021 / 0.001  # TPOT reaches 1.25x at this many in service
    assert dec.in_service == pytest.approx(n)
    assert dec.rate_per_s == pytest.approx(n / (0.1 + 19 * (0.021 + 0.001 * (n - 1))))
    assert v.first_to_bind.limit == "decode" and "fitted step model" in dec.basis


def without_admitted(recs: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "admitted"} for r in recs]


def test_records_without_admitted_below_saturation_are_none() -> None:
    recs = fifo([float(i) for i in range(100)], cap=1000, prefill_s=0.1, tpot_s=0.02, n_out=20, prompt=1000)
    v = run(without_admitted(recs))
    assert v.limit == "none" and not v.measurements.has_admitted
    assert v.measurements.queue_wait_p95_s is None and v.measurements.prefill_p95_s is None
    assert any("no admitted times" in c for c in v.cannot_tell)
    assert v.time_in_service_s == pytest.approx(0.1 + 19 * 0.02)  # TTFT p50 stands in for prefill


def test_records_without_admitted_still_show_decode() -> None:
    arrivals = [i * 2.0 for i in range(60)] + [120 + i * 0.5 for i in range(120)]
    recs = fifo(arrivals, cap=1000, prefill_s=0.1, tpot_s=[0.02] * 60 + [0.08] * 120, n_out=50, prompt=1000)
    v = run(without_admitted(recs))
    assert v.limit == "decode", v.summary
    assert v.cannot_tell  # it still says what it cannot split


def test_records_without_admitted_with_a_queue_are_undetermined() -> None:
    recs = fifo([i * 0.8 for i in range(150)], cap=8, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    with_adm = run(recs)
    assert with_adm.limit == "kv_memory"
    v = run(without_admitted(recs))
    assert v.limit == "undetermined", v.summary
    assert "cannot be told apart" in v.summary and "admitted" in v.experiment.action
    assert not any(r.holds for r in v.rules if r.limit in ("kv_memory", "queueing", "prefill"))


def test_every_crossed_rule_is_shown_and_the_first_wins() -> None:
    # a queue behind 4 slots with long prompts: queueing holds; prefill does not (the queue dominates)
    recs = fifo([i / 0.6 for i in range(100)], cap=4, prefill_s=1.0, tpot_s=0.031, n_out=200, prompt=7800)
    v = run(recs)
    assert v.limit == "queueing"
    assert [r.limit for r in v.rules if r.holds] == ["queueing"]
    assert "queueing because its whole pattern holds" in v.explanation
    # the walkthrough's choices still offer the five limits the spec names
    from servebench.analysis.diagnosis import LIMITS
    assert "undetermined" not in LIMITS


def test_cli_diagnose_a_timing_run_folder_uses_its_server(tmp_path: Path) -> None:
    """A run folder brings its KV budget in tokens, its cap on running sequences and its step trace."""
    from servebench.records.rundir import write_run
    from servebench.records.steps import StepRow

    recs = fifo([float(i) for i in range(60)], cap=1000, prefill_s=0.01, tpot_s=0.01, n_out=20, prompt=100)
    steps = [StepRow(start_s=i * 0.01, duration_s=0.002 + 0.00001 * (i % 4) + 1e-5 * (100 if i % 7 == 0 else 0),
                     compute_s=0.0019, prefill_tokens=100 if i % 7 == 0 else 0, decode_seqs=i % 4,
                     kv_tokens_read=100 * (i % 4), kv_tokens_used=0, kv_tokens_held=0, running=1, waiting=0, preempted=0)
             for i in range(200)]
    scenario = {"name": "r", "seed": 1, "step_model": {"base_s": 0.001},
                "server": {"policy": "paged", "kv_budget_tokens": 2048, "max_num_seqs": 4},
                "workload": {"arrival": {"kind": "poisson", "rate_rps": 1}, "num_requests": 60,
                             "classes": [{"prompt": {"value": 100}, "output": {"value": 20}}]}}
    write_run(tmp_path / "run", recs, steps=steps, metadata={"scenario": scenario})
    res = runner.invoke(app, ["diagnose", str(tmp_path / "run"), "--json"])
    assert res.exit_code == 0, res.output
    v = json.loads(res.stdout)["profiles"]["run"]
    assert v["limit"] == "none" and v["budget_tokens"] == 2048 and v["max_concurrent_sequences"] == 2048 // 128
    assert v["first_to_bind"]["limit"] == "queueing" and v["first_to_bind"]["in_service"] == 4
    human = runner.invoke(app, ["diagnose", str(tmp_path / "run")])
    assert human.exit_code == 0 and "rules, in precedence order" in human.output and "binds first" in human.output


def test_simulated_a_and_b_know_the_load() -> None:
    a, b = simulated("profile_a"), simulated("profile_b")
    assert a.limit == "none" and a.first_to_bind is not None and a.first_to_bind.limit == "kv_memory"
    assert a.first_to_bind.rate_per_s == pytest.approx(54 / a.time_in_service_s, rel=0.05)
    assert a.first_to_bind.headroom > 5  # A runs far below its KV limit
    assert b.limit == "kv_memory" and [r.limit for r in b.rules if r.holds][0] == "kv_memory"
    assert b.first_to_bind.limit == "kv_memory" and b.first_to_bind.headroom < 1.2  # B is at its limit
    assert "kv_memory because" in b.explanation


# --------------------------------------------------------------------------- one headline per record set


SAMPLE_RECORDS = Path(__file__).resolve().parent.parent / "sample_data" / "requests_sample.csv"
IMPORTERS = Path(__file__).resolve().parent / "data" / "importers"


def _every_text(v) -> list[str]:
    """Return every sentence a verdict shows a person."""
    texts = [v.summary, v.explanation, v.prefill, v.experiment.action, v.experiment.confirm, v.experiment.refute,
             *v.cannot_tell, *(e.note for e in v.evidence), *(b.basis for b in v.bindings)]
    if v.headline is not None:
        texts += [v.headline.text, v.headline.capacity_basis, *v.headline.evidence]
    return texts


def _consistent(v) -> None:
    """The headline, the verdict and the bindings never contradict each other."""
    h = v.headline
    assert h is not None
    if v.limit in ("kv_memory", "decode", "queueing", "prefill"):
        assert h.standing == "at_limit" and h.limit == v.limit
        assert v.first_to_bind is not None and v.first_to_bind.limit == v.limit
        assert h.capacity_rate_per_s == v.first_to_bind.rate_per_s
        assert h.capacity_rate_per_s <= v.measurements.arrival_rate_per_s  # it binds at the measured load
        assert [b.limit for b in v.bindings].count(v.limit) == 1
    elif v.limit == "undetermined" or h.standing == "cannot_tell":
        assert h.limit is None and h.capacity_rate_per_s is None and v.first_to_bind is None
        assert all(b.rate_per_s is None for b in v.bindings)  # nothing extrapolated
    else:
        assert h.standing == "below_limit"
        if v.first_to_bind is not None:
            assert h.limit == v.first_to_bind.limit and h.capacity_rate_per_s == v.first_to_bind.rate_per_s
            assert h.capacity_rate_per_s >= v.measurements.arrival_rate_per_s  # nothing binds at this load
    assert not any("None" in t or "nan" in t for t in _every_text(v)), _every_text(v)


def test_the_sample_records_get_one_consistent_headline() -> None:
    """The sample was 'Decode' while the page said 'decode binds first at about 1.47 req/s (1.44x the measured
    rate)' with queue wait 95 % of TTFT p95 and 10 % failing: past its limit, the capacity is below the load."""
    from servebench.records.loaders import load_table

    t, ws, we = load_table(SAMPLE_RECORDS)
    v = diagnose_records(t, ws, we, name="requests_sample.csv")
    h = v.headline
    assert v.limit == "decode" and h.standing == "at_limit" and h.limit == "decode"
    assert h.measured_rate_per_s == pytest.approx(v.measurements.arrival_rate_per_s)
    assert h.measured_rate_per_s == pytest.approx(1.021, abs=0.001)
    assert h.non_success_share == pytest.approx(299 / 3000)
    assert h.completed_rate_per_s == pytest.approx(2701 / v.measurements.duration_s)
    assert h.capacity_rate_per_s == pytest.approx(h.completed_rate_per_s)  # 0.917 req/s, below the 1.02 offered
    assert v.first_to_bind.limit == "decode" and v.first_to_bind.headroom < 1
    assert not any(b.rate_per_s is not None and b.rate_per_s > h.measured_rate_per_s
                   for b in v.bindings if b.limit == "decode")
    assert "1.47" in h.capacity_basis  # the Little's law estimate is kept as what it is: an upper estimate
    assert h.text.startswith("Measured at 1.02 requests/s, it completed 0.917/s (10% not successful")
    assert "decode binds at this load (queueing's pattern holds too)" in h.text
    assert "capacity is at most about 0.917 requests/s" in h.text
    assert any(e.startswith("queue_share_of_ttft 0.947 >= 0.5") for e in h.evidence)
    _consistent(v)


def test_cannot_tell_extrapolates_nothing_from_a_few_mock_requests() -> None:
    """GuideLLM's run against a mock server (41 requests, no admitted times) printed 'decode first at 9.685
    req/s' beside 'cannot tell which limit'."""
    loaded = read_bytes((IMPORTERS / "guidellm-0.8.1-errors.json").read_bytes(), "guidellm-0.8.1-errors.json")
    t, ws, we = to_table(loaded)
    v = diagnose_records(t, ws, we)
    assert v.limit == "undetermined"
    assert v.first_to_bind is None and all(b.rate_per_s is None for b in v.bindings)
    assert v.headline.standing == "cannot_tell" and v.headline.capacity_rate_per_s is None
    assert v.headline.text == ("Measured at 4 requests/s (27% not successful): something limits it (7 timeouts), "
                               "but without admitted times the data cannot tell which limit binds, so no capacity "
                               "is estimated.")
    _consistent(v)


def test_decode_is_not_extrapolated_from_fewer_than_a_hundred_requests() -> None:
    few = burst_records()[:60] + burst_records()[200:230]  # 90 requests: TPOT still grows within the bursts
    v = run(few)
    dec = next(b for b in v.bindings if b.limit == "decode")
    assert dec.rate_per_s is None and "fitted to" in dec.basis and "at least 100" in dec.basis
    assert v.measurements.tpot_line is not None and v.measurements.tpot_line.fitted_requests < 100
    many = run(burst_records())  # 280 requests: the same line, now extrapolated
    assert next(b for b in many.bindings if b.limit == "decode").rate_per_s is not None
    _consistent(v)
    _consistent(many)


def test_records_without_a_shared_clock_give_no_rate() -> None:
    loaded = read_bytes((IMPORTERS / "llmperf-individual.json").read_bytes(), "llmperf-individual.json")
    t, ws, we = to_table(loaded)
    v = diagnose_records(t, ws, we, shared_clock=False)
    h = v.headline
    assert h.standing == "cannot_tell" and h.measured_rate_per_s is None and h.capacity_rate_per_s is None
    assert "no timestamps on one clock" in h.text and v.first_to_bind is None
    _consistent(v)


def test_ab_headlines() -> None:
    a, b = diagnose_table(ab())
    assert a.headline.standing == "below_limit" and a.headline.limit == "kv_memory"
    assert a.headline.text.endswith("KV memory binds first, at about 8.82 requests/s (8.82x the measured rate).")
    assert b.headline.standing == "at_limit" and b.headline.limit == "kv_memory"
    assert b.headline.capacity_rate_per_s == pytest.approx(297 / 300)  # 3 timeouts in 300 s
    assert "1.09/s from its own estimate (Little's law" in b.headline.capacity_basis
    _consistent(a)
    _consistent(b)


def test_a_profile_without_peak_or_limit_prints_no_none() -> None:
    """'peak 6 against the KV limit None': a missing number reads as — or is left out, never as None."""
    m = ProfileMeasurements(name="x", requests=100, arrival_rate_per_s=2, output_tokens=50, ttft_p95_s=3.0,
                            peak_active=6, queue_wait_p95_s=2.5, prefill_p95_s=0.5, tpot_p50_s=0.02)
    v = diagnose(m)
    notes = [e.note for e in v.evidence]
    assert "no KV limit known" in notes and not any("None" in n for n in notes)
    v = diagnose(m.model_copy(update={"peak_active": None, "prompt_tokens": 1000}), shape=SPEC, budget_bytes=8 * GIB)
    assert any("peak — " in e.note for r in v.rules for e in r.conditions)
    _consistent(v)


@settings(max_examples=200, deadline=None)
@given(ttft=st.one_of(st.none(), st.floats(0.01, 30)), queue=st.one_of(st.none(), st.floats(0, 20)),
       prefill=st.one_of(st.none(), st.floats(0, 20)), timeouts=st.integers(0, 5), rejected=st.integers(0, 5),
       peak=st.one_of(st.none(), st.integers(0, 80)), share=st.one_of(st.none(), st.floats(0, 1)),
       tpot=st.one_of(st.none(), st.floats(0.005, 0.2)), growth=st.one_of(st.none(), st.floats(1, 3)),
       admitted=st.booleans(), budget=st.one_of(st.none(), st.sampled_from([2, 8, 40])),
       rate=st.floats(0.05, 50), duration=st.one_of(st.none(), st.floats(10, 1000)))
def test_the_headline_never_contradicts_the_verdict(ttft, queue, prefill, timeouts, rejected, peak, share, tpot,
                                                    growth, admitted, budget, rate, duration) -> None:
    m = ProfileMeasurements(
        name="p", prompt_tokens=1000, requests=100, timeouts=timeouts, rejected=rejected, failures=rejected,
        queue_wait_p95_s=queue if admitted else None, prefill_p95_s=prefill if admitted else None,
        prefill_p50_s=prefill / 2 if admitted and prefill is not None else None, ttft_p95_s=ttft,
        ttft_p50_s=ttft / 2 if ttft is not None else None, tpot_p50_s=tpot,
        tpot_high_load_s=tpot * growth if tpot is not None and growth is not None else None,
        tpot_baseline_s=tpot, peak_active=peak, share_at_peak=share, arrival_rate_per_s=rate, output_tokens=100,
        duration_s=duration, has_admitted=admitted)
    v = diagnose(m, shape=SPEC if budget else None, budget_bytes=budget * GIB if budget else None)
    _consistent(v)


def test_no_limit_is_said_to_bind_below_a_load_that_nothing_limits() -> None:
    """Little's law put the KV limit at 1.35 req/s for a run at 20 req/s with no symptom: the run contradicts it."""
    m = ProfileMeasurements(name="p", prompt_tokens=1000, requests=100, ttft_p95_s=1.0, ttft_p50_s=0.5,
                            queue_wait_p95_s=0.1, prefill_p95_s=0.9, prefill_p50_s=0.5, tpot_p50_s=0.1,
                            arrival_rate_per_s=20, output_tokens=100, duration_s=100)
    v = diagnose(m, shape=SPEC, budget_bytes=2 * GIB)
    assert v.limit == "none" and v.first_to_bind is None
    kv_bind = next(b for b in v.bindings if b.limit == "kv_memory")
    assert kv_bind.rate_per_s is None and "gives 1.35/s, below the measured 20/s" in kv_bind.basis
    assert "binds first" not in v.summary and "binds first" not in v.headline.text
    _consistent(v)


def test_server_evidence_reads_an_undefined_gauge_and_a_large_count_as_the_one_formatter_writes_them() -> None:
    """The diagnosis's own formatters wrote a NaN gauge (Prometheus allows NaN) as 'nan%' and 1,234 preemptions
    as '1.23e+03'; servebench.formatting writes '—' and '1,234'."""
    from servebench.analysis.diagnosis import Evidence, server_rules
    from servebench.analysis.server_metrics import ServerState

    state = ServerState(scrapes=40, running_metric="vllm:num_requests_running", running_max=8.0, running_mean=7.5,
                        running_full_share=0.95, waiting_metric="vllm:num_requests_waiting", waiting_share=0.6,
                        waiting_mean=3.25, waiting_max=12.0, full_while_waiting=0.9,
                        kv_metric="vllm:kv_cache_usage_perc", kv_usage_p95=float("nan"), kv_usage_max=float("nan"),
                        preemptions_metric="vllm:num_preemptions_total", preemptions=1234.0)
    growth = Evidence(measurement="tpot_growth", value=1.1, threshold=1.5, rule=">=", crossed=False, note="")
    notes = [c.note for rule in server_rules(state, growth, Thresholds()) for c in rule.conditions]
    assert "KV cache — in use at p95 (max —)" in notes
    assert "1,234 requests preempted in the window" in notes
    assert "requests waiting in 60% of 40 scrapes (mean 3.25, max 12)" in notes
    assert not any("nan" in n or "e+" in n for n in notes)


def test_the_sentences_give_times_in_the_unit_asked_and_one_request_per_second_is_singular() -> None:
    """The dashboard diagnoses in ms (issue 36: 'TTFT p95 0.26 s' beside ms inputs, '1 requests/s'); the CLI in s."""
    a_ms, b_ms = diagnose_table(ab(), "ms")
    a_s, b_s = diagnose_table(ab())
    assert "TTFT p95 260 ms" in a_ms.summary and "TTFT p95 0.26 s" in a_s.summary
    assert a_ms.prefill.startswith("Prefill takes 150 ms p50 (250 ms p95)")
    assert b_ms.headline.text.startswith("Measured at 1 request/s, it completed 0.99/s (1% not successful; "
                                         "TTFT p95 10,300 ms over its 2,000 ms objective, 3 timeouts)")
    assert b_s.headline.text.startswith("Measured at 1 request/s, it completed 0.99/s (1% not successful; "
                                        "TTFT p95 10.3 s over its 2 s objective")
    assert "ttft_p95 10,300 ms > 2,000 ms: TTFT p95 above the objective" in b_ms.headline.evidence
    assert "ttft_p95_s 10.3 > 2: TTFT p95 above the objective" in b_s.headline.evidence
    assert "falls far below 8,700 ms, TPOT stays near 31 ms" in b_ms.experiment.confirm
    for v in (a_ms, b_ms, a_s, b_s):
        text = " ".join([v.summary, v.prefill, v.explanation, v.headline.text, *v.headline.evidence])
        assert "1 requests/s" not in text
    # only the words change: every number is the same, in seconds
    for ms, s in ((a_ms, a_s), (b_ms, b_s)):
        assert ms.model_dump(exclude={"summary", "prefill", "experiment", "headline", "evidence", "rules", "bindings",
                                      "first_to_bind"}) == \
            s.model_dump(exclude={"summary", "prefill", "experiment", "headline", "evidence", "rules", "bindings",
                                  "first_to_bind"})
        assert [e.value for e in ms.evidence] == [e.value for e in s.evidence]


def test_the_headline_and_explanation_also_come_in_words_for_the_dashboard() -> None:
    """Issue 36: the rules' keys (kv_memory, ttft_p95_s) behind the engineer view; the JSON keeps them as they were."""
    a, b = diagnose_table(ab(), "ms")
    assert b.explanation.startswith("kv_memory because its whole pattern holds given the symptoms")
    assert b.explanation_words.startswith("KV memory because its whole pattern holds given the symptoms (TTFT p95, "
                                          "Timeouts")
    assert "TTFT p95 10,300 ms > 2,000 ms: TTFT p95 above the objective" in b.headline.evidence_words
    assert len(b.headline.evidence_words) == len(b.headline.evidence)
    snake = re.compile(r"\b[a-z]+_[a-z_]+\b")  # a key: kv_memory, ttft_p95, queue_share_of_ttft
    assert snake.findall(" ".join([b.explanation, *b.headline.evidence]))  # the CLI's sentences keep the keys
    for v in (a, b):
        assert not snake.findall(" ".join([v.explanation_words, *v.headline.evidence_words])), v.explanation_words
        dumped = v.model_dump(mode="json")
        assert "explanation_words" not in dumped and "evidence_words" not in dumped["headline"]
    assert "nothing limits it" in a.explanation_words and "KV memory binds first" in a.explanation_words
