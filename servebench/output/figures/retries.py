"""Tables for the dashboard's retry and fairness sections (pure: report sections in, DataFrames out).

Fractions show as percents and times in the unit asked for ('s' or 'ms'), as text formatted by ``formatting.fmt``.
"""

from __future__ import annotations

import pandas as pd

from servebench.analysis.summary import FairnessReport, LogicalReport
from servebench.formatting import fmt, fmt_share


def _time(value_s: float | None, unit: str) -> str:
    return fmt(None if value_s is None else value_s * (1000.0 if unit == "ms" else 1.0))


def logical_frame(lg: LogicalReport, unit: str = "s") -> pd.DataFrame:
    """Return the logical-request section as (measure, value) rows, the value as text."""
    p95 = lg.user_latency_s.at(95)
    ok95 = lg.user_latency_success_s.at(95)
    rows = [("logical requests", fmt(lg.logical_requests)), ("logical successes", fmt(lg.logical_successes)),
            ("success fraction", fmt_share(lg.success_fraction)), ("attempts (records)", fmt(lg.attempts)),
            ("amplification (attempts / logical)", fmt(lg.amplification)), ("retried", fmt(lg.retried)),
            ("saw partial output, then a retry", fmt(lg.partial_then_retry)),
            ("attempts cut by the client's deadline", fmt(lg.attempts_cut_by_deadline)),
            (f"user-visible latency p95, {unit} (all)", _time(p95, unit)),
            (f"user-visible latency p95, {unit} (successes)", _time(ok95, unit))]
    return pd.DataFrame({"measure": [r[0] for r in rows], "value": [r[1] for r in rows]})


def fairness_frame(fr: FairnessReport, unit: str = "s") -> pd.DataFrame:
    """Return one row per slice: weight, goodput, goodput share and SLO attainment (percents), TTFT p95 in ``unit``."""
    return pd.DataFrame([{"slice": name, "weight": s.weight, "goodput_requests_per_second": s.goodput_requests_per_second,
                          "goodput_share": fmt_share(s.goodput_share), "slo_attainment": fmt_share(s.slo_attainment),
                          f"ttft_p95_{unit}": _time(s.ttft_p95_s, unit)} for name, s in fr.slices.items()])
