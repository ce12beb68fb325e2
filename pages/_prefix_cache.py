"""The prefix-cache panel shared by the Summary and Cache experiments pages: read a report, render it."""

from __future__ import annotations

import streamlit as st

from pages._shared import static_table
from servebench.analysis.summary import PrefixCacheReport
from servebench.formatting import fmt, fmt_share
from servebench.output.figures.summary import distribution_frame


def show_prefix_cache(pc: PrefixCacheReport, unit: str = "s") -> None:
    """Render hit rate, prefill saved, and TTFT and prefill with and without a hit, times in ``unit`` (s or ms)."""
    scale = 1000.0 if unit == "ms" else 1.0
    c = st.columns(4)
    c[0].metric("Token hit rate", fmt_share(pc.token_hit_rate),
                help=f"{pc.cached_prompt_tokens:,} of {pc.prompt_tokens:,} prompt tokens came from the cache.")
    c[1].metric("Requests with a hit", f"{pc.requests_with_hit:,} of {pc.requests:,}")
    c[2].metric("Estimated prefill saved (s)", fmt(pc.estimated_prefill_saved_s),
                help="Cached tokens × the prefill seconds per prompt token of requests without a hit.")
    ttft_hit, ttft_miss = pc.ttft_hit_s.at(50), pc.ttft_miss_s.at(50)
    c[3].metric(f"TTFT p50 with / without a hit ({unit})",
                f"{fmt(None if ttft_hit is None else ttft_hit * scale)} / "
                f"{fmt(None if ttft_miss is None else ttft_miss * scale)}")
    static_table(distribution_frame({
        f"TTFT with a hit ({unit})": pc.ttft_hit_s, f"TTFT without a hit ({unit})": pc.ttft_miss_s,
        f"Prefill with a hit ({unit})": pc.prefill_hit_s, f"Prefill without a hit ({unit})": pc.prefill_miss_s,
    }, scale))
    st.caption("A hit skips recomputing the cached part of the prompt: it shortens prefill and TTFT. It does not "
               "make the answer generate faster (TPOT), and it does nothing for a long new response.")
