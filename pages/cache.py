"""Cache experiments: the same workload simulated with prefix caching off and on, side by side."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages._shared import guarded, static_table
from servebench.dashboard.answers import cache_answer, ms_text
from servebench.dashboard.cells import cell, in_ms
from servebench.formatting import NO_DATA, fmt_share
from servebench.serving.cache_experiment import WORKLOADS, CacheExperiment, run_cache_experiment

st.title("Cache experiments")
st.caption("Prefix caching keeps the KV of full prompt blocks that earlier requests computed and reuses the "
           "longest cached run at the start of a new prompt, so only the rest is prefilled. Both runs below use "
           "the same seed: the same arrivals, prompts and answers; only the cache differs.")

QUESTION = ("**Interview question.** A RAG service sends prompts of 1,600 tokens; **80 %** of each prompt is one "
            "of 4 shared documents. At 2 requests per second on a paged server with chunked prefill, you turn "
            "prefix caching on. By how much does **TTFT p50** change? And **request TPOT p50**?")


@st.cache_data(show_spinner="Simulating caching off and on…", max_entries=32)
def _compare(exp_json: str) -> dict:
    return run_cache_experiment(CacheExperiment.model_validate_json(exp_json)).model_dump()


def _comparison(exp: CacheExperiment):
    from servebench.serving.cache_experiment import CacheComparison
    return CacheComparison.model_validate(guarded(_compare, exp.model_dump_json()))


st.subheader("Interview practice: predict, then reveal")
st.markdown(QUESTION)
c1, c2 = st.columns(2)
ttft_guess = c1.number_input("Your prediction: TTFT p50 change (%)", min_value=-100.0, max_value=500.0, value=None,
                             step=5.0, key="cache_quiz_ttft", placeholder="e.g. -50")
tpot_guess = c2.number_input("Your prediction: TPOT p50 change (%)", min_value=-100.0, max_value=500.0, value=None,
                             step=5.0, key="cache_quiz_tpot", placeholder="e.g. 0")
if st.button("Reveal the simulation's answer", key="cache_quiz_reveal"):
    st.session_state["cache_quiz_revealed"] = True
if st.session_state.get("cache_quiz_revealed"):
    quiz = _comparison(CacheExperiment(workload="partly_shared", shared_share=0.8, documents=4, rate_rps=2.0))
    d_ttft, d_tpot = quiz.ttft_p50_change, quiz.tpot_p50_change
    st.success(f"TTFT p50: {ms_text(quiz.off.ttft_p50_s)} → {ms_text(quiz.on.ttft_p50_s)} "
               f"(**{NO_DATA if d_ttft is None else f'{d_ttft:+.0%}'}**); request TPOT p50: "
               f"{ms_text(quiz.off.request_tpot_p50_s)} → {ms_text(quiz.on.request_tpot_p50_s)} "
               f"(**{NO_DATA if d_tpot is None else f'{d_tpot:+.0%}'}**). Token hit rate {fmt_share(quiz.on.token_hit_rate)}.")
    if ttft_guess is not None or tpot_guess is not None:
        st.write(f"Your prediction: TTFT {NO_DATA if ttft_guess is None else f'{ttft_guess:+.0f}%'}, "
                 f"TPOT {NO_DATA if tpot_guess is None else f'{tpot_guess:+.0f}%'}.")
    st.info("Most of TTFT here is prefill of a 1,600-token prompt; the cache skips the 1,584 shared tokens it holds "
            "in full blocks, so TTFT falls with the share of prefill left to do. TPOT is the time per generated "
            "token: the cache does not make decoding faster. It can fall a little on a server that batches "
            "prefill chunks with decodes, because fewer prompt tokens share the decoders' steps.")

st.subheader("Run an experiment")
kind = st.radio("Workload", list(WORKLOADS), index=list(WORKLOADS).index("partly_shared"), horizontal=True,
                key="cache_workload",
                format_func=lambda k: k.replace("_", " "))
st.caption(WORKLOADS[kind])
c1, c2, c3, c4 = st.columns(4)
multi = kind == "multi_turn"
prompt = int(c1.number_input("New message tokens per turn" if multi else "Prompt tokens", min_value=16,
                             max_value=8000, value=400 if multi else 1600, step=100, key=f"cache_prompt_{multi}"))
output = int(c2.number_input("Output tokens (median)", min_value=1, max_value=4000, value=150, step=50,
                             key="cache_output", help="Raise it to see what caching does not change: a long "
                                                      "answer takes as long to generate either way."))
rate = c3.number_input("Arrival rate (requests/s)", min_value=0.1, max_value=50.0, value=2.0, step=0.5,
                       key="cache_rate")
budget = int(c4.number_input("KV budget = cache size (tokens)", min_value=4096, max_value=1_000_000, value=40_000,
                             step=4096, key="cache_budget",
                             help="Running requests and cached blocks share it; cached blocks nobody holds are "
                                  "evicted least recently used when space is needed."))
extra: dict = {}
if kind == "partly_shared":
    c1, c2 = st.columns(2)
    extra["shared_share"] = c1.slider("Shared share of the prompt", 0.05, 1.0, 0.8, 0.05, key="cache_share")
    extra["documents"] = int(c2.number_input("Distinct shared documents", min_value=1, max_value=500, value=4,
                                             key="cache_docs"))
elif multi:
    c1, c2 = st.columns(2)
    extra["turns"] = int(c1.number_input("Turns per chat", min_value=2, max_value=20, value=4, key="cache_turns"))
    extra["think_s"] = c2.number_input("Think time between turns (s)", min_value=0.0, value=3.0, step=1.0,
                                       key="cache_think")
c1, c2 = st.columns(2)
n = int(c1.number_input("Requests", min_value=50, max_value=5000, value=400, step=50, key="cache_n"))
seed = int(c2.number_input("Seed (both runs)", min_value=0, value=16, step=1, key="cache_seed"))

exp = guarded(CacheExperiment, workload=kind, prompt_tokens=prompt, output_tokens=output, rate_rps=rate,
              kv_budget_tokens=budget, num_requests=n, seed=seed, **extra)
cmp = _comparison(exp)
st.success(f"**{cache_answer(cmp)}**")
c = st.columns(4)
c[0].metric("Token hit rate", fmt_share(cmp.on.token_hit_rate),
            help="Cached prompt tokens / prompt tokens, over the requests the server admitted.")
c[1].metric("Best the workload allows", "depends on the answers" if cmp.allowed_hit_rate is None
            else fmt_share(cmp.allowed_hit_rate), help="Full 16-token blocks of what prompts share.")
c[2].metric("TTFT p50 with caching", ms_text(cmp.on.ttft_p50_s), delta_color="inverse",
            delta=None if cmp.ttft_p50_change is None else f"{cmp.ttft_p50_change:+.0%}",
            help="Time to first token: from sending a request to seeing the first token of its answer (median).")
c[3].metric("Request TPOT p50 with caching", ms_text(cmp.on.request_tpot_p50_s), delta_color="inverse",
            delta=None if cmp.tpot_p50_change is None else f"{cmp.tpot_p50_change:+.0%}",
            help="Time per output token: the pace at which the rest of one answer streams (median).")
rows = [(in_ms(m, a), in_ms(m, b)) for m, a, b in cmp.rows()]  # times in ms, as every page shows them
static_table(pd.DataFrame([{"metric": m, "caching off": cell(m, a), "caching on": cell(m, b)}
                           for (m, a), (_, b) in rows]))
st.caption("What caching does not change: the tokens of the answer are generated one step at a time either way, "
           "so TPOT and the decode part of latency stay; a long new response gains nothing. Cold prompts hit only "
           "when a preempted request finds its own blocks still cached; a cache smaller than the working set evicts "
           "documents before they are reused (raise the number of documents or lower the budget to see it).")
