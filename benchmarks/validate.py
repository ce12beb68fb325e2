"""Measure how closely the simulator reproduces the real engine: one timing run and a sweep.

1. ``servebench run SCENARIO`` then ``servebench validate``: the relative error of p50/p95 TTFT,
   request TPOT and latency (goal on a quiet machine: every one within 5%).
2. ``servebench validate-sweep SCENARIO --rates ...`` (CPU-sized: at most 200 requests per rate, each
   rate served twice): the measured and simulated knee (goal: within 10%), the largest TTFT/latency
   error below it, and the engine's own run-to-run difference there (the measurement's noise floor).

The machine's load (1-minute load average before and after, CPU count) is recorded beside the
figures, since on a shared machine other processes slow some steps and no fitted model replays that.
With ``--repeats 2`` or more the engine's own run-to-run spread is recorded too: the same scenario
and seed served twice differ by this much, a floor under any simulator's error.

    python benchmarks/validate.py [--scenario sample_data/scenarios/tiny_cpu.yaml] [--rates 10,20,40,60,80]
                                  [--repeats 1] [--skip-sweep] [--device auto] [--model tiny]

Results: benchmarks/results/validate.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"


def load() -> dict[str, Any]:
    """Return the machine's load now: 1-minute load average and CPU count (None where unknown)."""
    try:
        one = os.getloadavg()[0]
    except OSError:
        one = None
    return {"load_avg_1min": one, "cpus": os.cpu_count()}


def one_run(scenario: Path, out: Path, model: str, device: str) -> dict[str, Any]:
    """Run the scenario on the engine, validate it, and return the comparison with the machine's load."""
    from servebench.serving.engine.readback import read_run
    from servebench.serving.engine.timing_run import execute_run
    from servebench.serving.engine.validation import validate_run
    from servebench.serving.scenario import load_scenario

    before = load()
    t0 = time.monotonic()
    meta = execute_run(load_scenario(scenario), out, scenario_source=str(scenario), model=model, device=device)
    folder = read_run(out)
    result = validate_run(folder.records, folder.steps, folder.scenario, allow_poor_fit=True,
                          send_lags_s=(folder.metadata.get("run") or {}).get("send_lags_s"))
    return {"load_before": before, "load_after": load(), "wall_s": round(time.monotonic() - t0, 2),
            "device": meta["runtime"]["device_name"], "fit": result.fit_summary,
            "fit_usable": bool(result.fit.quality and result.fit.quality.usable),
            "step_model": result.fit.model.model_dump(),
            "measured_s": {f"{c.metric}_p{c.q}": c.measured_s for c in result.comparisons},
            "simulated_s": {f"{c.metric}_p{c.q}": c.simulated_s for c in result.comparisons},
            "rel_error": {f"{c.metric}_p{c.q}": c.rel_error for c in result.comparisons},
            "max_abs_rel_error": result.max_abs_rel_error, "within_5pct": result.passed,
            "speed_ratio_p5_p95": [result.speed_ratio_p5, result.speed_ratio_p95], "notes": result.notes}


def run_to_run(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Return how far each later run's measured percentiles are from the first run's (the engine's own spread)."""
    if len(runs) < 2:
        return None
    first = runs[0]["measured_s"]
    diffs = {k: [None if r["measured_s"][k] is None or not first[k] else r["measured_s"][k] / first[k] - 1
                 for r in runs[1:]] for k in first}
    worst = max((abs(v) for vs in diffs.values() for v in vs if v is not None), default=None)
    return {"rel_diff_vs_first_run": diffs, "max_abs_rel_diff": worst}


def sweep(scenario: Path, rates: list[float], model: str, device: str) -> dict[str, Any]:
    """Run validate-sweep at the CPU-sized default and return its knee and errors with the machine's load."""
    from servebench.serving.engine.model import Decoder, configure_cpu, pick_device, preset
    from servebench.serving.engine.sweep_validation import (
        CPU_MAX_WALL_S_PER_RATE,
        CPU_REQUESTS_PER_RATE,
        validate_sweep,
    )
    from servebench.serving.scenario import load_scenario

    sc = load_scenario(scenario)
    dev, dtype = pick_device(device)
    configure_cpu(1)
    decoder = Decoder(preset(model), seed=0, device=dev, dtype=dtype)
    before = load()
    t0 = time.monotonic()
    result = validate_sweep(decoder, sc, rates, requests=min(sc.workload.num_requests or CPU_REQUESTS_PER_RATE,
                                                             CPU_REQUESTS_PER_RATE),
                            max_wall_s_per_rate=CPU_MAX_WALL_S_PER_RATE, allow_poor_fit=True, engine_repeats=2)
    return {"load_before": before, "load_after": load(), "wall_s": round(time.monotonic() - t0, 2),
            "rates_rps": rates, "requests_per_rate": result.requests_per_rate, "fit": result.fit_summary,
            "measured_knee_rps": result.measured_knee_rps, "simulated_knee_rps": result.simulated_knee_rps,
            "knee_relative_error": result.knee_relative_error,
            "max_below_knee_rel_error": result.max_below_knee_rel_error,
            "max_below_knee_engine_rel_diff": result.max_below_knee_engine_rel_diff,
            "engine_repeats": result.engine_repeats, "replicas": result.replicas,
            "points": [{"rate_rps": p.rate_rps, "below_knee": p.below_knee, "fit": p.fit_summary,
                        "rel_error": {k: p.rel_error[k] for k in KEYS},
                        "engine_rel_diff": None if p.engine_rel_diff is None else {k: p.engine_rel_diff[k]
                                                                                   for k in KEYS},
                        "within_engine_spread": p.within_engine_spread}
                       for p in result.points], "notes": result.notes}


KEYS = ("ttft_p50_s", "ttft_p95_s", "latency_p50_s", "latency_p95_s", "throughput_rps")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", type=Path, default=ROOT / "sample_data" / "scenarios" / "tiny_cpu.yaml")
    ap.add_argument("--rates", default="10,20,40,60,80")
    ap.add_argument("--repeats", type=int, default=1, help="Timing runs to validate (each is reported).")
    ap.add_argument("--skip-sweep", action="store_true")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=RESULTS / "validate.json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="servebench_validate_") as tmp:
        runs = [one_run(args.scenario, Path(tmp) / f"run{i}", args.model, args.device) for i in range(args.repeats)]
    swept = None if args.skip_sweep else sweep(args.scenario, [float(r) for r in args.rates.split(",")],
                                               args.model, args.device)
    doc = {"benchmark": "simulator fidelity against the engine", "scenario": str(args.scenario.relative_to(ROOT))
           if args.scenario.is_relative_to(ROOT) else str(args.scenario), "model": args.model,
           "python": platform.python_version(), "machine": platform.machine(), "runs": runs,
           "engine_run_to_run": run_to_run(runs), "sweep": swept,
           "targets": {"validate_rel_error": 0.05, "knee_rel_error": 0.10, "below_knee_rel_error": 0.10}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    for r in runs:
        errs = ", ".join(f"{k} {v:+.1%}" for k, v in r["rel_error"].items() if v is not None)
        print(f"validate (load {r['load_before']['load_avg_1min']}): {errs}; {r['fit']}")
    spread = doc["engine_run_to_run"]
    if spread is not None:
        print(f"engine run to run (same scenario and seed): up to {spread['max_abs_rel_diff']:.1%}")
    if swept is not None:
        print(f"validate-sweep: measured knee {swept['measured_knee_rps']}, simulated {swept['simulated_knee_rps']}, "
              f"error {swept['knee_relative_error']}, below-knee max {swept['max_below_knee_rel_error']}, the "
              f"engine's own run to run there {swept['max_below_knee_engine_rel_diff']}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
