"""Diagnosis: what limits a load profile (KV memory, queueing, prefill, decode or nothing), with its evidence."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from pages._shared import SAMPLE_DIR, fail, guarded, records_sidebar, show_reader_warnings
from servebench import diagnosis, kv
from servebench.errors import InputFormatError
from servebench.figures.summary import fmt, fmt_share
from servebench.model_presets import PRESETS, get_preset

LIMIT_TITLES = {"kv_memory": "KV memory", "queueing": "Queueing", "prefill": "Prefill", "decode": "Decode",
                "none": "Nothing limits it"}


def render_verdict(v: diagnosis.Verdict) -> None:
    """Show one verdict: the limit, the numbers behind it, its evidence and the experiment that would check it."""
    box = st.success if v.limit == "none" else st.warning
    box(f"**Profile {v.profile}: {LIMIT_TITLES.get(v.limit, v.limit)}** (`{v.limit}`). {v.summary}")
    c = st.columns(4)
    c[0].metric("Max concurrent sequences", fmt(v.max_concurrent_sequences),
                help=f"{fmt(v.budget_tokens)} tokens in the budget / {fmt(v.tokens_per_request)} per request.")
    c[1].metric("Average in service", fmt(v.in_service), help="Little's law: rate × (prefill p50 + (N - 1) × TPOT p50).")
    c[2].metric("Utilization of the limit", fmt_share(v.utilization))
    c[3].metric("Saturation rate (requests/s)", fmt(v.saturation_rate_per_s))
    c = st.columns(4)
    c[0].metric("Queue wait share of TTFT p95", fmt_share(v.queue_share_of_ttft))
    c[1].metric("Prefill share of TTFT p95", fmt_share(v.prefill_share_of_ttft))
    c[2].metric("TPOT growth under load", fmt(v.tpot_growth), help="TPOT p50 with many sequences / with few.")
    c[3].metric("KV bytes per token", fmt(v.bytes_per_token))
    st.dataframe(pd.DataFrame([{"measurement": e.measurement, "value": fmt(e.value), "rule": e.rule,
                                "threshold": fmt(e.threshold),
                                "crossed": {True: "yes", False: "no", None: "not measured"}[e.crossed],
                                "note": e.note} for e in v.evidence]), hide_index=True)
    st.markdown(f"**What prefill contributes.** {v.prefill}")
    st.markdown(f"**Experiment.** {v.experiment.action}  \n**Confirms:** {v.experiment.confirm}  \n"
                f"**Refutes:** {v.experiment.refute}")


def _shape_inputs() -> tuple[kv.ModelShape | None, int | None, str, int | None]:
    c = st.columns(4)
    name = c[0].selectbox("Model shape (for the KV limit)", ["none", *PRESETS], key="diag_model")
    budget_gib = c[1].number_input("KV budget (GiB per GPU)", min_value=0.01, value=8.0, step=1.0, key="diag_budget")
    policy = c[2].radio("Admission policy", ["reserve", "paged"], key="diag_policy", horizontal=True)
    cap = c[3].number_input("Output cap (tokens)", min_value=1, value=None, placeholder="largest output seen",
                            key="diag_cap")
    shape = guarded(get_preset, name) if name != "none" else None
    return shape, int(budget_gib * kv.GIB) if shape else None, policy, int(cap) if cap else None


st.title("Diagnosis")
mode = st.radio("Mode", ["Guided A/B walk-through", "Diagnose the records in use", "Diagnose a profile table"],
                horizontal=True, key="diag_mode")

if mode == "Diagnose the records in use":
    ds = records_sidebar()
    show_reader_warnings(ds)
    st.caption(f"{ds.source.name} · {len(ds.table):,} records · window {ds.window_start:g} to {ds.window_end:g} s. "
               "Needs `admitted` (queue wait vs prefill) and `prompt_tokens` (the KV limit).")
    shape, budget, policy, cap = _shape_inputs()
    verdict = guarded(diagnosis.diagnose_records, ds.table, ds.window_start, ds.window_end, shape=shape,
                      budget_bytes=budget, policy=policy, output_cap=cap, name=ds.source.name)
    render_verdict(verdict)

elif mode == "Diagnose a profile table":
    st.caption("A measurement table like the spec's: per profile prompt tokens, queue wait and prefill p50/p95, "
               "TTFT p95, TPOT p50, peak active and its share of the run, arrival rate, output tokens.")
    up = st.file_uploader("Upload a profile table (JSON)", type=["json"], key="profile_upload")
    name, data = (up.name, up.getvalue()) if up else ("profiles_ab.json", (SAMPLE_DIR / "profiles_ab.json").read_bytes())
    try:
        table = diagnosis.ProfileTable.model_validate_json(data)
    except ValueError as exc:  # pydantic's ValidationError and JSON errors
        fail(InputFormatError(f"{name}: not a profile table: {exc}"))
    st.caption(f"Showing **{name}**" + (f": {table.description}" if table.description else ""))
    for v in guarded(diagnosis.diagnose_table, table):
        render_verdict(v)
        st.divider()

else:
    st.info("The guided walk-through needs `servebench.diagnosis.walkthrough`, which has not landed yet.")
