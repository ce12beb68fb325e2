"""Does scraping the server's metrics delay the load generator's sends? Schedule lag with scraping off and on.

A minimal OpenAI-style streaming server runs in its own process on 127.0.0.1 and serves, on
``/metrics``, vLLM 0.10's page (tests/data/server_metrics) repeated for five engines: 550 samples,
about 45 ms to parse on the shared 2-core development machine, a large page. ``servebench load``
sends ``--rate`` constant arrivals of one-token streams with server metrics off, then scraped every
0.5 s and every 0.05 s, ``--repeats`` times in turn; each run's schedule lag (actual minus intended
send time, sends.jsonl) gives p50 and p99. The first round warms the process up and is reported but
not summarized. Results: benchmarks/results/server_metrics_lag.json and .md.

    python benchmarks/server_metrics_lag.py [--rate 50] [--requests 300] [--repeats 4]   (about 95 s)
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
from fastapi.responses import PlainTextResponse, StreamingResponse

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAGE = HERE.parent / "tests" / "data" / "server_metrics" / "vllm_0.10_v1_engine.txt"
MODES = {"off": ["--no-server-metrics"], "every 0.5 s": ["--metrics-interval-s", "0.5"],
         "every 0.05 s": ["--metrics-interval-s", "0.05"]}


def big_page() -> str:
    """Return the recorded vLLM page with each engine-0 sample repeated for engines 0 to 4."""
    out = []
    for line in PAGE.read_text().splitlines():
        out.extend([line.replace('engine="0"', f'engine="{e}"') for e in range(5)]
                   if 'engine="0"' in line and not line.startswith("#") else [line])
    return "\n".join(out) + "\n"


def serve(port: int) -> None:
    """Run the server until killed (the benchmark's other process)."""
    import uvicorn

    page = big_page()
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "bench", "object": "model"}]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(page)

    @app.post("/v1/completions")
    async def completions(request: Request) -> StreamingResponse:
        await request.body()

        async def events():
            yield 'data: {"choices":[{"index":0,"text":" x"}]}\n\n'
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lag_ms(out: Path) -> tuple[float, float]:
    lags = np.array([json.loads(line)["lag_s"] for line in (out / "sends.jsonl").read_text().splitlines()])
    return float(np.percentile(lags, 50) * 1e3), float(np.percentile(lags, 99) * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("/tmp/servebench-metrics-lag"))
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.1)
        rounds = []
        for r in range(args.repeats):
            row = {}
            for name, flags in MODES.items():
                out = args.out / f"{r}-{name.replace(' ', '_')}"
                subprocess.run([sys.executable, "-m", "servebench", "load", url, "-o", str(out), "--rate",
                                str(args.rate), "--requests", str(args.requests), "--output-tokens", "1",
                                "--arrival", "constant", "--json", *flags], check=True, stdout=subprocess.DEVNULL)
                row[name] = lag_ms(out)
            rounds.append(row)
            print(r, {k: f"p50 {a:.2f} p99 {b:.2f} ms" for k, (a, b) in row.items()}, flush=True)
    finally:
        server.kill()
    kept = rounds[1:] or rounds
    summary = {name: {"p50_ms_median": float(np.median([r[name][0] for r in kept])),
                      "p99_ms_median": float(np.median([r[name][1] for r in kept])),
                      "p99_ms_max": float(max(r[name][1] for r in kept))} for name in MODES}
    doc = {"rate_rps": args.rate, "requests": args.requests, "rounds": rounds, "summary": summary,
           "load_average": os.getloadavg(), "cpus": os.cpu_count()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "server_metrics_lag.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = ["# Schedule lag with the server's metrics scraped", "",
             f"{args.rate:g} req/s, {args.requests} one-token requests per run, a 550-sample /metrics page; "
             f"{len(kept)} rounds after a warm-up round; load average {os.getloadavg()[0]:.2f} on "
             f"{os.cpu_count()} CPUs.", "", "| scraping | lag p50, ms (median) | lag p99, ms (median) | lag p99, ms (worst) |",
             "|---|---|---|---|"]
    lines += [f"| {name} | {s['p50_ms_median']:.2f} | {s['p99_ms_median']:.2f} | {s['p99_ms_max']:.2f} |"
              for name, s in summary.items()]
    (RESULTS / "server_metrics_lag.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]))
    else:
        main()
