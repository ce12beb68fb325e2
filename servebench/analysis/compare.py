"""Compare record sets: the contract side by side with differences, outcomes, and whether intervals overlap.

Pure: reports in, pandas out. The first run is the baseline every other run is compared with.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from servebench.analysis.contract import CONTRACT_LABELS
from servebench.analysis.summary import Distribution, Report
from servebench.formatting import NO_DATA, fmt, fmt_share
from servebench.records.statuses import STATUS_WORDS

METRICS = (("latency_s", "Latency"), ("ttft_s", "TTFT"), ("request_tpot_s", "Request TPOT"))


def difference(base: float | int | None, other: float | int | None, *, share: bool = False) -> str:
    """Say other - base and the relative change, e.g. '+0.25 (+11%)'; a share's difference in percentage points.

    >>> difference(2.0, 2.5), difference(0, 3), difference(None, 1.0), difference(4, 4)
    ('+0.5 (+25%)', '+3', '—', 'same')
    >>> difference(0.5, 0.2683, share=True)
    '-23.2 pp (-46%)'

    An infinite side (a failure-aware percentile on a failed request) reads as the one formatter writes it:

    >>> difference(2.0, float("inf")), difference(float("inf"), 2.0), difference(float("inf"), float("inf"))
    ('+∞', '-∞', '—')
    """
    if base is None or other is None:
        return NO_DATA
    d = other - base
    if math.isnan(d):  # inf - inf (or a NaN side): no difference to show
        return NO_DATA
    if d == 0:
        return "same"
    sign = "+" if d > 0 else "-"
    if math.isinf(d):
        return f"{sign}{fmt(abs(d))}"  # no relative change to speak of
    text = f"{sign}{abs(d) * 100:.3g} pp" if share else f"{sign}{fmt(abs(d))}"
    return f"{text} ({d / base:+,.0%})" if base else text


SHARE_FIELDS = frozenset({"non_success_fraction"})  # contract fields that are fractions, shown as percents


TIME_UNITS = {"s": 1.0, "ms": 1000.0}  # a table's times in seconds or milliseconds (the dashboard's default)


def _scaled(value: float | None, unit: str) -> float | None:
    return None if value is None else value * TIME_UNITS[unit]


def contract_table(reports: Mapping[str, Report], unit: str = "s") -> pd.DataFrame:
    """Return the eight contract fields, one column per run, then each later run's difference from the first (Δ).

    The p95 times (keys ending ``_s``) read in ``unit``, 's' or 'ms', their labels saying which.
    """
    names = list(reports)
    rows = []
    for key, (label, _) in CONTRACT_LABELS.items():
        time = key.endswith("_s")
        row: dict[str, str] = {"field": label.replace("(s)", f"({unit})") if time else label}
        values = [reports[n].summary.get(key) for n in names]
        if time:
            values = [_scaled(v, unit) for v in values]
        share = key in SHARE_FIELDS
        for n, v in zip(names, values):
            row[n] = fmt_share(v) if share else fmt(v)
        for n, v in zip(names[1:], values[1:]):
            row[f"Δ {n}"] = difference(values[0], v, share=share)
        rows.append(row)
    return pd.DataFrame(rows)


def outcome_table(reports: Mapping[str, Report]) -> pd.DataFrame:
    """Return offered and every status per run (each row adds up to offered)."""
    rows = []
    for name, r in reports.items():
        row: dict[str, object] = {"run": name, "Offered": r.offered}
        for key, label in STATUS_WORDS.items():
            row[label] = r.by_status.get(key, 0)
        row["Non-success"] = fmt_share(1 - r.completed / r.offered if r.offered else None)
        rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Overlap:
    """Whether a percentile's 95% intervals in two runs overlap: the significance hint."""

    metric: str
    q: float
    run: str
    base: str
    base_value: float | None
    value: float | None
    verdict: str


def _interval(d: Distribution | None, q: float) -> tuple[float | None, float | None, float | None]:
    if d is None:
        return None, None, None
    for p in d.percentiles:
        if p.q == q:
            return p.value, p.ci_low, p.ci_high
    return None, None, None


def overlap_verdict(base: tuple[float | None, float | None, float | None],
                    other: tuple[float | None, float | None, float | None]) -> str:
    """Say whether two (value, low, high) intervals overlap; an open side counts as unbounded.

    >>> overlap_verdict((1.0, 0.9, 1.1), (1.5, 1.3, 1.7))
    'higher, intervals apart: likely a real difference'
    >>> overlap_verdict((1.0, 0.9, 1.1), (1.05, 1.0, 1.2))
    'intervals overlap: may be noise'
    >>> overlap_verdict((None, None, None), (1.0, 0.9, 1.1))
    'no value in one run'
    """
    (bv, bl, bh), (ov, ol, oh) = base, other
    if bv is None or ov is None:
        return "no value in one run"
    lo_b, hi_b = (bl if bl is not None else -float("inf")), (bh if bh is not None else float("inf"))
    lo_o, hi_o = (ol if ol is not None else -float("inf")), (oh if oh is not None else float("inf"))
    if hi_o < lo_b:
        return "lower, intervals apart: likely a real difference"
    if lo_o > hi_b:
        return "higher, intervals apart: likely a real difference"
    return "intervals overlap: may be noise"


def overlaps(reports: Mapping[str, Report], qs: tuple[float, ...] = (50, 95, 99)) -> list[Overlap]:
    """Compare each later run's p50/p95/p99 of latency, TTFT and TPOT with the first run's intervals."""
    names = list(reports)
    base = reports[names[0]]
    out = []
    for attr, label in METRICS:
        for q in qs:
            b = _interval(getattr(base, attr), q)
            for n in names[1:]:
                o = _interval(getattr(reports[n], attr), q)
                out.append(Overlap(label, q, n, names[0], b[0], o[0], overlap_verdict(b, o)))
    return out


def overlap_table(reports: Mapping[str, Report], unit: str = "s") -> pd.DataFrame:
    """Return the significance hints as a table: metric, percentile, both values (in ``unit``) and the verdict."""
    return pd.DataFrame([{"metric": f"{o.metric} p{o.q:g}", "run": o.run,
                          f"baseline ({unit})": fmt(_scaled(o.base_value, unit)),
                          f"this run ({unit})": fmt(_scaled(o.value, unit)),
                          "change": difference(_scaled(o.base_value, unit), _scaled(o.value, unit)),
                          "95% intervals": o.verdict} for o in overlaps(reports)])


def percentiles_by_run(reports: Mapping[str, Report], qs: tuple[float, ...] = (50, 95, 99)
                       ) -> dict[str, dict[str, dict[float, float | None]]]:
    """Return {run: {latency|ttft|tpot: {q: value}}} for the percentile bars."""
    keys = {"latency_s": "latency", "ttft_s": "ttft", "request_tpot_s": "tpot"}
    return {n: {keys[a]: {q: _interval(getattr(r, a), q)[0] for q in qs} for a, _ in METRICS}
            for n, r in reports.items()}
