"""Measure the capacity planner: a typical plan against one simulation of the scenario it plans, in the same run.

Cases (CPU time with ``time.process_time`` and wall time; the best of ``--repeat`` runs):
  plan_8b        llama-3.1-8b at 20 requests/s, 2,000-token prompts, 200-token outputs, TTFT 2 s and TPOT
                 50 ms for 95% of requests, every GPU preset x TP 1, 2, 4, 8 x max_num_seqs 16, 64, 256
  plan_70b       the same traffic on llama-3.1-70b (the dashboard's interview question, every GPU preset)
Baselines measured in the same run:
  one_simulation the cheapest option's replica simulated once at its planned load (300 requests): a plan's
                 cost in simulations; ratio = plan CPU / one simulation's CPU
  exhaustive     the same 8B plan with every fitting configuration searched (no cost bound, what a plan without
                 branch and bound costs); ratio = exhaustive CPU / plan CPU
Target: a typical plan well under 10 s of wall time on the shared 2-core machine.
Results: benchmarks/results/plan.json.

    python benchmarks/plan.py [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import platform
from pathlib import Path
from typing import Any

from simulate import timed  # benchmarks/simulate.py: best CPU and wall time over repeats

from servebench.analysis.summary import SLO
from servebench.capacity.model_presets import get_preset
from servebench.planning import PlanRequest, Workload, evaluate_configurations, plan, planned_point

RESULTS = Path(__file__).resolve().parent / "results"
RATE_RPS = 20.0


def request(model: str) -> PlanRequest:
    return PlanRequest(model=get_preset(model), workload=Workload.fixed(2000, 200), slo=SLO(ttft_s=2.0, tpot_s=0.05))


def plan_case(model: str, repeat: int) -> dict[str, Any]:
    req = request(model)
    (evaluation, result), cpu, wall = timed(lambda: plan(req, RATE_RPS), repeat)
    best = result.best
    assert best is not None, result.reason
    point, sim_cpu, sim_wall = timed(lambda: planned_point(evaluation, best, RATE_RPS), repeat)
    return {
        "model": model, "rate_rps": RATE_RPS, "cpu_s": cpu, "wall_s": wall,
        "simulations": evaluation.simulations, "configurations": len(evaluation.configs) + len(evaluation.skipped),
        "pruned_without_simulating": evaluation.pruned, "skipped_by_cost_bound": len(evaluation.skipped),
        "best": best.model_dump(), "best_meets_slo_when_resimulated": point.meets_slo,
        "one_simulation": {"cpu_s": sim_cpu, "wall_s": sim_wall, "load_rps": point.load},
        "plan_over_one_simulation_cpu": cpu / sim_cpu,
        "under_10_s_wall": wall < 10,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    out: dict[str, Any] = {"machine": {"python": platform.python_version(), "processor": platform.machine(),
                                       "note": "shared 2-core machine; CPU time is the fair measure, wall time "
                                               "is noisy"}}
    out["plan_8b"] = plan_case("llama-3.1-8b", args.repeat)
    out["plan_70b"] = plan_case("llama-3.1-70b", args.repeat)
    full, cpu, wall = timed(lambda: evaluate_configurations(request("llama-3.1-8b")), 1)
    out["exhaustive_8b"] = {"cpu_s": cpu, "wall_s": wall, "simulations": full.simulations,
                            "exhaustive_over_plan_cpu": cpu / out["plan_8b"]["cpu_s"]}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "plan.json").write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    for name in ("plan_8b", "plan_70b"):
        r = out[name]
        print(f"{name}: {r['wall_s']:.2f} s wall, {r['cpu_s']:.2f} s CPU, {r['simulations']} simulations = "
              f"{r['plan_over_one_simulation_cpu']:.0f}x one simulation; best {r['best']['replicas']} x "
              f"{r['best']['gpu']} x{r['best']['tensor_parallel']}")
    e = out["exhaustive_8b"]
    print(f"exhaustive 8B: {e['cpu_s']:.1f} s CPU, {e['simulations']} simulations, "
          f"{e['exhaustive_over_plan_cpu']:.1f}x the plan")


if __name__ == "__main__":
    main()
