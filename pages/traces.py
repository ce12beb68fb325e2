"""Traces: upload a production trace (or open a shipped excerpt), see its traffic, and plan what it needs."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages._figures import on_canvas
from pages._shared import SAMPLE_DIR, fail, guarded, static_table, upload_error
from servebench.analysis.summary import SLO
from servebench.analysis.trace_stats import TraceStats, trace_stats
from servebench.capacity import ACCELERATORS, DEFAULT_GPUS
from servebench.capacity.model_presets import PRESETS, get_preset
from servebench.dashboard.trace_charts import hit_rate_chart, over_time_charts
from servebench.dashboard.traces import (
    answers,
    kept_upload,
    option_text,
    plan_notes,
    plan_request,
    plan_rows,
    plan_window_text,
    trace_metrics,
)
from servebench.dashboard.wording import SLO_TPOT_HELP, SLO_TTFT_HELP, ms_to_s
from servebench.errors import InputFormatError
from servebench.output.figures.trace import TraceBins, trace_bins
from servebench.output.safetext import safe_text
from servebench.planning import plan
from servebench.planning.planner import MAX_NUM_SEQS, TENSOR_PARALLEL
from servebench.records.traces import FORMATS
from servebench.serving.trace_replay import read_cached

TRACE_DIR = SAMPLE_DIR / "traces"
SAMPLES = sorted(p.name for p in TRACE_DIR.iterdir() if p.suffix in (".jsonl", ".csv"))
FIRST_SAMPLE = "mooncake_conversation_300.jsonl"  # block IDs: both charts, and prefix reuse in the plan


@st.cache_resource(max_entries=8, show_spinner="Reading the trace…")
def _stats(path: str, fmt_name: str) -> tuple[TraceStats, TraceBins, list[str]]:
    trace = read_cached(path, fmt_name)
    return trace_stats(trace), trace_bins(trace), trace.warnings


st.title("Traces")
st.caption("A production trace (Mooncake JSONL, Azure CSV, BurstGPT CSV, or servebench records): its traffic, "
           "its prompt and output lengths, its prefix reuse, and the GPUs its busiest minute needs. "
           "Rules: docs/traces.md; shipped excerpts: sample_data/traces/.")

c = st.columns([2, 2, 1])
sample = c[0].selectbox("Shipped excerpt", SAMPLES, index=SAMPLES.index(FIRST_SAMPLE), key="traces_sample")
upload = c[1].file_uploader("…or upload a trace", type=["jsonl", "json", "csv", "parquet", "pq"],
                            key="traces_upload")
trace_format = c[2].selectbox("Format", ["auto", *FORMATS], key="traces_format",
                              help="auto: told from the file's columns, as `servebench trace stats` does.")
if upload is None:
    path = str(TRACE_DIR / sample)
else:
    if (too_big := upload_error(upload, "Read larger traces with `servebench trace stats FILE`.")) is not None:
        fail(InputFormatError(too_big))
    path = str(kept_upload(upload.name, upload.getvalue()))
stats, bins, warnings = guarded(_stats, path, trace_format)
for warning in warnings:  # what the reader could not take as written (hash IDs short of a prompt)
    st.warning(safe_text(warning))

for col, m in zip(st.columns(4) + st.columns(3), trace_metrics(stats)):
    col.metric(m.label, m.value, help=m.help)
st.markdown("\n".join(f"- {line}" for line in answers(stats)))

for i, spec in enumerate(over_time_charts(bins)):
    st.vega_lite_chart(spec=on_canvas(spec), key=f"traces_over_time_{i}")
if stats.prefix is not None:
    st.vega_lite_chart(spec=on_canvas(hit_rate_chart(stats.prefix)), key="traces_hit_rate")
else:
    st.caption("No hit-rate chart: the trace names no prefix blocks.")

st.subheader("What it needs")
c = st.columns(4)
model_name = c[0].selectbox("Model", list(PRESETS), index=list(PRESETS).index("llama-3.1-8b"), key="traces_model")
slo_ttft_ms = c[1].number_input("TTFT (ms)", min_value=0.0, value=5000.0, step=500.0, key="traces_slo_ttft_ms",
                                help=SLO_TTFT_HELP)
slo_tpot_ms = c[2].number_input("Request TPOT (ms)", min_value=0.0, value=50.0, step=10.0, key="traces_slo_tpot_ms",
                                help=SLO_TPOT_HELP)
slo_ttft, slo_tpot = ms_to_s(slo_ttft_ms), ms_to_s(slo_tpot_ms)  # exact: 2.51 ms is 0.00251 s
target = c[3].number_input("Share of requests that must meet them", min_value=0.51, max_value=1.0, value=0.95,
                           step=0.01, key="traces_target")
with st.expander("Search: GPU types, tensor parallelism, headroom"):
    # the GPU types on a row of their own: six chips in a quarter of the page were cut off at 1,400 px
    gpus = st.multiselect("GPU types", list(ACCELERATORS), default=list(DEFAULT_GPUS), key="traces_gpus")
    c = st.columns(3)
    tps = c[0].multiselect("Tensor parallelism", list(TENSOR_PARALLEL), default=list(TENSOR_PARALLEL),
                           key="traces_tp")
    seqs = c[1].multiselect("max_num_seqs", [8, 16, 32, 64, 128, 256, 512], default=list(MAX_NUM_SEQS),
                            key="traces_seqs")
    headroom = c[2].slider("Headroom", 0.0, 0.5, 0.2, 0.05, key="traces_headroom",
                           help="Share of each replica's capacity left unused (bursts, failover).")
    st.caption("Prices are each GPU's default list price (the Capacity planner page edits them).")

settings = (path, trace_format, model_name, slo_ttft, slo_tpot, target, tuple(gpus), tuple(tps), tuple(seqs),
            headroom)
if st.button("Plan for the busiest minute", type="primary", key="traces_plan"):
    request, rate_rps = guarded(lambda: plan_request(
        path, trace_format, get_preset(model_name), SLO(ttft_s=slo_ttft or None, tpot_s=slo_tpot or None),
        slo_target=target, gpus=gpus, tensor_parallel=tps, max_num_seqs=seqs, headroom=headroom))
    bar = st.progress(0.0, text="Screening configurations…")

    def on_progress(done: int, total: int, label: str) -> None:
        bar.progress(min(1.0, done / max(total, 1)), text=f"{done} of {total}: {label}")

    with st.spinner("Simulating the busiest minute on each configuration…"):
        evaluation, result = guarded(plan, request, rate_rps, on_progress)
    bar.progress(1.0, text=f"Done: {evaluation.simulations} simulations")
    st.session_state["traces_plan_result"] = (settings, request, rate_rps, result, plan_notes(request, evaluation))

stored = st.session_state.get("traces_plan_result")
if stored is None:
    st.info("Choose the model and SLOs, then plan: the planner replays the trace's busiest minute on each GPU "
            "configuration and finds the cheapest that meets the SLOs.")
else:
    stored_settings, request, rate_rps, result, notes = stored
    if stored_settings != settings:
        st.warning("The trace or settings changed since this plan ran; plan again to update it.")
    (st.success if result.best else st.error)(f"**{option_text(result.best)}**")
    with st.expander("How: the window, every configuration, why this one"):
        st.markdown(plan_window_text(request, rate_rps))
        st.markdown(result.reason or "")
        for note in notes:
            st.caption(f"Note: {note}")
        static_table(pd.DataFrame(plan_rows(result)))
