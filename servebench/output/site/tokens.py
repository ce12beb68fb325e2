"""The report site's token-timing section: ITL and stalls beside TTFT, and token ticks of the slowest requests."""

from __future__ import annotations

from collections.abc import Callable

import plotly.graph_objects as go

from servebench.analysis.summary import Report
from servebench.formatting import fmt
from servebench.output.figures import tokens as tfig
from servebench.output.figures.records import record_cdfs
from servebench.output.site.html import Markup, join, key_values, note, section, tag
from servebench.records.table import RecordTable


def token_section(report: Report, table: RecordTable, figs: Callable[[go.Figure | None], Markup]) -> Markup:
    """Return the section for records with token_times: ITL CDF and stall histogram beside the TTFT CDF."""
    itl, stall, st = report.itl_s, report.max_stall_s, report.stalls
    assert itl is not None and stall is not None
    rows: list[tuple[object, object]] = [
        ("gaps between tokens (successes)", f"{itl.n:,}"),
        ("ITL p50 / p99, s", f"{fmt(itl.at(50))} / {fmt(itl.at(99))}"),
        ("longest stall per request p50 / p95 / max, s", f"{fmt(stall.at(50))} / {fmt(stall.at(95))} / {fmt(stall.max)}"),
        ("request TPOT p95, s (an average per request)", fmt(report.request_tpot_s.at(95))),
    ]
    if st is not None and st.share is not None:
        rows.append((f"requests stalled over {fmt(st.threshold_s)} s ({st.threshold_rule})",
                     f"{st.stalled:,} of {st.requests:,} ({st.share:.1%})"))
    explain = note("ITL counts every gap between consecutive token arrivals; request TPOT averages them per "
                   "request, so one long stall in a stream barely moves TPOT but shows in ITL p99 and in the "
                   "stream's longest stall.", "info")
    threshold = st.threshold_s if st is not None else None
    charts = [record_cdfs(table)["ttft"], tfig.itl_cdf(table), tfig.stall_histogram(table, threshold)]
    return section("Token timing", key_values(rows), explain,
                   tag("div", join(figs(f) for f in charts if f is not None), class_="grid2"),
                   figs(tfig.token_timeline(table)), id_="tokens")
