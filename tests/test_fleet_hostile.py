"""A hostile user's pass over the fleet: odd ``replica`` columns, odd fleets, odd plan options."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_duckdb_fleet import same_report

from servebench.analysis.record_sets import summarize_path
from servebench.serving.scenario import MAX_REPLICAS


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def records_naming(replicas: list) -> list[dict]:
    """One successful record per replica value, a second apart."""
    return [{"start": float(i), "first_token": i + 0.1, "end": i + 0.5, "status": "success", "output_tokens": 4,
             "replica": r} for i, r in enumerate(replicas)]


def test_blank_replica_text_names_no_replica_in_memory_as_in_duckdb(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", records_naming(["", " ", "\t", "a", "b", "a"]))
    fleet = same_report(path)["fleet"]  # type: ignore[index]
    assert list(fleet["per_replica"]) == ["a", "b"] and fleet["replicas"] == 2
    assert fleet["per_replica"]["a"]["requests"] == 2


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.integers(-3, 12), st.sampled_from(["", " ", "\t", "\u3000", "a", " a", "7"]), st.none()),
                min_size=1, max_size=12))
def test_no_replica_is_named_blank_and_both_engines_agree(tmp_path: Path, replicas: list) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", records_naming(replicas))
    fleet = same_report(path).get("fleet")  # type: ignore[union-attr]
    named = [r for r in replicas if r is not None and str(r).strip()]
    if not named:
        assert fleet is None
        return
    assert all(name.strip() for name in fleet["per_replica"])
    assert sum(r["requests"] for r in fleet["per_replica"].values()) == len(named)


def test_only_blank_replicas_is_no_fleet(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "r.jsonl", records_naming(["", " ", ""]))
    assert "fleet" not in same_report(path)  # type: ignore[operator]


def test_unsigned_replica_numbers_past_int64_keep_their_values(tmp_path: Path) -> None:
    rows = records_naming([0, 1, 2, 3])
    table = pa.table({k: [r[k] for r in rows] for k in rows[0] if k != "replica"}
                     | {"replica": pa.array([2**64 - 1, 1, 2**63, 0], pa.uint64())})
    pq.write_table(table, tmp_path / "r.parquet")
    fleet = summarize_path(tmp_path / "r.parquet", engine="memory").report.fleet
    assert fleet is not None
    assert list(fleet.per_replica) == ["0", "1", str(2**63), str(2**64 - 1)]  # as numbers, none wrapped to -1


CLOSED = """\
server: {kv_budget_tokens: 10000}
step_model: {base_s: 0.01}
workload:
  closed_loop: {users: 3, think_s: 0.0}
  num_requests: 40
  classes: [{prompt: {value: 100}, output: {value: 20}}]
fleet: {replicas: 8, router: least_outstanding}
"""


def test_simulate_reports_every_replica_of_the_fleet_idle_ones_too(tmp_path: Path, capsys) -> None:
    """3 closed-loop users keep 3 of 8 replicas busy: the section has 8, the imbalance is over 8."""
    (tmp_path / "s.yaml").write_text(CLOSED, encoding="utf-8")
    code, out, err = run_cli(capsys, "simulate", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "run"), "--json")
    assert code == 0, err
    fleet = json.loads(out)["report"]["fleet"]
    assert fleet["replicas"] == 8 and list(fleet["per_replica"]) == [str(k) for k in range(8)]
    counts = [r["requests"] for r in fleet["per_replica"].values()]
    assert sum(counts) == 40 and counts.count(0) == 5
    assert fleet["load_imbalance"] == max(counts) * 8 / 40
    idle = fleet["per_replica"]["7"]
    assert idle == {"requests": 0, "in_flight_peak": 0, "token_hit_rate": None, "ttft_p95_s": None,
                    "latency_p95_s": None}


PLAN = ("plan", "--model", "llama-3.1-8b", "--prompt-tokens", "500", "--output-tokens", "100", "--gpus", "H100",
        "--tp", "1", "--max-num-seqs", "64", "--requests", "50", "--slo-ttft", "0.5", "--json")


def test_plan_past_the_largest_simulated_fleet_keeps_division_and_says_so(capsys) -> None:
    """10,000 req/s needs 426 replicas by division: more than a fleet simulation holds (256), so not verified."""
    code, out, err = run_cli(capsys, *PLAN, "--rate", "10000", "--router", "power_of_two")
    assert code == 0, err
    doc = json.loads(out)
    best = doc["options"][0]
    assert best["replicas"] > MAX_REPLICAS and best["fleet_verified"] is False and best["router"] is None
    assert f"more than the {MAX_REPLICAS} replicas a fleet simulation holds" in doc["details"][0]["note"]
    assert doc["fleet"]["options_verified"] == 0
    assert doc["details"][0]["fleet"]["tries"] == [] and "not simulated" in doc["details"][0]["fleet"]["note"]


def test_plan_text_says_why_a_fleet_was_not_simulated(capsys) -> None:
    code, out, err = run_cli(capsys, *PLAN[:-1], "--rate", "10000")
    assert code == 0, err
    assert f"more than the {MAX_REPLICAS} replicas a fleet simulation holds" in " ".join(out.split())


def test_prefix_affinity_without_caching_names_the_fleet_field(tmp_path: Path, capsys) -> None:
    (tmp_path / "s.yaml").write_text(CLOSED.replace("least_outstanding", "prefix_affinity"), encoding="utf-8")
    code, out, err = run_cli(capsys, "simulate", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "run"))
    assert code == 2 and out == ""
    assert err.strip() == (f"error: {tmp_path / 's.yaml'}, field 'fleet': router prefix_affinity routes by the "
                           "replicas' cached prefixes: turn on server.prefix_caching")


def test_plan_keeps_a_scenarios_prefix_caching_and_routes_by_it(tmp_path: Path, capsys) -> None:
    """A class-mix scenario with prefix_caching: the plan simulates caching, so --router prefix_affinity is taken."""
    source = Path(__file__).parent.parent / "sample_data" / "scenarios" / "prefix_cache.yaml"
    code, out, err = run_cli(capsys, "plan", "--model", "llama-3.1-8b", "--gpus", "H100", "--tp", "1",
                             "--max-num-seqs", "64", "--slo-ttft", "1", "--json", "--scenario", str(source),
                             "--rate", "30", "--router", "prefix_affinity")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["workload"]["prefix_caching"] is True
    assert doc["options"][0]["router"] == "prefix_affinity" and doc["options"][0]["fleet_verified"] is True


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--requests", "1", "--requests 1: Input should be greater than or equal to 20"),
    ("--router", "bogus", "--router 'bogus': Input should be 'round_robin', 'least_outstanding', 'power_of_two', "
                          "'prefix_affinity' or 'session_affinity'"),
])
def test_a_bad_plan_option_is_named_as_typed(capsys, option: str, value: str, message: str) -> None:
    code, out, err = run_cli(capsys, *PLAN, "--rate", "2", option, value)
    assert code == 2 and out == ""
    assert " ".join(err.split()) == f"error: {message}"


@pytest.mark.parametrize(("option", "value", "message"), [
    ("--requests", "99999999", "--requests 99999999: Input should be less than or equal to 10000000"),
    ("--weight-dtype", "int3", "--weight-dtype 'int3': unknown dtype 'int3'; expected one of"),
    ("--kv-dtype", "int3", "--kv-dtype 'int3': unknown dtype 'int3'; expected one of"),
])
def test_a_bad_plan_value_is_named_with_its_option(capsys, option: str, value: str, message: str) -> None:
    code, out, err = run_cli(capsys, *PLAN, "--rate", "2", option, value)
    assert code == 2 and out == ""
    assert " ".join(err.split()).startswith(f"error: {message}")


def test_plan_routes_a_scenarios_fleet_by_its_router_unless_told(tmp_path: Path, capsys) -> None:
    """A --scenario's fleet.router is the plan's router (it was dropped for round_robin); --router overrides it."""
    source = Path(__file__).parent.parent / "sample_data" / "scenarios" / "prefix_cache.yaml"
    scenario = tmp_path / "fleet.yaml"
    scenario.write_text(source.read_text(encoding="utf-8") + "fleet: {replicas: 4, router: least_outstanding}\n",
                        encoding="utf-8")
    args = ("plan", "--model", "llama-3.1-8b", "--gpus", "H100", "--tp", "1", "--max-num-seqs", "64", "--slo-ttft",
            "1", "--json", "--scenario", str(scenario), "--rate", "30")
    code, out, err = run_cli(capsys, *args)
    assert code == 0, err
    assert json.loads(out)["fleet"]["router"] == "least_outstanding"
    code, out, err = run_cli(capsys, *args, "--router", "power_of_two")
    assert code == 0, err
    assert json.loads(out)["options"][0]["router"] == "power_of_two"


def test_a_fleet_of_one_is_the_single_replica_run_plus_its_replica_column(tmp_path: Path, capsys) -> None:
    base = CLOSED.replace("fleet: {replicas: 8, router: least_outstanding}\n", "")
    (tmp_path / "one.yaml").write_text(base, encoding="utf-8")
    (tmp_path / "fleet.yaml").write_text(base + "fleet: {}\n", encoding="utf-8")
    reports = {}
    for name in ("one", "fleet"):
        code, out, err = run_cli(capsys, "simulate", str(tmp_path / f"{name}.yaml"), "-o", str(tmp_path / name), "--json")
        assert code == 0, err
        reports[name] = json.loads(out)["report"]
    rows = {name: [json.loads(line) for line in (tmp_path / name / "records.jsonl").read_text().splitlines()]
            for name in reports}
    assert {r.pop("replica") for r in rows["fleet"]} == {0} and rows["fleet"] == rows["one"]
    fleet = reports["fleet"].pop("fleet")
    assert fleet["replicas"] == 1 and fleet["load_imbalance"] == 1 and "fleet" not in reports["one"]
    assert reports["fleet"] == reports["one"] | {"source": reports["fleet"]["source"]}


def test_the_terminal_folds_idle_replicas_into_one_line(tmp_path: Path, capsys) -> None:
    (tmp_path / "s.yaml").write_text(CLOSED.replace("replicas: 8", "replicas: 256"), encoding="utf-8")
    code, out, err = run_cli(capsys, "simulate", str(tmp_path / "s.yaml"), "-o", str(tmp_path / "run"))
    assert code == 0, err
    text = " ".join(out.split())
    assert "Fleet: 256 replicas, load imbalance" in text
    assert "253 replicas took no request: 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 and 243 more" in text
    assert "│ 3 " not in out and "│ 255 " not in out  # no row per idle replica


def test_a_caching_fleet_draws_its_prompt_contents_once(monkeypatch) -> None:
    """256 replicas with prefix caching: one drawing of the prompts' contents, not one per replica."""
    from servebench.serving.fleet import simulate_fleet
    from servebench.serving.scenario import parse_scenario
    from servebench.serving.workload import Workload

    calls = []
    drawn = Workload.prompt_contents
    monkeypatch.setattr(Workload, "prompt_contents", lambda self: calls.append(1) or drawn(self))
    scenario = parse_scenario({
        "server": {"kv_budget_tokens": 100000, "policy": "paged", "prefix_caching": True},
        "step_model": {"base_s": 0.01}, "fleet": {"replicas": MAX_REPLICAS, "router": "prefix_affinity"},
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 50.0}, "num_requests": 20, "classes": [
            {"prompt": {"value": 64}, "output": {"value": 2}, "shared_prefix": {"tokens": 48, "groups": 2}}]}})
    result = simulate_fleet(scenario)
    assert len(calls) == 1 and len(result.result.records) == 20
