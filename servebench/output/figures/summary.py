"""Tables and figures for the dashboard that no other figure module draws: data in, pandas or plotly out."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from servebench.analysis.summary import CONTRACT_LABELS, Distribution, Report
from servebench.capacity import kv
from servebench.output.plain import NO_DATA, fmt, fmt_share, fmt_share_of

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


def contract_cells(summary: Mapping[str, Any], unavailable: frozenset[str] = frozenset()) -> list[ContractCell]:
    """Return the eight contract fields in the spec's order, labelled and formatted.

    Fields in ``unavailable`` (an importer's ``unavailable_metrics``: the file has no shared clock) show
    as 'n/a' instead of a number computed from invented times.
    """
    cells = []
    for key, value in summary.items():
        label, help_text = CONTRACT_LABELS.get(key, (key, ""))
        if key in unavailable:
            cells.append(ContractCell(key, label, help_text + " n/a: the file has no timestamps on a shared clock.",
                                      "n/a"))
            continue
        if value is None:
            help_text += " None: no value counts toward it."
        cells.append(ContractCell(key, label, help_text, fmt(value)))
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


def slice_frame(report: Report) -> pd.DataFrame:
    """Return one row per slice with its contract fields (and SLO attainment when set)."""
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
        records.append(row)
    return pd.DataFrame.from_records(records)


def _cdf_points(values: np.ndarray, n_total: int, max_points: int = 4000) -> tuple[np.ndarray, np.ndarray]:
    """Return (x, y) of the empirical CDF of the finite values from y = 0, with y as a share of n_total."""
    finite = np.sort(values[np.isfinite(values)])
    if finite.size == 0:
        return finite, finite
    y = np.arange(1, finite.size + 1) / n_total
    if finite.size > max_points:
        idx = np.unique(np.linspace(0, finite.size - 1, max_points).round().astype(np.int64))
        finite, y = finite[idx], y[idx]
    # start the staircase at 0 so the first step is drawn
    return np.concatenate([finite[:1], finite]), np.concatenate([[0.0], y])


def percentile_cdf(success_values: np.ndarray, failure_aware_values: np.ndarray, q: float,
                   success_value: float | None, failure_aware_value: float | None, label: str,
                   unit: str = "s") -> go.Figure:
    """Return the CDFs of one metric, success-only and failure-aware, with percentile q marked on each.

    The failure-aware curve counts non-successes as +infinity, so it stops below 1 at the success share.
    Values are in ``unit`` (the caller scales them: seconds, or milliseconds for the ms view).
    """
    fig = go.Figure()
    curves = (("success-only", success_values, success_value, "#1565c0"),
              ("failure-aware", failure_aware_values, failure_aware_value, "#c62828"))
    for name, values, value, color in curves:
        if values.size == 0:
            continue
        x, y = _cdf_points(values, values.size)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", line={"shape": "hv", "color": color}, name=name,
                                 hovertemplate=f"{name}<br>%{{x:.4g}} {unit}: %{{y:.2%}}<extra></extra>"))
        if value is not None and math.isfinite(value):
            fig.add_vline(x=value, line={"color": color, "dash": "dash"},
                          annotation_text=f"p{q:g} {name}: {fmt(value)}", annotation_position="top left"
                          if name == "success-only" else "bottom right")
        elif value is not None:
            fig.add_annotation(text=f"p{q:g} {name} = ∞: non-successes reach it", showarrow=False,
                               xref="paper", yref="paper", x=1, y=0.02, xanchor="right", font={"color": color})
    fig.add_hline(y=q / 100, line={"color": "#757575", "dash": "dot"})
    fig.update_layout(title=f"CDF of {label}", xaxis_title=label, yaxis_title="share of records counted",
                      yaxis={"range": [0, 1.02], "tickformat": ".0%"}, height=380,
                      margin={"l": 10, "r": 10, "t": 40, "b": 10}, legend={"orientation": "h", "y": -0.2},
                      template="plotly_white")
    return fig


def percentile_histogram(values: np.ndarray, q: float, value: float | None, label: str,
                         bins: int = 60) -> go.Figure:
    """Return a histogram of the finite values with percentile q marked; infinite values are counted in the title."""
    finite = values[np.isfinite(values)]
    n_inf = int(values.size - finite.size)
    # binned here, so the browser gets `bins` bars rather than every value (100,000 records: 2 MB of JSON)
    counts, edges = np.histogram(finite, bins=bins) if finite.size else (np.zeros(0, dtype=np.int64), np.zeros(1))
    fig = go.Figure(go.Bar(x=(edges[:-1] + edges[1:]) / 2, y=counts, width=np.diff(edges), marker_color="#1565c0",
                           customdata=np.stack([edges[:-1], edges[1:]], axis=1) if counts.size else None,
                           hovertemplate="%{customdata[0]:.4g} to %{customdata[1]:.4g}: %{y} records<extra></extra>"))
    if value is not None and math.isfinite(value):
        fig.add_vline(x=value, line={"color": "#c62828", "dash": "dash"}, annotation_text=f"p{q:g} = {fmt(value)}")
    title = f"Histogram of {label}"
    if n_inf:
        title += f" ({fmt(n_inf)} non-successes at ∞ not drawn)"
    fig.update_layout(title=title, xaxis_title=label, yaxis_title="records", height=380, bargap=0.02,
                      margin={"l": 10, "r": 10, "t": 40, "b": 10}, template="plotly_white")
    return fig


def concurrency_figure(shape: kv.ModelShape, budget_bytes: int, prompt_tokens: int, output_cap: int, *,
                       policy: kv.Policy = "reserve", expected_output_tokens: int | None = None,
                       block_size: int = kv.DEFAULT_BLOCK_SIZE, tensor_parallel: int = 1,
                       points: int = 160) -> go.Figure:
    """Return max concurrent sequences against prompt length (0 to 4x the given prompt), the prompt marked."""
    upper = max(4 * prompt_tokens, 4096)
    prompts = sorted({int(p) for p in np.linspace(0, upper, points).round()} | {prompt_tokens})
    counts = kv.concurrency_curve(shape, budget_bytes, prompts, output_cap, policy=policy,
                                  expected_output_tokens=expected_output_tokens, block_size=block_size,
                                  tensor_parallel=tensor_parallel)
    here = counts[prompts.index(prompt_tokens)]
    fig = go.Figure(go.Scatter(x=prompts, y=counts, mode="lines", line={"shape": "hv", "color": "#1565c0"},
                               name="max concurrent sequences",
                               hovertemplate="prompt %{x:,} tokens: %{y:,} sequences<extra></extra>"))
    fig.add_trace(go.Scatter(x=[prompt_tokens], y=[here], mode="markers+text", marker={"size": 11, "color": "#c62828"},
                             text=[f"{here:,} at {prompt_tokens:,} tokens"], textposition="top right",
                             name="this request", hoverinfo="skip"))
    top = max(max(counts), 1)
    ticks = [m * 10 ** e for e in range(len(str(top)) + 1) for m in (1, 2, 5) if m * 10 ** e <= 2 * top]
    fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{t:,}" for t in ticks])
    fig.update_layout(title=f"Max concurrent sequences against prompt length (output cap {output_cap:,}, {policy})",
                      xaxis_title="prompt tokens", yaxis_title="max concurrent sequences (log scale)",
                      height=380, margin={"l": 10, "r": 10, "t": 40, "b": 10}, showlegend=False,
                      template="plotly_white")
    return fig


@dataclass(frozen=True)
class OutcomeCell:
    """One outcome count to show: label, count, and what it counts."""

    label: str
    count: int
    help: str


def outcome_cells(report: Report) -> list[OutcomeCell]:
    """Return Offered then every status, so the row adds up: offered = completed + failed + timed out + ...

    Accepted (offered minus rejected) is not a status, so it is returned last, apart from the sum.
    """
    s = report.by_status
    parts = [("Completed", s.get("success", 0), "Succeeded."),
             ("Failed", s.get("failed", 0), "Ended with an error after being accepted."),
             ("Timed out", s.get("timeout", 0), "Hit a deadline before finishing."),
             ("Cancelled", s.get("cancelled", 0), "Abandoned by the client before finishing."),
             ("Rejected", s.get("rejected", 0), "Refused by the server (never admitted).")]
    total = sum(n for _, n, _ in parts)
    return [OutcomeCell("Offered", report.offered,
                        f"Every request that arrived: {' + '.join(f'{n:,} {lab.lower()}' for lab, n, _ in parts)} "
                        f"= {total:,}."),
            *(OutcomeCell(lab, n, h) for lab, n, h in parts),
            OutcomeCell("Accepted", report.accepted, "Offered minus rejected: what the server took on.")]
