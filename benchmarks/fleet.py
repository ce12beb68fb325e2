"""Measure the fleet simulator against one replica on the same total of requests (issue 35: at most about 4x).

Cases, each timed with CPU time (``time.process_time``; the machine is shared, wall time is noisy):
  paged         sample_data/scenarios/paged_chat.yaml at ``--requests`` (default 100,000): one replica at its
                1.6 req/s, and 4 replicas at 4 x 1.6 req/s (the same load per replica) under round_robin;
                least_outstanding at a fifth of the requests (its cost per request is the same; the run stays
                under a minute)
  conversations chats of 4 turns with 2 s think time (a turn arrives when the one before it ends, so a
                replica's decode run also stops where another replica's end could send a turn): one replica
                and 4 under session_affinity at a fifth of the requests
Each case reports CPU seconds, heap events and the ratio fleet / one replica.

``--case mooncake`` replays the Mooncake conversation trace (benchmarks/data/traces/conversation_trace.jsonl,
all 12,031 requests) on 4 replicas of ``MOONCAKE_SERVER`` at speedups 2 and 2.5 (2.5: every replica busy),
under each router but session_affinity (the trace names no conversations, so it is least_outstanding there):
the fleet's token hit rate, TTFT p50 and p99, latency p99, load imbalance, and each replica's busy share
(its engine's step time over the run). docs/fleet.md quotes these numbers.

Results: benchmarks/results/fleet.json (each case its key; a run keeps the other cases' results).

    python benchmarks/fleet.py [--case speed|mooncake] [--requests 100000]
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from servebench.analysis.fleet import fleet_report
from servebench.analysis.percentiles import percentile
from servebench.serving.fleet import simulate_fleet
from servebench.serving.scenario import FleetSpec, Scenario, load_scenario, parse_scenario
from servebench.serving.simulate import SimResult, simulate
from servebench.serving.sweep import scenario_at

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
REPLICAS = 4
TARGET_RATIO = 4.0  # issue 35: a 4-replica fleet costs at most about 4x one replica on the same total
MOONCAKE = HERE / "data" / "traces" / "conversation_trace.jsonl"
# one replica: a GPU of 40,000 prompt tokens/s with a KV store of 3M tokens (HBM and host memory, as Mooncake's
# pool), prefix caching in 128-token blocks, chunked prefill of 8,192 tokens a step
MOONCAKE_SERVER = {"policy": "paged", "kv_budget_tokens": 3_000_000, "block_size_tokens": 128, "max_num_seqs": 128,
                   "max_num_batched_tokens": 8192, "prefix_caching": True}
MOONCAKE_STEPS = {"base_s": 0.015, "per_prefill_token_s": 0.000025, "per_decode_seq_s": 0.0002,
                  "per_kv_token_s": 0.00000002}
MOONCAKE_ROUTERS = ("round_robin", "least_outstanding", "power_of_two", "prefix_affinity")


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


def mooncake(speedup: float, max_requests: int | None = None, path: Path = MOONCAKE) -> Scenario:
    """The Mooncake conversation trace (``path``: the whole file, or an excerpt of its first rows) at ``speedup`` on
    ``MOONCAKE_SERVER``."""
    trace: dict[str, Any] = {"path": str(path), "speedup": speedup}
    if max_requests is not None:
        trace["max_requests"] = max_requests
    return parse_scenario({"name": f"mooncake_x{speedup:g}", "seed": 1, "server": MOONCAKE_SERVER,
                           "step_model": MOONCAKE_STEPS, "workload": {"trace": trace}}, "mooncake")


def mooncake_case(speedup: float) -> dict[str, Any]:
    """Return each router's fleet figures on the Mooncake trace at ``speedup``."""
    out: dict[str, Any] = {}
    for router in MOONCAKE_ROUTERS:
        cpu_s, fl = _timed(lambda: simulate_fleet(mooncake(speedup), FleetSpec(replicas=REPLICAS, router=router),
                                                  token_times=False))
        records = fl.result.records
        report = fleet_report(records)
        assert report is not None
        ok = records.is_success
        span_s = float(records.end.max() - records.start.min())
        out[router] = {
            "token_hit_rate": round(report.token_hit_rate or 0.0, 4), "load_imbalance": round(report.load_imbalance, 3),
            "ttft_p50_s": round(percentile((records.first_token - records.start)[ok], 50) or 0.0, 3),
            "ttft_p99_s": round(percentile((records.first_token - records.start)[ok], 99) or 0.0, 3),
            "latency_p99_s": round(percentile((records.end - records.start)[ok], 99) or 0.0, 3),
            "success_share": round(float(ok.mean()), 4),
            "busy_share": [round(float(np.sum(t.duration_s)) / span_s, 3) for t in fl.traces],
            "in_flight_peak": [r.in_flight_peak for r in report.per_replica.values()],
            "requests": len(records), "cpu_s": round(cpu_s, 2)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=("speed", "mooncake"), default="speed")
    parser.add_argument("--requests", type=int, default=100_000)
    args = parser.parse_args()
    path = RESULTS / "fleet.json"
    results: dict[str, Any] = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    results["machine"] = {"python": platform.python_version(), "processor": platform.machine(),
                          "note": "shared 2-core machine; CPU time is the fair measure"}
    results["replicas"] = REPLICAS
    if args.case == "mooncake":
        results["mooncake"] = {"trace": MOONCAKE.name, "server": MOONCAKE_SERVER, "step_model": MOONCAKE_STEPS,
                               **{f"speedup_{s:g}": mooncake_case(s) for s in (2.0, 2.5)}}
        path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        for key, case in results["mooncake"].items():
            if key.startswith("speedup_"):
                for router, row in case.items():
                    print(f"{key} {router:18s} hit {row['token_hit_rate']:.3f} TTFT p50 {row['ttft_p50_s']} s "
                          f"p99 {row['ttft_p99_s']} s busy {row['busy_share']}")
        return
    paged = load_scenario(HERE.parent / "sample_data" / "scenarios" / "paged_chat.yaml")
    rate = paged.workload.arrival.rate_rps  # type: ignore[union-attr]
    small = max(args.requests // 5, 1)
    results.update({
        "paged_round_robin": compare(scenario_at(paged, rate, "rate", args.requests),
                                     scenario_at(paged, rate * REPLICAS, "rate", args.requests), "round_robin"),
        "paged_least_outstanding": compare(scenario_at(paged, rate, "rate", small),
                                           scenario_at(paged, rate * REPLICAS, "rate", small), "least_outstanding"),
        "conversations_session_affinity": compare(conversations(small, 0.4), conversations(small, 0.4 * REPLICAS),
                                                  "session_affinity"),
    })
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    for name, case in results.items():
        if isinstance(case, dict) and "cpu_ratio" in case:
            print(f"{name}: one replica {case['one_replica']['cpu_s']} s, {REPLICAS} replicas "
                  f"{case['fleet']['cpu_s']} s CPU for {case['fleet']['requests']:,} requests: {case['cpu_ratio']}x")


if __name__ == "__main__":
    main()
