"""Disaggregated prefill and decode against colocated replicas on the Azure code trace (issue 35 section 2).

The workload: the first ``--requests`` (default 3,000) requests of the Azure LLM inference code trace
(benchmarks/data/traces/AzureLLMInferenceTrace_code.csv: mean prompt 2,048 tokens, mean output 28), sped up.
Every instance is one GPU serving a Llama-3.1-8B shape (32 layers, 8 KV heads of 128, bf16: 128 KiB of KV a
token) with ``STEPS``, the coefficients of an H100's roofline (25,000 prompt tokens/s, a 6 ms decode step that
reads the weights, KV read at 3.35 TB/s), paged KV of 50 GiB, chunked prefill of 2,048 tokens a step.

At 4 GPUs each: 4 colocated replicas behind least_outstanding, and P prefill + D decode instances (P + D = 4)
behind least_outstanding with a 50 GB/s link (a 400 Gb/s NIC), and 3 + 1 over 5 GB/s (a 40 Gb/s link). For each
speedup: TTFT p50 and p95, request TPOT p95, the mean KV transfer, and the share of requests within two SLOs:
``tpot_tight`` (TTFT <= 2 s, TPOT <= 25 ms: an interactive stream) and ``ttft_tight`` (TTFT <= 500 ms, TPOT <=
100 ms: a completion wanted at once). A configuration serves a speedup within an SLO when 95 % of its requests
meet it; ``best_speedup`` is the highest speedup of the grid it serves. docs/fleet.md quotes these numbers.

    python benchmarks/disagg.py [--requests 3000]   # writes benchmarks/results/disagg.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from servebench.analysis.percentiles import percentile
from servebench.serving.disagg import simulate_disaggregated
from servebench.serving.fleet import simulate_fleet
from servebench.serving.scenario import FleetSpec, Scenario, parse_scenario
from servebench.serving.simulate import SimResult

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "disagg.json"
TRACE = HERE / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"
SHAPE = {"layers": 32, "kv_heads": 8, "head_dim": 128, "bytes_per_element": 2}
SERVER = {"policy": "paged", "model": SHAPE, "kv_budget_gib": 50, "max_num_seqs": 256,
          "max_num_batched_tokens": 2048, "chunked_prefill": True, "timeout_s": 120}
STEPS = {"base_s": 0.006, "per_prefill_token_s": 0.00004, "per_decode_seq_s": 0.0001, "per_kv_token_s": 0.00000004}
SPEEDUPS = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
SLOS = {"tpot_tight": (2.0, 0.025), "ttft_tight": (0.5, 0.100)}  # (TTFT limit, request TPOT limit), s
TARGET = 0.95
CONFIGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("colocated 4", {"replicas": 4, "router": "least_outstanding"}),
    ("1P + 3D, 50 GB/s", {"prefill_replicas": 1, "decode_replicas": 3, "kv_transfer_gbps": 50}),
    ("2P + 2D, 50 GB/s", {"prefill_replicas": 2, "decode_replicas": 2, "kv_transfer_gbps": 50}),
    ("3P + 1D, 50 GB/s", {"prefill_replicas": 3, "decode_replicas": 1, "kv_transfer_gbps": 50}),
    ("3P + 1D, 5 GB/s", {"prefill_replicas": 3, "decode_replicas": 1, "kv_transfer_gbps": 5}),
)


def scenario(speedup: float, requests: int) -> Scenario:
    """The trace's first ``requests`` requests at ``speedup`` on the H100-like server."""
    return parse_scenario({"name": f"azure_code_x{speedup:g}", "seed": 0, "server": SERVER, "step_model": STEPS,
                           "workload": {"trace": {"path": str(TRACE), "speedup": speedup,
                                                  "max_requests": requests}}})


def run(sc: Scenario, fleet: dict[str, Any]) -> tuple[SimResult, np.ndarray | None]:
    spec = FleetSpec(**fleet)
    if spec.disaggregated:
        pd = simulate_disaggregated(sc, spec, token_times=False)
        return pd.result, pd.kv_transfer_s
    return simulate_fleet(sc, spec, token_times=False).result, None


def measure(result: SimResult, transfer_s: np.ndarray | None) -> dict[str, Any]:
    t = result.records
    ok = t.is_success
    ttft = (t.first_token - t.start)[ok]
    many = ok & (t.output_tokens > 1)
    tpot = np.full(len(t), np.inf)
    tpot[many] = (t.end - t.first_token)[many] / (t.output_tokens[many] - 1)
    tpot[ok & (t.output_tokens == 1)] = 0.0
    ttft_all = np.where(ok, t.first_token - t.start, np.inf)
    within = {name: float(np.mean((ttft_all <= lim_ttft) & (tpot <= lim_tpot)))
              for name, (lim_ttft, lim_tpot) in SLOS.items()}
    return {"requests": len(t), "successes": int(ok.sum()),
            "ttft_p50_s": percentile(ttft, 50), "ttft_p95_s": percentile(ttft, 95),
            "tpot_p95_s": percentile(tpot[many], 95),
            "kv_transfer_mean_s": None if transfer_s is None else float(np.nanmean(transfer_s)),
            "within_slo": within}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    started = time.process_time()
    rows: dict[str, list[dict[str, Any]]] = {}
    for name, fleet in CONFIGS:
        rows[name] = []
        for speedup in SPEEDUPS:
            result, transfer = run(scenario(speedup, args.requests), fleet)
            row = {"speedup": speedup, **measure(result, transfer)}
            rows[name].append(row)
            print(f"{name:>18} x{speedup:<4g} TTFT p50 {row['ttft_p50_s']:.3f} p95 {row['ttft_p95_s']:.3f}  "
                  f"TPOT p95 {row['tpot_p95_s'] * 1000:.1f} ms  "
                  + "  ".join(f"{k} {v:.1%}" for k, v in row["within_slo"].items()), flush=True)
    best = {name: {slo: max((r["speedup"] for r in rs if r["within_slo"][slo] >= TARGET), default=None)
                   for slo in SLOS} for name, rs in rows.items()}
    for name, b in best.items():
        print(f"{name:>18} best speedup within " + ", ".join(f"{k}: {v}" for k, v in b.items()))
    doc = {"trace": str(TRACE.relative_to(HERE.parent)), "requests": args.requests, "server": SERVER,
           "step_model": STEPS, "slos": {k: {"ttft_s": a, "tpot_s": b} for k, (a, b) in SLOS.items()},
           "target": TARGET, "speedups": list(SPEEDUPS), "configs": dict(CONFIGS), "rows": rows,
           "best_speedup": best, "cpu_s": round(time.process_time() - started, 1), "python": platform.python_version()}
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {RESULTS} ({doc['cpu_s']} CPU s)")


if __name__ == "__main__":
    main()
