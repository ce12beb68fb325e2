"""Exports with several runs (GuideLLM benchmarks at several rates): one row per run, its rate, counts and p95s."""

from __future__ import annotations

import pandas as pd

from servebench.analysis.summary import build_report
from servebench.records.importers import ImportOptions, import_runs
from servebench.records.loaders import LoadedRecords
from servebench.records.window_zoom import full_table


def run_label(loaded: LoadedRecords) -> str:
    """Name a run by its strategy and rate, e.g. 'run 2: constant at 4 req/s'."""
    m = loaded.metadata
    rate = m.get("rate")
    what = m.get("strategy") or "run"
    at = f" at {rate:g} req/s" if isinstance(rate, (int, float)) else ""
    return f"run {m.get('run_index', 0)}: {what}{at}"


def runs_table(data: bytes, name: str, fmt: str = "auto", options: ImportOptions | None = None) -> pd.DataFrame:
    """Return one row per run of an export: its rate, counts, throughput and p95s (each over its own span)."""
    rows = []
    for loaded in import_runs(data, name, fmt, options):
        table = full_table(loaded)
        ws, we = float(table.start.min()), float(table.end.max())
        r = build_report(table, ws, we)
        s = r.summary
        unavailable = set(loaded.metadata.get("unavailable_metrics") or [])
        rate = loaded.metadata.get("rate")
        rows.append({
            "run": run_label(loaded), "rate (req/s)": rate if isinstance(rate, (int, float)) else None,
            "requests": s["requests"], "successes": s["successes"],
            "non-success": f"{s['non_success_fraction']:.1%}",
            "successful req/s": None if "successful_requests_per_second" in unavailable
            else s["successful_requests_per_second"],
            "latency p95 (s)": s["success_latency_p95_s"], "TTFT p95 (s)": s["success_ttft_p95_s"],
            "TPOT p95 (s)": s["success_request_tpot_p95_s"],
        })
    return pd.DataFrame(rows)
