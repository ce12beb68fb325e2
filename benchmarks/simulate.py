"""Measure the simulator: requests per CPU-second, and the dashboard's default 10-point sweep.

Cases, each timed with CPU time (``time.process_time``) and wall time, in this one run:
  profile_b    the spec's profile B (300 requests, separate prefill lane, reserve KV)
  paged_10k    sample_data/scenarios/paged_chat.yaml: 10,000 requests, paged KV, chunked prefill
  sweep        profile B at ``default_rates`` (10 points, 2,000 requests each), search off and on
Baselines measured in the same run:
  step-by-step the same simulation with the decode-run fast path off (one heap event per step:
               what a plain discrete-event loop does); ratio = baseline CPU / fast CPU
  real time    the simulated span (seconds of server time) per CPU-second
Results: benchmarks/results/simulate.json.

    python benchmarks/simulate.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servebench.serving.scenario import Scenario, load_scenario
from servebench.serving.simulate import SimResult, simulate
from servebench.analysis.summary import SLO
from servebench.serving.sweep import default_rates, point_from, scenario_at, sweep

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "sample_data" / "scenarios"
RESULTS = HERE / "results"
SWEEP_REQUESTS = 2000
SWEEP_SLO = SLO(ttft_s=5.0, latency_s=15.0)


def timed(fn: Callable[[], Any], repeat: int) -> tuple[Any, float, float]:
    """Return fn's result and its best CPU and wall seconds over ``repeat`` runs."""
    best_cpu = best_wall = float("inf")
    out = None
    for _ in range(repeat):
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    return out, best_cpu, best_wall


def sim_case(sc: Scenario, repeat: int) -> dict[str, Any]:
    fast: SimResult
    fast, cpu, wall = timed(lambda: simulate(sc), repeat)
    slow, cpu_slow, wall_slow = timed(lambda: simulate(sc, decode_runs=False), 1)
    same = fast.records.to_dicts() == slow.records.to_dicts()  # exact, to the last bit
    n = len(fast.records)
    span = fast.window_end_s - fast.window_start_s
    return {
        "requests": n, "simulated_s": span, "engine_steps": fast.engine_steps, "events": fast.events,
        "trace_rows": len(fast.trace), "by_status": fast.status_counts(), "preemptions": fast.preemptions,
        "cpu_s": cpu, "wall_s": wall, "requests_per_cpu_s": n / cpu,
        "simulated_s_per_cpu_s": span / cpu,
        "baseline_step_by_step": {"cpu_s": cpu_slow, "wall_s": wall_slow, "events": slow.events,
                                  "requests_per_cpu_s": n / cpu_slow},
        "speedup_vs_step_by_step": cpu_slow / cpu,
        "same_records_as_step_by_step": same,
    }


def sweep_case(sc: Scenario, repeat: int) -> dict[str, Any]:
    rates = default_rates(sc, 10)
    grid, cpu, wall = timed(lambda: sweep(sc, rates, slo=SWEEP_SLO, requests=SWEEP_REQUESTS, search=False), repeat)
    searched, cpu_s, wall_s = timed(lambda: sweep(sc, rates, slo=SWEEP_SLO, requests=SWEEP_REQUESTS), 1)

    def naive() -> None:
        for r in rates:
            point_from(simulate(scenario_at(sc, r, "rate", SWEEP_REQUESTS), decode_runs=False), r, "rate",
                       SWEEP_SLO, 0.95)

    _, cpu_naive, wall_naive = timed(naive, 1)
    return {
        "scenario": sc.name, "rates": rates, "requests_per_point": SWEEP_REQUESTS, "slo": SWEEP_SLO.model_dump(),
        "grid_only": {"points": len(grid.points), "cpu_s": cpu, "wall_s": wall},
        "with_capacity_search": {"points": len(searched.points), "cpu_s": cpu_s, "wall_s": wall_s,
                                 "capacity_rps": searched.capacity.load, "note": searched.capacity.note},
        "baseline_step_by_step_grid": {"cpu_s": cpu_naive, "wall_s": wall_naive},
        "speedup_vs_step_by_step": cpu_naive / cpu,
        "target": "a few seconds (interactive in the dashboard)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="Runs per timed case (best is kept).")
    args = parser.parse_args()
    b = load_scenario(SCENARIOS / "profile_b.yaml")
    paged = load_scenario(SCENARIOS / "paged_chat.yaml")
    simulate(b)  # warm imports and caches outside the timings
    results = {
        "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine(),
                    "note": "shared 2-core machine; CPU time is the fair measure, wall time is noisy"},
        "profile_b": sim_case(b, args.repeat),
        "paged_10k": sim_case(paged, 1),
        "sweep_10x2000_profile_b": sweep_case(b, args.repeat),
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "simulate.json"
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for key in ("profile_b", "paged_10k"):
        r = results[key]
        print(f"{key}: {r['requests_per_cpu_s']:,.0f} req/CPU-s ({r['speedup_vs_step_by_step']:.1f}x step-by-step, "
              f"{r['simulated_s_per_cpu_s']:,.0f} simulated s per CPU-s)")
    s = results["sweep_10x2000_profile_b"]
    print(f"sweep 10x{SWEEP_REQUESTS}: {s['grid_only']['cpu_s']:.2f} CPU-s grid, "
          f"{s['with_capacity_search']['cpu_s']:.2f} CPU-s with search "
          f"({s['speedup_vs_step_by_step']:.1f}x step-by-step); wrote {out}")


if __name__ == "__main__":
    main()
