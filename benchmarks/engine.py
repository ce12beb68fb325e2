"""Measure continuous batching against one request at a time, on the same model and workload.

Both runs serve the same closed-loop workload (16 users with no think time, so up to 16
sequences want to run at once) through the real-time engine loop and the shared scheduler; the
only difference is ``max_num_seqs``: 16 (continuous batching) or 1 (one request at a time).
Throughput is output tokens per wall-clock second of each run. The two run alternately in a few
rounds, so a shared machine's changing load hits both alike; the result is the median of the
rounds' ratios (and the ratio of the totals). Target: at least 5x at 16 sequences.

    python benchmarks/engine.py [--model small] [--rounds 5] [--output-tokens 64] [--device auto]

Results: benchmarks/results/engine.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from servebench.serving.engine.model import Decoder, configure_cpu, device_name, pick_device, preset
from servebench.serving.engine.runner import run_workload
from servebench.serving.scheduler import SchedulerConfig
from servebench.serving.workload import ClassSpec, ClosedLoopSpec, LengthSpec, WorkloadSpec

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
TARGET_SPEEDUP = 5.0


def workload(users: int, requests: int, prompt_tokens: tuple[int, int], output_tokens: int) -> WorkloadSpec:
    """Return the closed-loop workload both runs serve."""
    return WorkloadSpec(closed_loop=ClosedLoopSpec(users=users, think_s=0.0), num_requests=requests, classes=[
        ClassSpec(name="bench", prompt=LengthSpec(kind="uniform", low=prompt_tokens[0], high=prompt_tokens[1]),
                  output=LengthSpec(kind="fixed", value=output_tokens))])


def measure(model: Decoder, max_num_seqs: int, wl: WorkloadSpec, seed: int) -> dict[str, float]:
    """Serve the workload once; return throughput and the run's shape."""
    cfg = SchedulerConfig(kv_budget_tokens=32_768, policy="paged", max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=1024)
    t = time.perf_counter()
    run = run_workload(model, cfg, wl, seed=seed, warmup_steps=3)
    wall = time.perf_counter() - t
    ok = [r for r in run.records if r["status"] == "success"]
    if len(ok) != len(run.records):
        raise SystemExit(f"max_num_seqs={max_num_seqs}: {len(run.records) - len(ok)} requests did not succeed")
    tokens = sum(r["output_tokens"] for r in ok)
    decode = [s.decode_seqs for s in run.steps if s.decode_seqs]
    return {"max_num_seqs": max_num_seqs, "requests": len(ok), "output_tokens": tokens,
            "run_wall_s": run.wall_s, "process_wall_s": wall, "output_tokens_per_s": tokens / run.wall_s,
            "steps": len(run.steps), "mean_decode_batch": sum(decode) / len(decode) if decode else 0.0}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="small", help="engine preset (default: small)")
    p.add_argument("--users", type=int, default=16, help="concurrent sequences offered (default 16)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batched-requests", type=int, default=32, help="requests per batched run (2 waves of 16)")
    p.add_argument("--sequential-requests", type=int, default=8, help="requests per one-at-a-time run")
    p.add_argument("--output-tokens", type=int, default=64)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    configure_cpu(args.threads)
    dev, dtype = pick_device(args.device)
    model = Decoder(preset(args.model), seed=0, device=dev, dtype=dtype)
    rounds = []
    for i in range(args.rounds):
        seq = measure(model, 1, workload(args.users, args.sequential_requests, (32, 128), args.output_tokens),
                      args.seed + i)
        bat = measure(model, args.users, workload(args.users, args.batched_requests, (32, 128), args.output_tokens),
                      args.seed + i)
        rounds.append({"one_at_a_time": seq, "continuous_batching": bat,
                       "ratio": bat["output_tokens_per_s"] / seq["output_tokens_per_s"]})
    ratios = sorted(r["ratio"] for r in rounds)
    speedup = ratios[len(ratios) // 2]
    total = {k: sum(r[k]["output_tokens"] for r in rounds) / sum(r[k]["run_wall_s"] for r in rounds)
             for k in ("one_at_a_time", "continuous_batching")}
    result = {
        "benchmark": "continuous batching vs one request at a time (same model, same closed-loop workload)",
        "speedup": round(speedup, 3),
        "speedup_of_totals": round(total["continuous_batching"] / total["one_at_a_time"], 3),
        "round_ratios": [round(r, 3) for r in ratios],
        "target_speedup": TARGET_SPEEDUP,
        "target_met": speedup >= TARGET_SPEEDUP,
        "concurrent_sequences": args.users,
        "output_tokens_per_s": total,
        "rounds": rounds,
        "model": {"preset": args.model, "parameters": model.config.param_count,
                  "dtype": str(dtype).removeprefix("torch.")},
        "machine": {"device": device_name(dev), "threads": args.threads, "torch": torch.__version__,
                    "python": platform.python_version()},
        "workload": {"users": args.users, "think_s": 0, "prompt_tokens": "uniform 32..128",
                     "output_tokens": args.output_tokens, "batched_requests": args.batched_requests,
                     "sequential_requests": args.sequential_requests},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "engine.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"continuous batching {total['continuous_batching']:.0f} tok/s vs one at a time "
          f"{total['one_at_a_time']:.0f} tok/s: median round ratio {speedup:.1f}x "
          f"(rounds {', '.join(f'{r:.1f}' for r in ratios)}; target {TARGET_SPEEDUP:g}x) -> {RESULTS / 'engine.json'}")


if __name__ == "__main__":
    main()
