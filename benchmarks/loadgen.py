"""Measure the load generator's own capacity: schedule lag and achieved send rate against intended rate.

A minimal OpenAI-style streaming server (no model: it answers each request with a few chunks at
once) runs in its own process on 127.0.0.1, so the generator process does only generator work.
For each intended rate, an open-loop constant-arrival run of ``rate x seconds`` requests measures:
  send ratio  = achieved send rate (sent requests / span of actual send times) / intended rate
  lag p50/p99/max = actual minus intended send time
The generator's capacity on this machine is the highest rate whose p99 lag is at most 10 ms and
whose send ratio is at least 0.99; above it, latencies would include the generator's own delay
(``servebench load`` warns then). Each worker count is measured in the same run: 1 is the
in-process generator (``servebench load``), N > 1 is N worker processes sharing one schedule
(``servebench load --workers N``), their send times on the common timeline. Results:
benchmarks/results/loadgen.json and loadgen.md.

    python benchmarks/loadgen.py [--rates 100,200,300,400,600] [--seconds 2] [--workers 1,2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request  # module level: FastAPI resolves the handlers' annotations here
from fastapi.responses import StreamingResponse

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
LAG_BUDGET_S = 0.010


def serve(port: int) -> None:
    """Run the minimal streaming server until killed (the benchmark's other process)."""
    import uvicorn

    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"data": [{"id": "bench", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        n = int(body["max_tokens"])

        async def events():
            for i in range(n):
                yield 'data: {"choices": [{"index": 0, "text": " x"}]}\n\n'
            usage = {"prompt_tokens": 1, "completion_tokens": n, "total_tokens": n + 1}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(url: str, rate: float, seconds: float, workers: int = 1) -> dict:
    """Run one open-loop constant-rate load from ``workers`` workers and return its lag and send-rate figures."""
    from servebench.load.generator import LoadConfig, plan_requests, run_load_sync
    from servebench.load.workers import run_with_processes

    n = max(2, int(rate * seconds))
    plan = plan_requests(np.arange(n) / rate, [8] * n, [4] * n, np.random.default_rng(0))
    config = LoadConfig(url=url, deadline_s=10, max_in_flight=1024)
    result = (run_load_sync(config, plan) if workers == 1
              else run_with_processes(config, plan, workers, "bench"))
    sent = np.array(sorted(o.sent_s for o in result.outcomes if o.sent_s is not None))
    lag = result.stats.schedule_lag_s
    span = float(sent[-1] - sent[0]) if sent.size > 1 else float("nan")
    achieved = (sent.size - 1) / span if span > 0 else float("nan")
    per_worker = [w.schedule_lag_s.p99_s for w in result.stats.workers or []]
    return {"workers": workers, "rate": rate, "requests": n, "completed": result.stats.completed,
            "failed": result.stats.failed, "send_ratio": achieved / rate, "lag_p50_s": lag.p50_s,
            "lag_p99_s": lag.p99_s, "lag_max_s": lag.max_s, "worker_lag_p99_s": per_worker or None,
            "clock_uncertainty_s": max((w.clock_uncertainty_s for w in result.stats.workers or []), default=None),
            "peak_in_flight": result.stats.peak_in_flight}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="100,200,300,400,600")
    parser.add_argument("--workers", default="1,2", help="worker counts to measure, e.g. 1,2")
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], env={**os.environ})
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx
        for _ in range(300):  # bounded wait for the server
            try:
                if httpx.get(f"{url}/v1/models", trust_env=False, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        rows = [measure(url, float(r), args.seconds, int(w)) for w in args.workers.split(",")
                for r in args.rates.split(",")]
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)
    capacity = {}
    for w in sorted({r["workers"] for r in rows}):
        ok = [r["rate"] for r in rows if r["workers"] == w and r["lag_p99_s"] is not None
              and r["lag_p99_s"] <= LAG_BUDGET_S and r["send_ratio"] >= 0.99 and r["failed"] == 0]
        capacity[str(w)] = max(ok) if ok else None
    doc = {"machine_cpus": os.cpu_count(), "load_avg_1min": os.getloadavg()[0], "lag_budget_s": LAG_BUDGET_S,
           "points": rows,
           "capacity_rps_by_workers": capacity, "capacity_rps": capacity.get("1"),
           "note": "shared 2-core machine; the server runs in another process on the same cores, so two "
                   "workers and the server share two cores"}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "loadgen.json").write_text(json.dumps(doc, indent=2) + "\n")
    caps = ", ".join(f"{w} worker{'s' if w != '1' else ''}: {c} req/s" for w, c in capacity.items())
    lines = ["# Load generator capacity", "", f"p99 lag budget {LAG_BUDGET_S * 1000:g} ms; "
             f"capacity on this machine ({os.cpu_count()} CPUs, server on the same cores, load average "
             f"{doc['load_avg_1min']:.2f}): {caps}", "",
             "| workers | rate | requests | send ratio | lag p50 ms | lag p99 ms | lag max ms | peak in flight |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['workers']} | {r['rate']:g} | {r['requests']} | {r['send_ratio']:.3f} | "
                     f"{r['lag_p50_s'] * 1e3:.2f} | {r['lag_p99_s'] * 1e3:.2f} | {r['lag_max_s'] * 1e3:.2f} | "
                     f"{r['peak_in_flight']} |")
    (RESULTS / "loadgen.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
