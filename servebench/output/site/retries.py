"""The report site's sections on retries (logical requests) and fairness across slices."""

from __future__ import annotations

from servebench.analysis.summary import Distribution, FairnessReport, LogicalReport
from servebench.formatting import fmt
from servebench.output.site.html import Markup, key_values, section, table, tag


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def _dist_rows(rows: dict[str, Distribution]) -> Markup:
    qs = [p.q for p in next(iter(rows.values())).percentiles]
    headers = ["metric", "n", *[f"p{q:g}" for q in qs], "max"]
    body = [[name, d.n, *[fmt(p.value) for p in d.percentiles], fmt(d.max)] for name, d in rows.items()]
    return table(headers, body, caption="User-visible latency: first attempt's start to final attempt's end")


def logical_section(lg: LogicalReport) -> Markup:
    """Return the retries section: logical successes, attempts, amplification, partial output, deadline cuts."""
    return section("Retries and logical requests", key_values([
        ("logical requests", lg.logical_requests), ("logical successes", lg.logical_successes),
        ("success fraction", _share(lg.success_fraction)), ("attempts (records)", lg.attempts),
        ("amplification (attempts / logical)", fmt(lg.amplification)), ("retried", lg.retried),
        ("saw partial output, then a retry", lg.partial_then_retry),
        ("attempts cut by the client's deadline", lg.attempts_cut_by_deadline)]),
        _dist_rows({"all logical requests, s": lg.user_latency_s, "logical successes, s": lg.user_latency_success_s}),
        tag("p", "Each attempt is its own record; a failed attempt's tokens are wasted output and are never "
                 "joined to the retry's answer.", class_="muted"),
        id_="logical")


def fairness_section(fr: FairnessReport) -> Markup:
    """Return the fairness section: each slice's goodput share, SLO attainment and TTFT p95; Jain's index."""
    body = [[name, fmt(s.weight), fmt(s.goodput_requests_per_second), _share(s.goodput_share),
             _share(s.slo_attainment), fmt(s.ttft_p95_s)] for name, s in fr.slices.items()]
    return section("Fairness across slices", table(
        ["slice", "weight", "goodput, req/s", "goodput share", "SLO attainment", "TTFT p95, s"], body,
        caption=f"Weights: {fr.weights_from}"),
        key_values([("Jain's index over goodput / weight (1 = in proportion)", fmt(fr.jain_index)),
                    ("worst / best TTFT p95", fmt(fr.ttft_p95_ratio))]),
        id_="fairness")
