"""Write the trimmed copies of the real peer exports kept in this folder (run once; provenance only).

Trimming keeps every request record and every field the importers or tests read; it shortens long
text (prompts, outputs, tracebacks), drops aggregate metrics the tests do not compare, and drops
AIPerf's per-chunk latency lists and its k6-style http_req_* metrics. Numbers are never changed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else "/work/shared/peer-exports")
DST = Path(__file__).resolve().parent
KEEP_METRICS = ("request_totals", "request_latency", "time_to_first_token_ms", "output_token_count",
                "prompt_token_count", "inter_token_latency_ms", "time_per_output_token_ms")
KEEP_STATS = ("mean", "median", "min", "max", "count", "total_sum")


def short(v, limit=120):
    """Shorten long strings, recursively."""
    if isinstance(v, str) and len(v) > limit:
        return v[:limit] + "...[trimmed]"
    if isinstance(v, dict):
        return {k: short(x, limit) for k, x in v.items()}
    if isinstance(v, list):
        return [short(x, limit) for x in v]
    return v


def trim_guidellm(name: str) -> None:
    doc = json.loads((SRC / name).read_text())
    doc["config"] = {"trimmed": True}
    for b in doc["benchmarks"]:
        b["config"] = {k: b["config"][k] for k in ("id_", "run_id", "run_index", "strategy",
                                                   "prefer_response_metrics") if k in b["config"]}
        b["config"]["backend"] = {"model": "mock-llama-8b", "target": "http://127.0.0.1:18731"}
        b["scheduler_state"] = {k: v for k, v in b["scheduler_state"].items() if not k.endswith("constraints")}
        b["scheduler_metrics"] = {k: v for k, v in b["scheduler_metrics"].items() if not isinstance(v, dict)
                                  or k == "requests_made"}
        metrics = {}
        for k in KEEP_METRICS:
            m = b["metrics"][k]
            metrics[k] = m if k == "request_totals" else {
                g: (None if s is None else {x: s[x] for x in KEEP_STATS}) for g, s in m.items()}
        b["metrics"] = metrics
        for group in ("successful", "errored", "incomplete"):
            for r in b["requests"][group] or []:
                for k in ("input_metrics", "output_metrics"):
                    if isinstance(r.get(k), dict):
                        r[k] = {x: y for x, y in r[k].items() if y is not None}
                r["info"].pop("settings", None)
        b["requests"] = short(b["requests"], 60)
    (DST / name).write_text(json.dumps(doc, indent=None, separators=(",", ":")))


def trim_aiperf(name: str) -> None:
    out = []
    for line in (SRC / name).read_text().splitlines():
        rec = json.loads(line)
        rec["metrics"] = {k: v for k, v in rec["metrics"].items()
                          if k != "inter_chunk_latency" and not k.startswith("http_req_")}
        out.append(json.dumps(rec, separators=(",", ":")))
    (DST / name).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    trim_guidellm("guidellm-0.8.1-errors.json")
    trim_guidellm("guidellm-0.8.1-clean.json")
    trim_aiperf("aiperf-0.13.0-clean-profile_export.jsonl")
    for name in ("aiperf-0.13.0-clean-profile_export_aiperf.json", "llmperf-individual.json",
                 "llmperf-summary.json"):
        (DST / name).write_bytes((SRC / name).read_bytes())
    head = (SRC / "guidellm-0.8.1-clean.csv").read_text().splitlines()
    (DST / "guidellm-0.8.1-clean-head.csv").write_text("\n".join(line[:400] for line in head[:4]) + "\n")
