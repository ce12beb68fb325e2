"""Measure the fleet simulator against one replica on the same total of requests (issue 35: at most about 4x).

Cases, each timed with CPU time (``time.process_time``; the machine is shared, wall time is noisy):
  paged         sample_data/scenarios/paged_chat.yaml at ``--requests`` (default 100,000): one replica at its
                1.6 req/s, and 4 replicas at 4 x 1.6 req/s (the same load per replica) under round_robin;
                least_outstanding at a fifth of the requests (its cost per request is the same; the run stays
                under a minute)
  conversations chats of 4 turns with 2 s think time (a turn arrives when the one before it ends, so a
                replica's decode run also stops where another replica's end could send a turn): one replica
                and 4 under session_affinity at a fifth of the requests
Each case reports CPU seconds, heap events and the ratio fleet / one replica. Results: benchmarks/results/fleet.json.

    python benchmarks/fleet.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

from servebench.serving.fleet import simulate_fleet
from servebench.serving.scenario import FleetSpec, Scenario, load_scenario, parse_scenario
from servebench.serving.simulate import SimResult, simulate
from servebench.serving.sweep import scenario_at

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPLICAS = 4
TARGET_RATIO = 4.0  # issue 35: a 4-replica fleet costs at most about 4x one replica on the same total


def _timed(run: Any) -> tuple[float, SimResult]:
    start = time.process_time()
    result = run()
    return time.process_time() - start, result


def _row(cpu_s: float, result: SimResult) -> dict[str, Any]:
    n = len(result.records)
    return {"requests": n, "cpu_s": round(cpu_s, 3), "requests_per_cpu_s": round(n / cpu_s), "events": int(result.events),
            "engine_steps": int(result.engine_steps), "by_status": result.status_counts()}


def compare(one: Scenario, fleet: Scenario, router: str) -> dict[str, Any]:
    """Return one replica's and the fleet's costs on the same total of requests, and their ratio."""
    cpu_one, single = _timed(lambda: simulate(one, token_times=False))
    cpu_fleet, many = _timed(lambda: simulate_fleet(fleet, FleetSpec(replicas=REPLICAS, router=router),
                                                    token_times=False).result)
    return {"router": router, "one_replica": _row(cpu_one, single), "fleet": _row(cpu_fleet, many),
            "cpu_ratio": round(cpu_fleet / cpu_one, 2), "target_ratio": TARGET_RATIO}


def conversations(requests: int, rate_rps: float) -> Scenario:
    """Chats of 4 turns, 2 s think time, on the paged sample server."""
    base = load_scenario(HERE.parent / "sample_data" / "scenarios" / "paged_chat.yaml")
    doc = base.model_dump(exclude_none=True)
    doc["workload"] = {"arrival": {"kind": "poisson", "rate_rps": rate_rps}, "num_requests": requests,
                       "classes": [{"name": "chat", "prompt": {"kind": "lognormal", "median": 300, "sigma": 0.8,
                                                               "max_tokens": 4000},
                                    "output": {"kind": "lognormal", "median": 200, "sigma": 0.9, "max_tokens": 1024},
                                    "conversation": {"turns": 4, "think_s": 2.0}}]}
    return parse_scenario(doc, "conversations")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    args = parser.parse_args()
    paged = load_scenario(HERE.parent / "sample_data" / "scenarios" / "paged_chat.yaml")
    rate = paged.workload.arrival.rate_rps  # type: ignore[union-attr]
    small = max(args.requests // 5, 1)
    results: dict[str, Any] = {
        "machine": {"python": platform.python_version(), "processor": platform.machine(),
                    "note": "shared 2-core machine; CPU time is the fair measure"},
        "replicas": REPLICAS,
        "paged_round_robin": compare(scenario_at(paged, rate, "rate", args.requests),
                                     scenario_at(paged, rate * REPLICAS, "rate", args.requests), "round_robin"),
        "paged_least_outstanding": compare(scenario_at(paged, rate, "rate", small),
                                           scenario_at(paged, rate * REPLICAS, "rate", small), "least_outstanding"),
        "conversations_session_affinity": compare(conversations(small, 0.4), conversations(small, 0.4 * REPLICAS),
                                                  "session_affinity"),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fleet.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for name, case in results.items():
        if isinstance(case, dict) and "cpu_ratio" in case:
            print(f"{name}: one replica {case['one_replica']['cpu_s']} s, {REPLICAS} replicas "
                  f"{case['fleet']['cpu_s']} s CPU for {case['fleet']['requests']:,} requests: {case['cpu_ratio']}x")


if __name__ == "__main__":
    main()
