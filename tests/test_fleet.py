"""The fleet simulator: replicas behind a router on one event clock (servebench.serving.fleet)."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import build_report
from servebench.output import strict_json
from servebench.serving.fleet import ROUTER_STREAM, simulate_fleet, simulate_scenario
from servebench.serving.scenario import FleetSpec, Scenario, load_scenario, parse_scenario
from servebench.serving.simulate import simulate, simulate_workload
from servebench.serving.workload import Workload, draw_workload


def scenario(**changes: object) -> Scenario:
    """A small server: 10 ms steps, a little per prompt token and per decoder."""
    doc: dict = {"seed": 3, "server": {"kv_budget_tokens": 20000, "timeout_s": 30, "max_num_seqs": 16},
                 "step_model": {"base_s": 0.01, "per_prefill_token_s": 0.0001, "per_decode_seq_s": 0.001},
                 "workload": {"arrival": {"kind": "poisson", "rate_rps": 20}, "num_requests": 400,
                              "classes": [{"prompt": {"kind": "uniform", "low": 100, "high": 800},
                                           "output": {"kind": "uniform", "low": 10, "high": 200}}]}}
    for key, value in changes.items():
        section, _, field = key.partition(".")
        if field:
            doc[section] = {**doc[section], field: value}
        else:
            doc[section] = value
    return parse_scenario(doc)


def fixed_workload(arrival_s: list[float], output_tokens: list[int], prompt_tokens: int = 300,
                   prefix_group: list[int] | None = None) -> Workload:
    """Requests at given times with given output lengths; ``prefix_group``: each shares a 256-token document."""
    n = len(arrival_s)
    groups = None if prefix_group is None else np.array(prefix_group, dtype=np.int64)
    return Workload(arrival_s=np.array(arrival_s), prompt_tokens=np.full(n, prompt_tokens, dtype=np.int64),
                    output_tokens=np.array(output_tokens, dtype=np.int64),
                    max_output_tokens=np.array(output_tokens, dtype=np.int64), class_index=np.zeros(n, dtype=np.int64),
                    class_names=("default",), class_timeout_s=(None,),
                    prefix_tokens=None if groups is None else np.full(n, 256, dtype=np.int64), prefix_group=groups)


def replicas_of(sc: Scenario, fleet: FleetSpec, workload: Workload) -> list[int]:
    return simulate_fleet(sc, fleet, workload=workload).replica.tolist()


# ---------------------------------------------------------------------- one replica, and replicas as separate runs
def test_no_fleet_key_is_the_single_replica_run_and_report() -> None:
    sc = scenario()
    one, fleet_run = simulate(sc), simulate_scenario(sc)
    assert np.array_equal(one.records.end, fleet_run.records.end) and "replica" not in fleet_run.records.extra
    report = build_report(fleet_run.records, fleet_run.window_start_s, fleet_run.window_end_s)
    assert report.fleet is None and "fleet" not in json.loads(strict_json.dumps(report))


def test_one_replica_fleet_is_simulate_with_replica_zero() -> None:
    sc = scenario(fleet={"replicas": 1, "router": "least_outstanding"})
    one, fl = simulate(sc), simulate_fleet(sc)
    for col in ("start", "first_token", "end", "status"):
        assert np.array_equal(getattr(one.records, col), getattr(fl.result.records, col), equal_nan=True)
    assert fl.replica.tolist() == [0] * len(one.records)


def test_round_robin_replicas_are_the_single_simulator_on_their_share() -> None:
    """Independent arrivals: replica k of N serves rows k, k+N, ... exactly as one server would serve them alone."""
    sc, n_replicas = scenario(), 3
    fl = simulate_fleet(sc, FleetSpec(replicas=n_replicas), token_times=True)
    wl = draw_workload(sc.workload, sc.rng()).plan()
    assert isinstance(wl, Workload)
    records = fl.result.records
    for k in range(n_replicas):
        rows = np.arange(k, len(wl), n_replicas)
        part = dataclasses.replace(wl, **{f.name: getattr(wl, f.name)[rows] for f in dataclasses.fields(wl)
                                          if isinstance(getattr(wl, f.name), np.ndarray)})
        alone = simulate_workload(sc.server.scheduler_config(), sc.step_model.to_model(), part,
                                  noise_seed=sc.seed if k == 0 else (sc.seed, k)).records
        assert (fl.replica[rows] == k).all()
        for col in ("start", "admitted", "first_token", "end", "status", "output_tokens"):
            assert np.array_equal(getattr(records, col)[rows], getattr(alone, col), equal_nan=True), (k, col)
        assert records.token_times.take(rows).to_pylist() == alone.token_times.to_pylist()


# ---------------------------------------------------------------------- each router on a case whose choice is known
# request 0 runs 10 s on the replica it lands on and request 1 ends within 0.2 s; request 2 comes at 1.0 s, and
# request 3 while request 2 still runs
LOADS = fixed_workload([0.0, 0.1, 1.0, 1.02], [1000, 2, 5, 5])


def test_round_robin_takes_turns() -> None:
    assert replicas_of(scenario(), FleetSpec(replicas=2), LOADS) == [0, 1, 0, 1]
    wl = fixed_workload([0.1 * i for i in range(7)], [3] * 7)
    assert replicas_of(scenario(), FleetSpec(replicas=3), wl) == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_avoids_the_busy_replica() -> None:
    """At 1.0 s replica 0 still runs request 0 and replica 1 is idle: request 2 goes to 1; request 3 finds one
    outstanding on each and takes the lower index."""
    assert replicas_of(scenario(), FleetSpec(replicas=2, router="least_outstanding"), LOADS) == [0, 1, 1, 0]


def test_power_of_two_takes_the_less_loaded_of_its_draw() -> None:
    """With two replicas every draw is both: the less loaded wins, a tie goes to the first drawn."""
    sc = scenario()
    first = np.random.default_rng([sc.seed, ROUTER_STREAM]).integers(2, size=4).tolist()
    a = first[0]
    assert replicas_of(sc, FleetSpec(replicas=2, router="power_of_two"), LOADS) == [a, 1 - a, 1 - a, first[3]]


def test_power_of_two_chooses_within_its_draw() -> None:
    sc = scenario()
    fl = simulate_fleet(sc, FleetSpec(replicas=5, router="power_of_two"))
    rng = np.random.default_rng([sc.seed, ROUTER_STREAM])
    n = len(fl.replica)
    a = rng.integers(5, size=n)
    b = rng.integers(4, size=n)
    b += b >= a
    assert ((fl.replica == a) | (fl.replica == b)).all() and (a != b).all()
    assert (fl.replica == a).any() and (fl.replica == b).any()


CACHED = {"server.prefix_caching": True}
# requests 0 and 1 (documents 0 and 1) run long on replicas 0 and 1; then short requests alternate documents
DOCS = fixed_workload([0.0, 0.1] + [1.0 + 0.1 * i for i in range(6)], [1000, 1000] + [3] * 6,
                      prefix_group=[0, 1, 0, 1, 0, 1, 0, 1])


def test_prefix_affinity_follows_the_cached_document() -> None:
    sc = scenario(**CACHED)
    assert replicas_of(sc, FleetSpec(replicas=2, router="prefix_affinity"), DOCS) == [0, 1, 0, 1, 0, 1, 0, 1]
    # least_outstanding splits the documents' requests over both replicas (round robin happens to match them)
    assert replicas_of(sc, FleetSpec(replicas=2, router="least_outstanding"), DOCS) != [0, 1] * 4


def test_prefix_affinity_balances_past_its_bound() -> None:
    """Two long requests of document 0: the second finds it cached on replica 0, which already has one
    outstanding against none on replica 1; the default bound (64 more) keeps it there, a bound of 0 sends it on."""
    sc = scenario(**CACHED)
    wl = fixed_workload([0.0, 0.1], [1000, 1000], prefix_group=[0, 0])
    assert replicas_of(sc, FleetSpec(replicas=2, router="prefix_affinity"), wl) == [0, 0]
    tight = FleetSpec(replicas=2, router="prefix_affinity", affinity_slack_requests=0, affinity_slack_ratio=1)
    assert replicas_of(sc, tight, wl) == [0, 1]
    ratio_only = FleetSpec(replicas=2, router="prefix_affinity", affinity_slack_requests=0, affinity_slack_ratio=2)
    assert replicas_of(sc, ratio_only, wl) == [0, 1]  # 1 > 2 x 0: both hold
    wl3 = fixed_workload([0.0, 0.05, 0.1], [1000, 1000, 1000], prefix_group=[0, 1, 0])
    # request 2: replica 0 holds document 0 with 1 outstanding, replica 1 has 1: no imbalance, it stays
    assert replicas_of(sc, tight, wl3) == [0, 1, 0]


def test_session_affinity_keeps_a_conversation_on_one_replica() -> None:
    sc = scenario(workload={"arrival": {"kind": "constant", "rate_rps": 5}, "num_requests": 24,
                            "classes": [{"prompt": {"value": 200}, "output": {"value": 20},
                                         "conversation": {"turns": 4, "think_s": 0.3}}]})
    wl = draw_workload(sc.workload, sc.rng()).plan()
    assert isinstance(wl, Workload) and wl.prev_turn is not None
    prev = wl.prev_turn.tolist()
    root = list(range(len(prev)))
    for i in range(len(prev)):
        j = i
        while prev[j] >= 0:
            j = prev[j]
        root[i] = j
    sticky = simulate_fleet(sc, FleetSpec(replicas=3, router="session_affinity")).replica.tolist()
    by_session = {r: {sticky[i] for i in range(len(prev)) if root[i] == r} for r in set(root)}
    assert all(len(v) == 1 for v in by_session.values()) and len(by_session) == 6
    # a first turn goes to the least-loaded replica: the six conversations do not all share one
    assert len(Counter(v.pop() for v in by_session.values())) > 1
    spread = simulate_fleet(sc, FleetSpec(replicas=3)).replica.tolist()
    assert any(len({spread[i] for i in range(len(prev)) if root[i] == r}) > 1 for r in set(root))


# ---------------------------------------------------------------------- conservation
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(replicas=st.integers(1, 5),
       router=st.sampled_from(["round_robin", "least_outstanding", "power_of_two", "prefix_affinity",
                               "session_affinity"]),
       rate=st.floats(5, 200), n=st.integers(1, 60), seqs=st.integers(1, 8), waiting=st.none() | st.integers(1, 4),
       timeout=st.none() | st.floats(0.05, 5), turns=st.integers(1, 3), cancel=st.booleans(),
       attempts=st.integers(1, 3), lane=st.sampled_from(["shared", "separate"]), seed=st.integers(0, 2**16),
       users=st.none() | st.integers(1, 6))
def test_every_request_ends_on_exactly_one_replica(replicas: int, router: str, rate: float, n: int, seqs: int,
                                                   waiting: int | None, timeout: float | None, turns: int,
                                                   cancel: bool, attempts: int, lane: str, seed: int,
                                                   users: int | None) -> None:
    """Open loop (conversations or not) or closed loop (``users``), with every way a request can end."""
    doc: dict = {
        "seed": seed,
        "server": {"kv_budget_tokens": 4000, "max_num_seqs": seqs, "prefix_caching": True, "prefill_lane": lane,
                   **({"max_waiting": waiting} if waiting else {}), **({"timeout_s": timeout} if timeout else {})},
        "step_model": {"base_s": 0.01, "per_prefill_token_s": 0.0001, "per_decode_seq_s": 0.001},
        "workload": {**({"closed_loop": {"users": users, "think_s": 0.05, "think": "exponential"}} if users else
                        {"arrival": {"kind": "gamma", "rate_rps": rate, "cv": 3}}), "num_requests": n,
                     "classes": [{"prompt": {"kind": "uniform", "low": 20, "high": 400},
                                  "output": {"kind": "uniform", "low": 1, "high": 60},
                                  "shared_prefix": {"tokens": 16, "groups": 3},
                                  **({"conversation": {"turns": turns, "think_s": 0.05}}
                                     if turns > 1 and not users else {})}]},
        "fleet": {"replicas": replicas, "router": router},
        **({"cancel": {"probability": 0.3, "after_s": 0.2}} if cancel else {}),
        **({"client": {"max_attempts": attempts}} if attempts > 1 else {})}
    sc = parse_scenario(doc)
    fl = simulate_fleet(sc)
    records = fl.result.records
    ids = records.request_id.tolist()
    assert len(ids) == len(set(ids))  # nothing doubled
    logical = records.logical_id.tolist() if attempts > 1 else ids
    assert set(logical) == {str(i) for i in range(n)}  # nothing lost
    assert fl.replica.shape == (len(records),) and ((0 <= fl.replica) & (fl.replica < replicas)).all()
    # a logical request's attempts all ran on one replica
    assert all(len({int(fl.replica[j]) for j in range(len(ids)) if logical[j] == lg}) == 1 for lg in set(logical))
    report = build_report(records, fl.result.window_start_s, max(fl.result.window_end_s, 1e-9))
    assert report.fleet is not None and sum(r.requests for r in report.fleet.per_replica.values()) == len(records)


def test_simulate_cli_runs_the_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:

    doc = {"name": "f", "seed": 1, "server": {"kv_budget_tokens": 20000, "max_num_seqs": 8},
           "step_model": {"base_s": 0.01, "per_decode_seq_s": 0.001},
           "workload": {"arrival": {"kind": "poisson", "rate_rps": 50}, "num_requests": 200,
                        "classes": [{"prompt": {"value": 100}, "output": {"value": 30}}]},
           "fleet": {"replicas": 3, "router": "least_outstanding"}}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    code, out, _ = run_cli(capsys, "simulate", str(path), "-o", str(tmp_path / "out"), "--json")
    assert code == 0
    fleet = json.loads(out)["report"]["fleet"]
    assert fleet["replicas"] == 3 and sum(r["requests"] for r in fleet["per_replica"].values()) == 200
    first = json.loads((tmp_path / "out" / "records.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first["replica"] == 0


# the trace's first 2,000 rows, unchanged (the whole file is not in git; the 300-row sample repeats too few prefixes)
MOONCAKE_2000 = Path(__file__).resolve().parent / "data" / "traces" / "mooncake_conversation_2000.jsonl"


def test_on_the_mooncake_trace_prefix_affinity_and_least_outstanding_pay() -> None:
    """The trace's first 2,000 requests at 2.5x on 4 busy replicas (benchmarks/fleet.py --case mooncake has all).

    It ran only where the whole trace had been fetched into benchmarks/data/, so on a clean clone it skipped."""
    import importlib.util

    from servebench.analysis.fleet import fleet_report
    from servebench.analysis.percentiles import percentile
    spec = importlib.util.spec_from_file_location("fleet_benchmark", Path(__file__).resolve().parent.parent
                                                  / "benchmarks" / "fleet.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # the benchmark's scenario, so this test checks what docs/fleet.md quotes
    sc = bench.mooncake(2.5, 2000, MOONCAKE_2000)
    seen = {}
    for router in ("round_robin", "least_outstanding", "prefix_affinity"):
        records = simulate_fleet(sc, FleetSpec(replicas=4, router=router), token_times=False).result.records
        ttft = (records.first_token - records.start)[records.is_success]
        report = fleet_report(records)
        assert report is not None
        seen[router] = (report.token_hit_rate, percentile(ttft, 50), percentile(ttft, 99))
    assert seen["prefix_affinity"][0] > 2 * seen["round_robin"][0]  # measured 0.287 against 0.119
    assert seen["prefix_affinity"][1] < seen["round_robin"][1] and seen["prefix_affinity"][2] < seen["round_robin"][2]
    assert seen["least_outstanding"][2] < seen["round_robin"][2]  # the bursts: 6.0 s against 7.7 s


def test_a_scenario_without_fleet_writes_what_it_wrote(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No replica column, no fleet section: the run folder of a sample scenario is the single simulator's."""
    sample = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "profile_b.yaml"
    code, out, _ = run_cli(capsys, "simulate", str(sample), "-o", str(tmp_path / "out"), "--json")
    assert code == 0 and "fleet" not in json.loads(out)["report"]
    first = json.loads((tmp_path / "out" / "records.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert "replica" not in first
    one = simulate(load_scenario(sample), token_times="runs")
    assert first["end"] == float(one.records.end[0]) and first["request_id"] == "0"


def test_a_sweep_of_a_fleet_scenario_runs_the_fleet() -> None:
    """Each sweep point of a scenario with fleet simulates the whole fleet: 3 replicas carry 3x the load."""
    from servebench.analysis.summary import SLO
    from servebench.serving.sweep import sweep
    one = scenario()
    three = scenario(fleet={"replicas": 3, "router": "least_outstanding"})
    slo = SLO(ttft_s=1.0)
    alone = sweep(one, [10.0], slo=slo, requests=600, search=False).points[0]
    fleet = sweep(three, [10.0], slo=slo, requests=600, search=False).points[0]
    assert not alone.meets_slo and fleet.meets_slo and fleet.slo_attainment > alone.slo_attainment
