"""Tables and chart data for the dashboard that no other figure module has: data in, pandas or data out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from servebench.analysis.contract import CONTRACT_LABELS
from servebench.analysis.summary import Distribution, Report
from servebench.capacity import kv
from servebench.formatting import NO_DATA, fmt, fmt_share
from servebench.records.statuses import STATUS_WORDS

METRIC_LABELS: dict[str, str] = {
    "latency": "Latency (s)", "ttft": "TTFT (s)", "tpot": "Request TPOT (s)",
    "queue_wait": "Queue wait (s)", "prefill": "Prefill (s)",
}


@dataclass(frozen=True)
class ContractCell:
    """One contract field ready to show: its spec key, a human label, what it counts, and its value."""

    key: str
    label: str
    help: str
    text: str


FRACTION_KEYS = frozenset({"non_success_fraction", "slo_attainment"})  # fractions, shown as percents


def contract_cells(summary: Mapping[str, Any], unavailable: frozenset[str] = frozenset(),
                   unit: str = "s") -> list[ContractCell]:
    """Return the eight contract fields in the spec's order, labelled and formatted for people.

    Fractions show as percents (0.5 -> '50%'); the p95 times (keys ending ``_s``) in ``unit``, 's' or
    'ms', with the label saying which. Fields in ``unavailable`` (an importer's ``unavailable_metrics``:
    the file has no shared clock) show as 'n/a' instead of a number computed from invented times.
    """
    scale = 1000.0 if unit == "ms" else 1.0
    cells = []
    for key, value in summary.items():
        label, help_text = CONTRACT_LABELS.get(key, (key, ""))
        if key.endswith("_s"):
            label = label.replace("(s)", f"({unit})")
        if key in unavailable:
            cells.append(ContractCell(key, label, help_text + " n/a: the file has no timestamps on a shared clock.",
                                      "n/a"))
            continue
        if value is None:
            help_text += " None: no value counts toward it."
        if key in FRACTION_KEYS:
            text = fmt_share(value)
            if value is not None:
                help_text += f" As a fraction: {fmt(value)}."
        elif key.endswith("_s"):
            text = fmt(None if value is None else value * scale)
        else:
            text = fmt(value)
        cells.append(ContractCell(key, label, help_text, text))
    return cells


def _ci_text(d: Distribution, q: float, scale: float = 1.0) -> str:
    def scaled(v: float | None) -> str:
        return fmt(None if v is None else v * scale)

    for p in d.percentiles:
        if p.q == q:
            return f"{scaled(p.value)} [{scaled(p.ci_low)}, {scaled(p.ci_high)}]"
    return NO_DATA


def distribution_frame(rows: Mapping[str, Distribution | None], scale: float = 1.0) -> pd.DataFrame:
    """Return one row per metric: n, each percentile as 'value [CI low, CI high]', max and mean.

    A missing CI bound ('—') means the sample is too small to bound the percentile on that side. Values
    are multiplied by ``scale`` (1000 shows seconds as milliseconds).
    """
    records = []
    for name, d in rows.items():
        if d is None:
            continue
        row: dict[str, Any] = {"metric": name, "n": d.n}
        for p in d.percentiles:
            row[f"p{p.q:g} [95% CI]"] = _ci_text(d, p.q, scale)
        row["max"] = fmt(None if d.max is None else d.max * scale)
        row["mean"] = fmt(None if d.mean is None else d.mean * scale)
        records.append(row)
    return pd.DataFrame.from_records(records)


def _count_frame(label: str, counts: dict[str, int], total: int) -> pd.DataFrame:
    return pd.DataFrame({
        label: list(counts),
        "requests": list(counts.values()),
        "share": [fmt_share(c / total) for c in counts.values()],
    })


def status_frame(report: Report) -> pd.DataFrame:
    """Return each status with its count and share of all requests."""
    return _count_frame("status", report.by_status, report.offered)


def cause_frame(report: Report) -> pd.DataFrame:
    """Return each non-success cause with its count and share of all requests."""
    return _count_frame("cause", report.by_cause, report.offered)


def slice_frame(report: Report, unit: str | None = None) -> pd.DataFrame:
    """Return one row per slice with its contract fields (and SLO attainment when set).

    With ``unit`` ('s' or 'ms') the table is for people: fractions as percents and the p95 times in that
    unit (their keys then end in ``_ms`` for the ms view); without it, the raw numbers.
    """
    scale = 1000.0 if unit == "ms" else 1.0
    records = []
    for name, sub in report.slices.items():
        row: dict[str, Any] = {"slice": name}
        for key, value in sub.summary.items():
            row[key] = value
        if sub.slo is not None:
            row["slo_attainment"] = sub.slo.attainment
            row["goodput_requests_per_second"] = sub.slo.goodput_requests_per_second
        row["wasted_output_tokens"] = sub.wasted_output_tokens
        row["peak_active"] = sub.active_requests.peak
        if unit is not None:
            row = {_unit_key(k, unit): (fmt_share(v) if k in FRACTION_KEYS else
                                        v * scale if k.endswith("_s") and v is not None else v)
                   for k, v in row.items()}
        records.append(row)
    return pd.DataFrame.from_records(records)


def _unit_key(key: str, unit: str) -> str:
    return key[:-2] + "_ms" if unit == "ms" and key.endswith("_s") else key


@dataclass(frozen=True)
class ConcurrencyCurve:
    """Max concurrent sequences against prompt length, the request's own prompt marked."""

    prompts: list[int]
    counts: list[int]
    prompt_tokens: int
    here: int  # the count at prompt_tokens
    output_cap: int
    policy: str
    ticks: list[int]  # 1, 2, 5 x 10^e up to twice the largest count: the log axis's labels


def concurrency_by_prompt(shape: kv.ModelShape, budget_bytes: int, prompt_tokens: int, output_cap: int, *,
                          policy: kv.Policy = "reserve", expected_output_tokens: int | None = None,
                          block_size: int = kv.DEFAULT_BLOCK_SIZE, tensor_parallel: int = 1,
                          points: int = 160) -> ConcurrencyCurve:
    """Return max concurrent sequences (``kv.concurrency_curve``) at prompts from 0 to 4x the given one."""
    upper = max(4 * prompt_tokens, 4096)
    prompts = sorted({int(p) for p in np.linspace(0, upper, points).round()} | {prompt_tokens})
    counts = kv.concurrency_curve(shape, budget_bytes, prompts, output_cap, policy=policy,
                                  expected_output_tokens=expected_output_tokens, block_size=block_size,
                                  tensor_parallel=tensor_parallel)
    top = max(max(counts), 1)
    ticks = [m * 10 ** e for e in range(len(str(top)) + 1) for m in (1, 2, 5) if m * 10 ** e <= 2 * top]
    return ConcurrencyCurve(prompts, list(counts), prompt_tokens, counts[prompts.index(prompt_tokens)], output_cap,
                            policy, ticks)


@dataclass(frozen=True)
class OutcomeCell:
    """One outcome count to show: label, count, and what it counts."""

    label: str
    count: int
    help: str


_OUTCOME_HELP = {"success": "Succeeded.", "failed": "Ended with an error after being accepted.",
                 "timeout": "Hit a deadline before finishing.", "cancelled": "Abandoned by the client before finishing.",
                 "rejected": "Refused by the server (never admitted)."}


def outcome_cells(report: Report) -> list[OutcomeCell]:
    """Return Offered then every status, so the row adds up: offered = completed + failed + timed out + ...

    Accepted (offered minus rejected) is not a status, so it is returned last, apart from the sum.
    """
    s = report.by_status
    parts = [(STATUS_WORDS[status], s.get(status, 0), about) for status, about in _OUTCOME_HELP.items()]
    total = sum(n for _, n, _ in parts)
    return [OutcomeCell("Offered", report.offered,
                        f"Every request that arrived: {' + '.join(f'{n:,} {lab.lower()}' for lab, n, _ in parts)} "
                        f"= {total:,}."),
            *(OutcomeCell(lab, n, h) for lab, n, h in parts),
            OutcomeCell("Accepted", report.accepted, "Offered minus rejected: what the server took on.")]
