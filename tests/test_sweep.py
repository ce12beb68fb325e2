"""Tests for offered-load sweeps, capacity search, sweep figures and the simulate/sweep commands."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli, two_slot_scenario

from servebench.analysis.summary import SLO
from servebench.errors import ConfigError
from servebench.output.figures.sweep import MAX_TRACE_POINTS, latency_vs_load, outcomes_vs_load, trace_over_time
from servebench.serving.scenario import load_scenario
from servebench.serving.simulate import simulate
from servebench.serving.sweep import SweepResult, knee, sweep, sweep_csv

SCENARIOS = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios"
PROFILE_B = SCENARIOS / "profile_b.yaml"


@pytest.fixture(scope="module")
def profile_b_sweep() -> SweepResult:
    calls: list[tuple[int, int]] = []
    result = sweep(load_scenario(PROFILE_B), [0.25, 0.5, 1.0, 2.0], slo=SLO(ttft_s=5.0), requests=400,
                   progress=lambda done, total, p: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] == len(result.points)
    return result


def test_capacity_is_found_between_grid_points(profile_b_sweep: SweepResult) -> None:
    r = profile_b_sweep
    cap = r.capacity
    assert cap.load is not None and cap.upper is not None
    assert 0.5 <= cap.load < cap.upper <= 1.0
    assert cap.upper - cap.load <= 0.02 * cap.upper + 1e-12
    assert cap.evaluations >= 3
    by_load = {p.load: p for p in r.points}
    assert by_load[cap.load].meets_slo and not by_load[cap.upper].meets_slo
    assert by_load[cap.load].source == "search"
    assert [p.load for p in r.points] == sorted(p.load for p in r.points)
    # B holds 8 sequences: every point peaks there, and saturates beyond 1 / 7.4 s x 8 ~ 1.08 req/s
    assert all(p.peak_active <= 8 for p in r.points)
    assert by_load[2.0].throughput_rps < 1.2 and by_load[2.0].timed_out > 0


def test_points_keep_every_request(profile_b_sweep: SweepResult) -> None:
    for p in profile_b_sweep.points:
        assert p.offered == 400
        assert p.completed + p.rejected + p.timed_out + p.cancelled + p.failed == p.offered
        assert p.accepted == p.offered - p.rejected
        assert 0 <= p.slo_attainment <= 1


def test_outputs_json_and_csv(profile_b_sweep: SweepResult) -> None:
    r = profile_b_sweep
    again = SweepResult.model_validate_json(r.model_dump_json())
    assert again == r
    rows = list(csv.DictReader(io.StringIO(sweep_csv(r))))
    assert len(rows) == len(r.points)
    assert {"load", "offered", "ttft_s_p95", "queue_wait_s_p99", "goodput_rps", "meets_slo"} <= set(rows[0])


def test_all_points_meet_widens_upward() -> None:
    r = sweep(two_slot_scenario("small", 2, 300), [0.2, 0.4], slo=SLO(latency_s=30), requests=200)
    assert r.capacity.load is not None and r.capacity.load > 0.4
    assert any(p.source == "search" for p in r.points)


def test_no_point_meets_widens_downward() -> None:
    r = sweep(two_slot_scenario("small", 2, 300), [20.0, 40.0], slo=SLO(ttft_s=0.2), requests=200)
    assert r.capacity.load is None or r.capacity.load < 20.0
    assert r.capacity.upper is not None and r.capacity.upper <= 20.0


def test_concurrency_sweep_uses_whole_users() -> None:
    r = sweep(two_slot_scenario("small", 2, 300), [1, 2, 4, 8], mode="users", slo=SLO(latency_s=2.0), requests=120)
    assert all(p.load == int(p.load) for p in r.points)
    assert r.capacity.load is not None and r.capacity.load == int(r.capacity.load)
    by_load = {p.load: p for p in r.points}
    assert by_load[1].peak_active == 1 and by_load[8].peak_active == 2  # two slots


def test_sweep_rejects_bad_loads() -> None:
    with pytest.raises(ConfigError, match="positive"):
        sweep(two_slot_scenario("small", 2, 300), [0.0, 1.0])
    with pytest.raises(ConfigError, match="whole number"):
        sweep(two_slot_scenario("small", 2, 300), [1.5], mode="users")


def test_knee_is_where_latency_doubles(profile_b_sweep: SweepResult) -> None:
    k = knee(profile_b_sweep.points)
    assert k is not None and 0.5 < k <= 2.0
    assert knee([]) is None


def test_knee_sees_ttft_growth_before_latency_doubles(profile_b_sweep: SweepResult) -> None:
    low, mid, high = (profile_b_sweep.points[0].model_copy(deep=True) for _ in range(3))
    for p, load, ttft, latency in ((low, 1.0, 0.15, 6.3), (mid, 2.0, 0.2, 6.5), (high, 3.0, 5.2, 11.0)):
        p.load, p.ttft_s["p95"], p.latency_s["p95"] = load, ttft, latency  # latency grows 1.75x, TTFT 35x
    assert knee([low, mid, high]) == 3.0
    mid.ttft_s["p95"] = 0.31  # just over twice the lowest load's TTFT
    assert knee([low, mid, high]) == 2.0


def test_figures_mark_capacity_and_knee(profile_b_sweep: SweepResult) -> None:
    fig = latency_vs_load(profile_b_sweep)
    xs = [s.x0 for s in fig.layout.shapes]
    assert profile_b_sweep.capacity.load in xs and profile_b_sweep.knee_load in xs
    assert len(fig.data) == 7  # p50/p95/p99 of latency and TTFT, and latency p95 with failures as infinity
    names = [d.name for d in outcomes_vs_load(profile_b_sweep).data]
    assert names == ["offered", "completed", "within SLOs", "rejected", "timed out"]


def test_trace_figure_from_trace_or_columns() -> None:
    result = simulate(load_scenario(PROFILE_B))
    fig = trace_over_time(result.trace, kv_budget_tokens=result.kv_budget_tokens)
    assert max(fig.data[0].y) == 8
    cols = result.trace.columns()
    many = {k: np.tile(np.asarray(v), 5) for k, v in cols.items() if k != "lane"}
    many["start_s"] = np.arange(many["start_s"].size, dtype=float)
    fig2 = trace_over_time(many)
    assert len(fig2.data[0].x) <= MAX_TRACE_POINTS


# --------------------------------------------------------------------------- commands


def test_simulate_command_writes_records_trace_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", str(PROFILE_B), "-o", str(tmp_path), "--json", "--trace-format", "csv")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    assert doc["simulation"]["offered"] == 300 and doc["simulation"]["peak_running"] == 8
    assert doc["report"]["offered"] == 300
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert len(lines) == 300 and json.loads(lines[0])["slice"] == "review"
    header = (tmp_path / "steps.csv").read_text().splitlines()[0]
    assert header == ("start_s,duration_s,steps,lane,running,waiting,admitted,preempted,prefill_seqs,prefill_tokens,"
                      "decode_seqs,kv_tokens_read,kv_tokens_used,kv_tokens_held,compute_start_s,compute_s")
    assert json.loads((tmp_path / "summary.json").read_text())["simulation"]["scenario"] == "profile_b"
    # the trace fits back to the scenario's flat timings
    code, out, err = run_cli(capsys, "fit-steps", str(tmp_path / "steps.csv"), "--json")
    assert code == 0, err
    assert json.loads(out)["model"]["per_prefill_token_s"] == pytest.approx(1.2 / 7800, rel=1e-6)


def test_simulate_command_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "simulate", str(SCENARIOS / "profile_a.yaml"), "-o", str(tmp_path),
                             "--requests", "50", "--rate", "2", "--figures")
    assert code == 0, err
    assert "Simulated profile_a" in out and (tmp_path / "steps.jsonl").exists()
    html = (tmp_path / "trace.html").read_text()
    assert "Running sequences and waiting requests" in html and (tmp_path / "plotly.min.js").exists()


def test_sweep_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "sweep", str(PROFILE_B), "--rates", "0.5,1,2", "--requests", "200",
                             "--slo-ttft", "5", "-o", str(tmp_path), "--json", "--figures")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["capacity"]["load"] is not None and len(doc["points"]) >= 3
    assert (tmp_path / "sweep.csv").read_text().startswith("load,")
    assert (tmp_path / "sweep_latency.html").exists()
    code, out, err = run_cli(capsys, "sweep", str(PROFILE_B), "--rates", "0.5,1", "--requests", "100", "-o",
                             str(tmp_path / "t"), "--no-search")
    assert code == 0, err
    assert "usable capacity" in out


def test_sweep_command_prints_names_verbatim(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    odd = tmp_path / "[red]b.yaml"  # rich markup in a scenario name or path is text, not a style
    odd.write_text(PROFILE_B.read_text().replace("name: profile_b", 'name: "b[/]x"'))
    code, out, err = run_cli(capsys, "sweep", str(odd), "--rates", "0.5,1", "--requests", "50", "-o",
                             str(tmp_path / "[red]o"), "--no-search")
    assert code == 0, err
    assert "Sweep of b[/]x" in out and "[red]o" in out
    code, out, err = run_cli(capsys, "simulate", str(odd), "--requests", "50", "-o", str(tmp_path / "s"),
                             "--json")
    assert code == 0, err


def test_sweep_command_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "sweep", str(PROFILE_B), "--rates", "1", "--concurrency", "2", "-o", str(tmp_path))
    assert code == 2 and err.strip().count("\n") == 0 and "not both" in err
    code, _, err = run_cli(capsys, "sweep", str(PROFILE_B), "--rates", "1,x", "-o", str(tmp_path))
    assert code == 2 and "--rates" in err


class _Met:
    def __init__(self, meets: bool) -> None:
        self.meets_slo = meets


def _search(threshold: float, grid: list[float], mode: str = "rate", tolerance: float = 0.02):
    """Run the capacity search against a server that meets the SLOs exactly up to ``threshold``."""
    from servebench.serving.sweep import search_capacity

    points: dict[float, Any] = {}
    calls: list[float] = []

    def run(x: float, source: str) -> Any:
        if x not in points:
            calls.append(x)
            points[x] = _Met(x <= threshold)
        return points[x]

    for x in grid:
        run(x, "grid")
    calls.clear()
    return search_capacity(run, grid, points, mode, tolerance, 10), calls  # type: ignore[arg-type]


@pytest.mark.parametrize("threshold, grid", [(3.3, [1.0, 2.0, 4.0, 8.0]), (4.0, [1.0, 2.0, 4.0, 8.0]),
                                             (8.0, [1.0, 2.0, 4.0, 8.0]), (1.0, [1.0, 2.0]),
                                             (20.0, [1.0, 2.0]), (0.3, [1.0, 2.0])])
def test_search_brackets_the_threshold_within_tolerance(threshold: float, grid: list[float]) -> None:
    cap, calls = _search(threshold, grid)
    assert cap.load is not None and cap.upper is not None
    assert cap.load <= threshold < cap.upper
    assert cap.upper - cap.load <= 0.02 * cap.upper
    assert cap.evaluations == len(calls)  # every evaluation ran once, none repeated


def test_search_gives_up_honestly_at_the_edges() -> None:
    cap, calls = _search(1e-6, [1.0, 2.0])  # nothing meets: six halvings, then no capacity
    assert (cap.load, cap.upper, len(calls)) == (None, 1 / 64, 6)
    cap, _ = _search(1e9, [1.0, 2.0])  # everything meets: six doublings, capacity above the last
    assert (cap.load, cap.upper) == (128.0, None) and "above" in cap.note


def test_search_over_users_stops_at_one_user() -> None:
    cap, calls = _search(5, [1.0, 2.0, 4.0, 8.0], mode="users")
    assert (cap.load, cap.upper) == (5.0, 6.0) and all(x == int(x) for x in calls)
    cap, calls = _search(0, [1.0, 2.0, 4.0], mode="users")  # even one user misses
    assert (cap.load, cap.upper, calls) == (None, 1.0, [])
    cap, _ = _search(3, [4.0, 8.0], mode="users")  # below the grid, by halving then bisecting
    assert (cap.load, cap.upper) == (3.0, 4.0)


# --- a trace, swept by its speedup ------------------------------------------------------------------------------

MOONCAKE = Path(__file__).resolve().parent.parent / "sample_data" / "traces" / "mooncake_conversation_300.jsonl"


def trace_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "replay.yaml"
    path.write_text(f"name: replay\nserver: {{kv_budget_tokens: 400000, prefix_caching: true, max_num_seqs: 64}}\n"
                    f"step_model: {{base_s: 0.002, per_prefill_token_s: 0.00002, per_decode_seq_s: 0.0001}}\n"
                    f"workload: {{trace: {{path: {MOONCAKE}}}}}\n")
    return path


def test_a_trace_is_swept_by_its_speedup_with_the_same_requests(tmp_path: Path) -> None:
    sc = load_scenario(trace_scenario(tmp_path))
    result = sweep(sc, [1.0, 2.0, 4.0], mode="speedup", slo=SLO(ttft_s=2.0), requests=150)
    grid = {p.load: p for p in result.points if p.source == "grid"}
    assert result.mode == "speedup" and all(p.offered == 150 for p in result.points)
    # the same arrivals divided by the speedup: the offered rate scales with it exactly
    assert grid[2.0].offered_rps == pytest.approx(2 * grid[1.0].offered_rps, rel=1e-12)
    assert grid[4.0].offered_rps == pytest.approx(4 * grid[1.0].offered_rps, rel=1e-12)
    assert grid[1.0].ttft_s["p95"] <= grid[4.0].ttft_s["p95"]
    assert result.capacity.note and (result.capacity.load is None or result.capacity.load > 0)
    with pytest.raises(ConfigError, match="replays a trace: its load is the trace.s speedup"):
        sweep(sc, [1.0], mode="rate")


def test_sweep_command_over_a_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = trace_scenario(tmp_path)
    code, out, err = run_cli(capsys, "sweep", str(scenario), "--speedups", "0.5,1", "--requests", "60", "--no-search",
                             "-o", str(tmp_path / "o"), "--json", "--figures")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "speedup" and [p["load"] for p in doc["points"]] == [0.5, 1.0]
    assert "Trace speedup" in (tmp_path / "o" / "sweep_latency.html").read_text()
    code, out, err = run_cli(capsys, "sweep", str(scenario), "--requests", "40", "--no-search", "-o",
                             str(tmp_path / "d"))
    assert code == 0 and "by trace speedup" in out and "2.5" in out  # the default grid: 0.25x to 2.5x
    code, _, err = run_cli(capsys, "sweep", str(scenario), "--rates", "1,2", "-o", str(tmp_path / "r"))
    assert code == 2 and "--speedups, not --rates" in err and err.strip().count("\n") == 0
    code, _, err = run_cli(capsys, "sweep", str(PROFILE_B), "--speedups", "1,2", "-o", str(tmp_path / "s"))
    assert code == 2 and "replays no trace" in err
    code, _, err = run_cli(capsys, "simulate", str(scenario), "--rate", "2", "-o", str(tmp_path / "x"))
    assert code == 2 and "replays a trace" in err
