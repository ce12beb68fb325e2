"""Capacity planner: from a model, traffic and SLOs to GPU type, replicas and cost, with every number explained."""

from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from pages._figures import cost_chart
from pages._shared import chosen_scenario, guarded, sample_scenarios, static_table
from servebench.analysis.summary import SLO
from servebench.analysis.walkthrough import score_prediction
from servebench.capacity import ACCELERATORS, DEFAULT_GPUS
from servebench.capacity.kv import dtype_bytes
from servebench.capacity.model_presets import PRESETS, get_preset
from servebench.dashboard.answers import ms_text, plan_answer, usd_text
from servebench.dashboard.traces import plan_rows
from servebench.dashboard.wording import SLO_TPOT_HELP, SLO_TTFT_HELP, ms_to_s
from servebench.formatting import fmt
from servebench.planning import PlanRequest, Workload, plan
from servebench.planning.interview import QUESTION, QUESTION_RATE_RPS, interview_request, interview_step
from servebench.planning.planner import MAX_NUM_SEQS, TENSOR_PARALLEL, Evaluation, Plan, fleet_sentence

HELP = {
    "capacity": "Highest arrival rate one replica serves with the SLO target met: the roofline step model goes "
                "into the simulator and the load sweep's capacity search bisects between a load that meets the "
                "SLOs and one that misses (never above the engine's throughput bound).",
    "replicas": "ceil(traffic / (capacity per replica × (1 − headroom))).",
    "gpus": "replicas × tensor-parallel degree.",
    "cost": "GPUs × hourly price (the price table below; defaults are dated public list prices).",
    "per_token": "cost per hour / (traffic × mean output tokens × 3600 / 1,000,000).",
    "limit": "What binds first as load grows, in the diagnosis's words: kv_memory, queueing (the max_num_seqs cap), "
             "prefill, decode, throughput (the engine has no time left for more requests), or none.",
}


PAGE_ROUTERS = ("round_robin", "least_outstanding", "power_of_two", "session_affinity")  # no prefix cache here


@st.cache_resource(max_entries=8, show_spinner=False)
def _interview(requests: int) -> tuple[Evaluation, Plan]:
    return plan(interview_request(requests), QUESTION_RATE_RPS)


st.title("Capacity planner")
st.caption("How many GPUs of which kind a workload needs within its SLOs, and what a million output tokens costs. "
           "Step times come from each GPU's public figures (a roofline); a simulated server finds how much load "
           "one replica sustains. An estimate, not a hardware guarantee: see docs/planner.md.")

st.subheader("Model and traffic")
c = st.columns(4)
model_name = c[0].selectbox("Model", list(PRESETS), index=list(PRESETS).index("llama-3.1-8b"), key="plan_model")
weights = c[1].radio("Weights", ["bf16", "fp8"], horizontal=True, key="plan_weights",
                     help="bytes per parameter read every step; fp8 also runs at the GPU's fp8 throughput")
rate = c[2].number_input("Traffic (requests/s)", min_value=0.001, value=10.0, step=1.0, key="plan_rate")
traffic_how = c[3].radio("Requests", ["Fixed lengths", "A scenario's mix"], key="plan_traffic_how")
if traffic_how == "Fixed lengths":
    c = st.columns(2)
    prompt = int(c[0].number_input("Prompt tokens", min_value=1, value=1000, step=100, key="plan_prompt"))
    output = int(c[1].number_input("Output tokens", min_value=1, value=200, step=50, key="plan_output"))
    workload = guarded(Workload.fixed, prompt, output)
else:
    c = st.columns(2)
    samples = sample_scenarios()
    sample = c[0].selectbox("Sample scenario", samples, key="plan_scenario")
    up = c[1].file_uploader("…or upload one (YAML or JSON)", type=["yaml", "yml", "json"], key="plan_upload")
    workload = guarded(Workload.from_scenario, chosen_scenario(up, sample))
    st.caption("The scenario's request classes, arrival process and scheduler settings; its rate, KV budget, "
               "max_num_seqs and step model are the planner's.")

st.subheader("SLOs")
c = st.columns(4)
slo_ttft_ms = c[0].number_input("TTFT (ms)", min_value=0.0, value=2000.0, step=500.0, key="plan_slo_ttft_ms",
                                help=SLO_TTFT_HELP)
slo_tpot_ms = c[1].number_input("Request TPOT (ms)", min_value=0.0, value=50.0, step=10.0, key="plan_slo_tpot_ms",
                                help=SLO_TPOT_HELP)
slo_ttft, slo_tpot = ms_to_s(slo_ttft_ms), ms_to_s(slo_tpot_ms)  # exact: 2.51 ms is 0.00251 s
slo_latency = c[2].number_input("Latency (s)", min_value=0.0, value=None, step=1.0, key="plan_slo_latency",
                                placeholder="no limit")
target = c[3].number_input("Share of requests that must meet them", min_value=0.51, max_value=1.0, value=0.95,
                           step=0.01, key="plan_target")

st.subheader("Hardware and prices")
# the GPU types on a row of their own: six chips in a third of the page were cut off at 1,400 px
gpus = st.multiselect("GPU types", list(ACCELERATORS), default=list(DEFAULT_GPUS), key="plan_gpus")
c = st.columns(2)
tps = c[0].multiselect("Tensor parallelism", list(TENSOR_PARALLEL), default=list(TENSOR_PARALLEL), key="plan_tp")
seqs = c[1].multiselect("max_num_seqs", [8, 16, 32, 64, 128, 256, 512], default=list(MAX_NUM_SEQS), key="plan_seqs")
c = st.columns([1, 2])
prices = c[0].data_editor(  # short columns only: a grid cuts long text off, so the sources are a table beside it
    pd.DataFrame([{"GPU": a.name, "USD per GPU-hour": a.price_usd_per_hour, "as of": a.price_date}
                  for a in ACCELERATORS.values()]),
    hide_index=True, disabled=["GPU", "as of"], key="plan_prices",
    column_config={"USD per GPU-hour": st.column_config.NumberColumn(min_value=0.0, format="%.2f")})
static_table(pd.DataFrame([{"GPU": a.name, "where the price comes from": a.price_source}
                           for a in ACCELERATORS.values()]), c[1])
c = st.columns(2)
requests = int(c[0].number_input("Requests per simulation", min_value=20, value=200, step=50, key="plan_requests",
                                 help="More requests: a steadier capacity estimate, slower planning."))
headroom = c[1].slider("Headroom (share of capacity left unused)", 0.0, 0.5, 0.2, 0.05, key="plan_headroom")
router = st.selectbox("Router in front of the replicas", list(PAGE_ROUTERS), key="plan_router",
                      help="The plan simulates the whole fleet behind this router at the planned traffic and adds "
                           "replicas until it meets the SLOs (docs/fleet.md).")

st.subheader("What if")
c = st.columns(3)
double = c[0].toggle("Double the traffic", key="plan_double")
halve = c[1].toggle("Halve the prompt", key="plan_halve")
c[2].toggle("Enable prefix caching", disabled=True, key="plan_prefix",
            help="Not modelled yet: the simulator has no prefix cache.")
if halve:
    workload = guarded(workload.with_prompt_scale, 0.5)
planned_rate = rate * (2 if double else 1)

price_map = {row["GPU"]: float(row["USD per GPU-hour"]) for row in prices.to_dict("records")}
request = guarded(lambda: PlanRequest(
    model=get_preset(model_name), weight_bytes_per_parameter=dtype_bytes(weights), workload=workload,
    slo=SLO(ttft_s=slo_ttft or None, tpot_s=slo_tpot or None, latency_s=slo_latency or None), slo_target=target,
    gpus=gpus, prices=price_map, tensor_parallel=tps, max_num_seqs=seqs, headroom=headroom,
    requests_per_simulation=requests, router=router))
settings = json.dumps({"request": request.model_dump(mode="json"), "rate": planned_rate}, sort_keys=True)

if st.button("Plan", type="primary", key="plan_run"):
    bar = st.progress(0.0, text="Screening configurations…")

    def on_progress(done: int, total: int, label: str) -> None:
        bar.progress(min(1.0, done / max(total, 1)), text=f"{done} of {total}: {label}")

    evaluation, result = guarded(plan, request, planned_rate, on_progress)
    bar.progress(1.0, text=f"Done: {evaluation.simulations} simulations")
    st.session_state["plan_result"] = (settings, evaluation, result)

stored = st.session_state.get("plan_result")
if stored is None:
    st.info("Set the model, traffic and SLOs, then plan.")
else:
    stored_settings, evaluation, result = stored
    if stored_settings != settings:
        st.warning("The settings changed since this plan ran; plan again to update it.")
    best = result.best
    (st.success if best else st.error)(f"**{plan_answer(result)}**")
    fleet_text = fleet_sentence(best, result.details[0]) if best is not None else None
    if fleet_text is not None:
        st.markdown(fleet_text)
    with st.expander("The numbers behind it: every configuration tried, and why this one"):
        c = st.columns(4)
        c[0].metric("Capacity per replica (req/s)", fmt(best.capacity_rps_per_replica if best else None),
                    help=HELP["capacity"])
        c[1].metric("GPUs in all", fmt(best.gpus_total if best else None), help=HELP["gpus"])
        c[2].metric("Cost per hour", usd_text(best.cost_per_hour_usd if best else None), help=HELP["cost"])
        c[3].metric("Per million output tokens", usd_text(best.cost_per_million_output_tokens_usd if best else None),
                    help=HELP["per_token"])
        st.markdown(result.reason or "")
        rows = plan_rows(result)  # every number through fmt: a configuration that does not fit reads —, not None
        for row, o in zip(rows, result.options):
            row["$/M output tokens"] = fmt(o.cost_per_million_output_tokens_usd)
        static_table(pd.DataFrame(rows))  # a Markdown table wraps; a grid cut the long columns off
        st.markdown("**How each capacity was found**\n\n" + "\n".join(
            f"- {o.gpu} ×{o.tensor_parallel}, max_num_seqs {fmt(o.max_num_seqs)}: {d.note}"
            for o, d in zip(result.options, result.details)))
        st.caption(" ".join(f"{k}: {v}" for k, v in (("Capacity", HELP["capacity"]), ("Replicas", HELP["replicas"]),
                                                      ("Limit", HELP["limit"]))))
        st.caption(f"{evaluation.simulations} simulations; {evaluation.pruned} configurations ruled out without "
                   f"simulating (no fit, or SLOs missed with no load); {len(evaluation.skipped)} not simulated "
                   "because even at their throughput bound they cost more than the cheapest found.")
    rates = [planned_rate * f for f in (0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 4)]
    st.vega_lite_chart(spec=cost_chart(evaluation, rates, planned_rate), key="plan_cost_chart")
    st.caption("Replicas are recomputed from the capacities found at each traffic level; configurations skipped "
               "by the cost bound at the planned traffic are not drawn.")
    if best is not None:
        d = result.details[0]
        with st.expander("How the cheapest option's numbers were computed"):
            step = d.step_model
            st.markdown(
                f"**Memory.** Weights {fmt(d.weights_gib_per_gpu)} GiB per GPU; KV budget "
                f"{fmt(d.kv_budget_gib_per_gpu)} GiB = {fmt(d.kv_budget_tokens)} tokens (the KV calculator, after "
                f"{request.memory_utilization:.0%} of memory and {request.overhead_gib:g} GiB overhead).\n\n"
                "**Step model (roofline).** " + "; ".join(
                    f"`{k}` = {fmt(getattr(step, k))} s: {v}" for k, v in d.how.items()) +
                f"\n\n**Efficiency factors:** {d.efficiency_source}.\n\n"
                f"**Alone on the server:** TTFT {ms_text(d.unloaded_ttft_s)}, TPOT {ms_text(d.unloaded_tpot_s)}.\n\n"
                f"**Capacity search:** {d.note}.\n\n**Price:** ${d.price_usd_per_hour:.2f} per GPU-hour, "
                f"{d.price_source}.")

st.divider()
st.subheader("Interview practice: predict, then reveal")
st.markdown(QUESTION)
guess = st.number_input("Your prediction: H100 GPUs in all", min_value=0, value=None, step=1, key="plan_quiz_guess",
                        placeholder="your prediction")
st.text_area("Your reasoning (not scored)", key="plan_quiz_notes", height=80)
if st.button("Reveal the planner's answer", key="plan_quiz_reveal"):
    st.session_state["plan_quiz_revealed"] = True
if st.session_state.get("plan_quiz_revealed"):
    with st.spinner("Planning the question on H100s…"):
        q_eval, q_plan = _interview(150)
    step = guarded(lambda: interview_step(q_eval, q_plan))
    score = score_prediction(step, {"h100s": guess})
    s = score.scores[0]
    verdict = ("no prediction" if s.predicted is None else
               "within 25%: well reasoned" if s.within else f"off by {fmt(s.error)} GPUs")
    st.success(f"The planner's answer: **{fmt(s.expected)} H100s** ({verdict}).")
    st.info(step.explanation)
