"""Tables for the dashboard's retry and fairness sections (pure: report sections in, DataFrames out)."""

from __future__ import annotations

import pandas as pd

from servebench.analysis.summary import FairnessReport, LogicalReport


def logical_frame(lg: LogicalReport) -> pd.DataFrame:
    """Return the logical-request section as (measure, value) rows."""
    p95 = lg.user_latency_s.at(95)
    ok95 = lg.user_latency_success_s.at(95)
    rows = [("logical requests", lg.logical_requests), ("logical successes", lg.logical_successes),
            ("success fraction", lg.success_fraction), ("attempts (records)", lg.attempts),
            ("amplification (attempts / logical)", lg.amplification), ("retried", lg.retried),
            ("saw partial output, then a retry", lg.partial_then_retry),
            ("attempts cut by the client's deadline", lg.attempts_cut_by_deadline),
            ("user-visible latency p95, s (all)", p95), ("user-visible latency p95, s (successes)", ok95)]
    return pd.DataFrame({"measure": [r[0] for r in rows], "value": [r[1] for r in rows]})


def fairness_frame(fr: FairnessReport) -> pd.DataFrame:
    """Return one row per slice: weight, goodput, goodput share, SLO attainment, TTFT p95."""
    return pd.DataFrame([{"slice": name, "weight": s.weight, "goodput_requests_per_second": s.goodput_requests_per_second,
                          "goodput_share": s.goodput_share, "slo_attainment": s.slo_attainment,
                          "ttft_p95_s": s.ttft_p95_s} for name, s in fr.slices.items()])
