"""Measure what prefix caching costs the simulator: CPU time with caching on against off, in one run.

Cases (10,000 requests each):
  paged_10k        sample_data/scenarios/paged_chat.yaml: cold prompts, so caching hashes and caches
                   every full prompt block and never hits (the cost with nothing to gain)
  shared_10k       sample_data/scenarios/prefix_cache.yaml at 10,000 requests and a rate both settings
                   serve: 4 shared documents, most prompt tokens hit
Each is timed with caching off and on (best CPU time of ``--repeat`` runs); ratio = on / off. The
issue's bound is 1.5 on the 10,000-request scenario (paged_10k). Results: benchmarks/results/prefix_cache.json.

    python benchmarks/prefix_cache.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from servebench.analysis.summary import build_report
from servebench.serving.scenario import Scenario, load_scenario
from servebench.serving.simulate import simulate

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "sample_data" / "scenarios"
RESULTS = HERE / "results"
BOUND = 1.5


def with_caching(sc: Scenario, on: bool) -> Scenario:
    return sc.model_copy(update={"server": sc.server.model_copy(update={"prefix_caching": on})})


def best_cpu(sc: Scenario, repeat: int) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        c0 = time.process_time()
        result = simulate(sc)
        best = min(best, time.process_time() - c0)
    return best, result


def case(sc: Scenario, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for on in (False, True):
        cpu, result = best_cpu(with_caching(sc, on), repeat)
        report = build_report(result.records, result.window_start_s, result.window_end_s)
        pc = report.prefix_cache
        out["on" if on else "off"] = {
            "cpu_s": cpu, "requests": len(result.records), "requests_per_cpu_s": len(result.records) / cpu,
            "events": result.events, "engine_steps": result.engine_steps, "by_status": result.status_counts(),
            "ttft_p50_s": report.ttft_s.at(50), "request_tpot_p50_s": report.request_tpot_s.at(50),
            "token_hit_rate": None if pc is None else pc.token_hit_rate,
            "prefix_evictions": result.prefix_evictions,
        }
    out["ratio_on_over_off"] = out["on"]["cpu_s"] / out["off"]["cpu_s"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    simulate(load_scenario(SCENARIOS / "profile_a.yaml"))  # warm imports and caches
    paged = load_scenario(SCENARIOS / "paged_chat.yaml")
    shared = load_scenario(SCENARIOS / "prefix_cache.yaml")
    shared = shared.model_copy(update={"workload": shared.workload.model_copy(update={"num_requests": 10_000})})
    results = {
        "machine": {"python": platform.python_version(), "processor": platform.machine(),
                    "note": "shared 2-core machine; CPU time (time.process_time) is the fair measure"},
        "bound": BOUND,
        "paged_10k": case(paged, args.repeat),
        "shared_10k": case(shared, args.repeat),
    }
    results["within_bound"] = results["paged_10k"]["ratio_on_over_off"] <= BOUND
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "prefix_cache.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for name in ("paged_10k", "shared_10k"):
        r = results[name]
        print(f"{name}: off {r['off']['cpu_s']:.2f} s, on {r['on']['cpu_s']:.2f} s CPU, "
              f"ratio {r['ratio_on_over_off']:.2f} (hit rate {r['on']['token_hit_rate']})")
    print(f"within {BOUND}x on paged_10k: {results['within_bound']}")


if __name__ == "__main__":
    main()
