"""Token timing: inter-token latency and stalls beside TTFT, token ticks of the slowest requests, and the
chunked-vs-whole prefill experiment with a predict-then-reveal question."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from pages._figures import prefill_charts, token_charts
from pages._shared import (
    SERVER_TOKEN_FORMATS,
    SERVER_TOKENS_LABEL,
    current_slo,
    guarded,
    itl_beside,
    metric,
    records_sidebar,
    server_tokens_key,
    show_reader_warnings,
    summary_report,
    unit_choice,
)
from servebench.dashboard.answers import stall_answer
from servebench.formatting import fmt, fmt_share
from servebench.serving.experiments import compare_prefill
from servebench.serving.scenario import load_scenario

SCENARIO = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "prefill_interference.yaml"

st.title("Token timing")
ds = records_sidebar()
show_reader_warnings(ds)
unit, scale = unit_choice()  # milliseconds by default: gaps between tokens are tens of ms


def shown(seconds: float | None) -> str:
    """Format a time in seconds in the page's unit (no unit after it)."""
    return fmt(None if seconds is None else seconds * scale)


def _count_server_tokens(key: str) -> None:
    st.session_state[key] = True  # a callback runs before the sidebar draws the toggle again


server_tokens = ds.read_as.options is not None and ds.read_as.options.tokens == "server"
if ds.table.token_times is None and ds.loaded.format in SERVER_TOKEN_FORMATS and not server_tokens:
    st.info("AIPerf streams one server token per chunk but counts output tokens with its own client tokenizer, so "
            "its inter-chunk latencies do not fit its counts and are not carried over. Counted with the server's "
            f"tokens (**{SERVER_TOKENS_LABEL}** under Import options in the sidebar), every success keeps its token "
            "times.", icon=":material/timeline:")
    st.button(SERVER_TOKENS_LABEL, key="tok_server_tokens", on_click=_count_server_tokens,
              args=(server_tokens_key(ds.source),), type="primary")
elif ds.table.token_times is None:
    st.info("These records have no `token_times` (the arrival of each token or streamed chunk), so there is no "
            "inter-token latency to show. `servebench simulate`, `run` and `load` write them; the vLLM importer "
            "carries them over, and the AIPerf importer does with the server's token counts (Import options). "
            "The experiment below simulates records that have them.")
else:
    # the report Summary built for these records, when it did (ITL and stalls do not depend on the SLO or slices)
    report = guarded(summary_report, ds, current_slo())
    itl, stall, stalls = report.itl_s, report.max_stall_s, report.stalls
    c = st.columns(5)
    metric(c[0], "itl_s", f"ITL p50 ({unit})", shown(itl.at(50) if itl else None),
           "Half the gaps between consecutive tokens of successes are at most this.")
    metric(c[1], "itl_s", f"ITL p99 ({unit})", shown(itl.at(99) if itl else None),
           "99% of the gaps between consecutive tokens of successes are at most this.")
    c[2].metric(f"Longest stall p95 ({unit})", shown(stall.at(95) if stall else None),
                help="The longest pause in one answer's stream: 95% of successes paused at most this long at once.")
    c[3].metric("Requests stalled", fmt_share(None if stalls is None else stalls.share),
                help="The share of successes whose stream paused longer than the stall threshold" + (
                    "." if stalls is None else f": {shown(stalls.threshold_s)} {unit} ({stalls.threshold_rule})."))
    metric(c[4], "tpot_s", f"Request TPOT p95 ({unit})", shown(report.request_tpot_s.at(95)),
           "A per-request average: one long stall barely moves it.")
    said = stall_answer(stalls, itl.at(50) if itl else None, unit)
    if said:
        st.markdown(said)
    charts = token_charts(ds.key, ds.window_start, ds.window_end, stalls.threshold_s if stalls else None, unit,
                          ds.table, itl_beside(ds))
    for col, name in zip(st.columns(3), ("ttft", "itl", "stall")):
        col.vega_lite_chart(spec=charts[name], key=f"tok_{name}")
    if charts["ticks"] is not None:
        st.vega_lite_chart(spec=charts["ticks"], key="tok_timeline")


@st.cache_resource(show_spinner="Simulating both prefill policies...")
def _experiment() -> tuple:
    return compare_prefill(load_scenario(SCENARIO))


st.header("Experiment: chunked vs whole-prompt prefill")
st.markdown("Chat requests stream while 6,000-token documents arrive now and then, all in one shared "
            "continuous-batching step (`sample_data/scenarios/prefill_interference.yaml`). With **chunked** "
            "prefill a document is split into 512-token pieces beside the decodes; with **whole-prompt** prefill one "
            "step computes it all. Same seed, same arrivals, same lengths.")
q1 = st.radio("Predict: which policy gives running streams the lower p95 of their longest stall?",
              ["chunked", "whole-prompt", "about the same"], index=None, key="tok_q1")
q2 = st.radio("Predict: which policy gives the documents the lower TTFT p95?",
              ["chunked", "whole-prompt", "about the same"], index=None, key="tok_q2")
if st.button("Reveal", key="tok_reveal", disabled=q1 is None or q2 is None):
    st.session_state["tok_revealed"] = True
if st.session_state.get("tok_revealed"):
    chunked, whole = _experiment()
    c, w = chunked.report, whole.report
    right1 = q1 == "chunked"
    right2 = q2 == "whole-prompt"
    st.markdown(f"Stalls: **chunked** ({'right' if right1 else 'not what you predicted'}): longest stall p95 "
                f"{shown(c.max_stall_s.at(95))} {unit} vs {shown(w.max_stall_s.at(95))} {unit}. TTFT of documents: "
                f"**whole-prompt** ({'right' if right2 else 'not what you predicted'}): p95 "
                f"{shown(w.slices['document'].ttft_s.at(95))} {unit} vs {shown(c.slices['document'].ttft_s.at(95))} "
                f"{unit} chunked. Chunking spreads a long prompt over many steps, so running streams keep ticking but "
                "the prompt itself finishes later; whole prompts do the opposite. Request TPOT p95 hardly differs "
                f"({shown(c.request_tpot_s.at(95))} {unit} vs {shown(w.request_tpot_s.at(95))} {unit}): an average "
                "hides stalls.")
    charts = prefill_charts(chunked, whole, unit)
    st.vega_lite_chart(spec=charts["bars"], key="tok_compare")
    for col, side in zip(st.columns(2), (chunked, whole)):
        col.caption(side.label)
        col.vega_lite_chart(spec=charts[side.label], key=f"tok_hist_{side.label}")
