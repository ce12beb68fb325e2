"""Compare: several record sets side by side (contract, CDFs, percentiles, outcomes, and whether it is noise).

The tables are Markdown (static_table), not interactive grids: with three grids the first visit on a 100,000-record
file took 1.2 s, 0.7 s without (benchmarks/dashboard.py's 'compare switch 100k', back-to-back at load 1.1).
"""

from __future__ import annotations

import hashlib

import streamlit as st

from pages._figures import compare_cdfs, on_canvas
from pages._shared import (
    Dataset,
    chart_panel,
    current_slo,
    held_datasets,
    held_runs,
    records_sidebar,
    site_zip,
    static_table,
    summary_report,
    unit_choice,
)
from servebench.analysis.compare import contract_table, outcome_table, overlap_table, percentiles_by_run
from servebench.analysis.summary import Report
from servebench.dashboard import baseline_first, comparable
from servebench.output.figures.vegalite import percentile_bars
from servebench.output.safetext import safe_text


@st.fragment
def distributions_panel(runs: dict[str, Dataset], reports: dict[str, Report], unit: str) -> None:
    """Each run's latency, TTFT and TPOT as overlaid CDFs and percentile bars, drawn once their panel is opened."""
    box = chart_panel(st, "Distributions: overlaid CDFs and percentile bars of latency, TTFT and TPOT",
                      "compare_charts_open")
    if box.open:
        bars = percentile_bars(percentiles_by_run(reports), unit)
        for col, (metric, spec) in zip(box.columns(3), compare_cdfs(runs, unit).items()):
            col.vega_lite_chart(spec=spec, key=f"cmp_cdf_{metric}")
            col.vega_lite_chart(spec=on_canvas(bars[metric]), key=f"cmp_bars_{metric}")


st.title("Compare runs")
ds = records_sidebar()  # the sidebar's picker: upload several files, or open samples and timing runs
held = held_runs()
own = any(src.origin != "sample" for src in held.values())
with_samples = st.checkbox("Include sample files", value=False, key="compare_samples", disabled=not own,
                           help="Samples leave the comparison once you have a record set of your own: a difference "
                                "against an unrelated file means nothing. Tick to compare with them anyway.")
offered = comparable({digest: src.origin for digest, src in held.items()}, with_samples=with_samples)
loads = {d.source.digest: d for d in held_datasets(offered)}  # those that fail to load are left out
datasets = [loads[digest] for digest in offered if digest in loads]
names = {d.source.digest: safe_text(d.source.name) for d in datasets}
if len(datasets) < 2:
    st.info("Compare needs two record sets or more. Upload several files at once in the sidebar, start a timing "
            "run, or tick *Include sample files*: every record set you open is kept here."
            if own else "Compare needs two record sets or more. Upload several files at once in the sidebar, pick "
            "a second sample, or start a timing run: every record set you open is kept here.",
            icon=":material/compare_arrows:")
    st.stop()
offer_key = hashlib.sha256("|".join(names).encode()).hexdigest()[:12]  # other runs offered: a fresh choice
chosen = st.multiselect("Runs to compare", list(names), default=list(names)[:4], format_func=lambda d: names[d],
                        key=f"compare_runs:{offer_key}")
if len(chosen) < 2:
    st.info("Pick two runs or more.")
    st.stop()
BASELINE_KEY = "compare_baseline"  # the digest last picked as the baseline, kept while other runs come and go
kept = st.session_state.get(BASELINE_KEY)
baseline = st.selectbox("Baseline", chosen, index=chosen.index(kept) if kept in chosen else 0,
                        format_func=lambda d: names[d],
                        key=f"compare_baseline:{hashlib.sha256('|'.join(chosen).encode()).hexdigest()[:12]}",
                        help="Every other run's difference (Δ) and interval check is against this one.")
st.session_state[BASELINE_KEY] = baseline
chosen = baseline_first(chosen, baseline)
by_digest = {d.source.digest: d for d in datasets}
picked = [by_digest[d] for d in chosen]
shown = []
for d in picked:  # runs that share a name get a suffix, so every column is told apart
    base, n = names[d.source.digest], 2
    name = base
    while name in shown:
        name, n = f"{base} ({n})", n + 1
    shown.append(name)
slo = current_slo()
reports = {n: summary_report(d, slo) for n, d in zip(shown, picked)}  # each as Summary built it, when it did
for n, d in zip(shown, picked):
    if d.zoom is not None and d.zoom.left_out:
        st.caption(safe_text(f"{n}: {d.zoom.note()}"))

unit, _ = unit_choice()  # every time on the page, the tables' too (milliseconds by default)
st.subheader("The contract: eight fields side by side")
st.caption(f"Each later run against the baseline, **{shown[0]}**: Δ is the difference and the relative change.")
static_table(contract_table(reports, unit))

st.subheader("Is it noise? 95% confidence intervals")
st.caption("Distribution-free intervals of each percentile (successes only). Intervals apart: the runs likely "
           "differ. Intervals overlapping: the difference may be noise; collect more requests to tell.")
static_table(overlap_table(reports, unit))

distributions_panel(dict(zip(shown, picked)), reports, unit)

st.subheader("Outcomes")
st.caption("Every status, so each row adds up to offered.")
static_table(outcome_table(reports))

st.download_button("Report site with every run (ZIP)", lambda: site_zip(picked, None), file_name="compare.report-site.zip",
                   mime="application/zip", on_click="ignore",
                   help="A static HTML site with a page per run and their comparison, like `servebench report RUN...`.")
