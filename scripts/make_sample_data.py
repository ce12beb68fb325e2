"""Write sample_data/requests_sample.csv: a seeded, real-looking day of a two-slice service.

Run from the repo root: python scripts/make_sample_data.py
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "sample_data" / "requests_sample.csv"
COLUMNS = ("request_id", "start", "admitted", "first_token", "end", "status", "prompt_tokens",
           "output_tokens", "slice", "error")


def main(seed: int = 20261129, n: int = 3000) -> None:
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1 / 5.0, size=n))  # about 5 requests/s for 10 minutes
    is_review = rng.random(n) < 0.3
    rows = []
    busy_until = 0.0
    for i in range(n):
        start = float(arrivals[i])
        review = bool(is_review[i])
        prompt = int(rng.integers(5000, 8000)) if review else int(rng.lognormal(6.5, 0.4))
        cap = 400 if review else 120
        out = int(min(cap, max(1, rng.lognormal(np.log(cap * 0.6), 0.4))))
        # queueing grows when recent arrivals pile up; reviews wait for KV more often
        load = np.count_nonzero((arrivals > start - 2.0) & (arrivals <= start))
        wait = float(rng.exponential(0.02 + 0.05 * max(0, load - 8) + (0.8 if review and load > 12 else 0)))
        admitted = start + wait
        prefill = prompt * 1.6e-4 * float(rng.lognormal(0, 0.15))
        tpot = 0.028 * float(rng.lognormal(0, 0.1)) * (1 + 0.02 * max(0, load - 10))
        first = admitted + prefill
        end = first + (out - 1) * tpot
        status, error, out_tokens = "success", "", out
        u = rng.random()
        if wait > 3.0 or u < 0.012:
            status, error = "rejected", "queue full (503)"
            end, admitted_s, first_s, out_tokens = start, "", "", ""
            rows.append([f"req-{i:05d}", f"{start:.6f}", admitted_s, first_s, f"{end:.6f}", status, prompt,
                         out_tokens, "review" if review else "hint", error])
            continue
        if end - start > 12.0:
            status, error = "timeout", "deadline 12 s"
            end = start + 12.0
            out_tokens = max(0, int((end - first) / tpot) + 1) if end > first else 0
        elif u < 0.03:
            status, error = "failed", "malformed JSON output"
        elif u < 0.04:
            status, error = "cancelled", "client disconnected"
            out_tokens = int(rng.integers(1, max(2, out)))
            end = first + (out_tokens - 1) * tpot
        elif u < 0.045:
            status, error = "failed", "upstream 500"
            out_tokens = 0
            end = admitted + prefill * 0.5
        first_s = f"{first:.6f}" if status == "success" or (out_tokens and first <= end) else ""
        rows.append([f"req-{i:05d}", f"{start:.6f}", f"{admitted:.6f}", first_s, f"{end:.6f}", status, prompt,
                     out_tokens, "review" if review else "hint", error])
        busy_until = max(busy_until, end)
    with OUT.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    print(f"wrote {len(rows)} records to {OUT}")


if __name__ == "__main__":
    main()
