"""Load sweep: simulate a scenario over offered loads, find the usable capacity, and see where latency breaks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st
import yaml

from pages._shared import SAMPLE_DIR, fail, guarded, sharing, upload_error
from servebench.output.appsafety import SHARED_SWEEP_MAX_REQUESTS, is_long_sweep, sweep_requests_bound
from servebench.errors import ConfigError, InputFormatError
from servebench.serving.engine.sweep_validation import read_sweep_validation, sweep_validation_doc
from servebench.output.figures import sweep as sweep_figs
from servebench.output.figures.validate_sweep import measured_vs_simulated
from servebench.output.figures.summary import fmt, fmt_share
from servebench.capacity.model_presets import PRESETS, get_preset
from servebench.records.steps import StepTrace, steps_from_bytes
from servebench.serving.scenario import Scenario, load_scenario, parse_scenario, scenario_from_bytes
from servebench.capacity.stepmodel import COEFFICIENTS, StepFit, fit_step_model
from servebench.output.cautions import fit_warning
from servebench.analysis.summary import SLO
from servebench.serving.sweep import SweepResult, evaluate, sweep, sweep_csv, sweep_rows

SCENARIO_DIR = SAMPLE_DIR / "scenarios"
STEP_TRACE_KEY = "timing_run_steps"  # written by the Timing run page: (name, list of step rows)


def _read_scenario(upload) -> Scenario:
    if (too_big := upload_error(upload)) is not None:
        fail(InputFormatError(too_big))
    if upload is None:
        name = st.session_state.get("sweep_sample") or "profile_b.yaml"
        return guarded(load_scenario, SCENARIO_DIR / name)
    return guarded(scenario_from_bytes, upload.getvalue(), upload.name)  # the shared upload parser


def _read_trace(upload) -> StepTrace:
    if (too_big := upload_error(upload)) is not None:
        fail(InputFormatError(too_big))
    return guarded(steps_from_bytes, upload.getvalue(), upload.name)  # the one step-trace reader


@st.cache_resource(max_entries=4, show_spinner="Simulating that load…")
def _trace_at(scenario_json: str, load: float, mode: str, requests: int | None):
    scenario = Scenario.model_validate_json(scenario_json)
    _, sim = evaluate(scenario, load, mode, SLO(), 0.95, requests)
    return sim


st.title("Load sweep")
st.caption("A discrete-event simulation of a continuous-batching server, swept over offered load. "
           "Every arrival ends in one record: offered = success + failed + timeout + cancelled + rejected.")

st.subheader("Scenario")
samples = sorted(p.name for p in SCENARIO_DIR.glob("*.y*ml"))
c1, c2 = st.columns(2)
c1.selectbox("Sample scenario", samples, index=samples.index("profile_b.yaml") if "profile_b.yaml" in samples else 0,
             key="sweep_sample")
up = c2.file_uploader("…or upload one (YAML or JSON)", type=["yaml", "yml", "json"], key="scenario_upload")
base = _read_scenario(up)
if base.description:
    st.caption(base.description)
doc = base.model_dump(exclude_none=True)
server, work = doc["server"], doc["workload"]

c = st.columns(4)
preset = c[0].selectbox("Model shape", ["scenario's", *PRESETS], key=f"sweep_model:{base.name}")
if preset != "scenario's":
    server["model"] = guarded(get_preset, preset).model_dump(exclude_none=True)
    server.pop("kv_budget_tokens", None)
if "model" in server:
    server["kv_budget_gib"] = c[1].number_input("KV budget (GiB)", min_value=0.01, step=1.0, key=f"sweep_gib:{base.name}",
                                                value=float(server.get("kv_budget_gib") or 8.0))
    server.pop("kv_budget_tokens", None)
else:
    server["kv_budget_tokens"] = int(c[1].number_input("KV budget (tokens)", min_value=1, step=1024, key=f"sweep_tok:{base.name}",
                                                       value=int(server["kv_budget_tokens"])))
server["policy"] = c[2].radio("Admission policy", ["reserve", "paged"], key=f"sweep_policy:{base.name}",
                              index=["reserve", "paged"].index(server.get("policy", "reserve")), horizontal=True)
server["max_num_seqs"] = int(c[3].number_input("Max running sequences", min_value=1, key=f"sweep_seqs:{base.name}",
                                               value=int(server.get("max_num_seqs", 256))))

st.markdown("**Workload mix** (one row per request class)")
classes = work["classes"]
all_fixed = all(cl["prompt"]["kind"] == "fixed" and cl["output"]["kind"] == "fixed" for cl in classes)
mix = pd.DataFrame([{"class": cl.get("name", "default"), "weight": cl.get("weight", 1.0),
                     "prompt tokens": cl["prompt"].get("value"), "output tokens": cl["output"].get("value"),
                     "output cap": cl.get("max_output_tokens")} for cl in classes])
edited = st.data_editor(mix, key=f"sweep_mix:{base.name}", hide_index=True, num_rows="dynamic" if all_fixed else "fixed",
                        disabled=[] if all_fixed else ["class", "prompt tokens", "output tokens", "output cap"])
if not all_fixed:
    st.caption("Classes with length distributions keep them; only their weights are editable here.")
if edited.empty:
    fail(ConfigError("the workload mix needs at least one class"))
new_classes = []
for i, row in enumerate(edited.to_dict("records")):
    cl = dict(classes[i]) if i < len(classes) else {"prompt": {"kind": "fixed"}, "output": {"kind": "fixed"}}
    cl["name"], cl["weight"] = str(row["class"] or f"class{i + 1}"), row["weight"]
    if all_fixed:
        cl["prompt"] = {"kind": "fixed", "value": None if pd.isna(row["prompt tokens"]) else int(row["prompt tokens"])}
        cl["output"] = {"kind": "fixed", "value": None if pd.isna(row["output tokens"]) else int(row["output tokens"])}
        cl["max_output_tokens"] = None if pd.isna(row["output cap"]) else int(row["output cap"])
    new_classes.append(cl)
work["classes"] = new_classes

st.markdown("**Step-time model**")
step_how = st.radio("Step time", ["scenario's", "flat timings", "coefficients", "fitted from a timing run"],
                    horizontal=True, key=f"step_how:{base.name}")
fit: StepFit | None = None
if step_how == "flat timings":
    flat = doc["step_model"].get("flat") or {}
    c = st.columns(3)
    doc["step_model"] = {"flat": {
        "prefill_s": c[0].number_input("Prefill of one prompt (s)", min_value=0.0, value=float(flat.get("prefill_s", 0.15)),
                                       key=f"flat_prefill:{base.name}"),
        "prompt_tokens": int(c[1].number_input("…of this many tokens", min_value=1,
                                               value=int(flat.get("prompt_tokens", 1000)), key=f"flat_tokens:{base.name}")),
        "tpot_s": c[2].number_input("Decode step (s)", min_value=0.0, value=float(flat.get("tpot_s", 0.03)),
                                    format="%.4f", key=f"flat_tpot:{base.name}")}}
elif step_how == "coefficients":
    current = guarded(lambda: base.step_model.to_model())
    c = st.columns(4)
    doc["step_model"] = {name: col.number_input(name, min_value=0.0, value=float(getattr(current, name)),
                                                format="%.3e", key=f"coef_{name}:{base.name}")
                         for col, name in zip(c, COEFFICIENTS)}
elif step_how == "fitted from a timing run":
    trace_up = st.file_uploader("Step trace of a timing run (CSV, JSON or JSONL)", key="trace_upload")
    last = st.session_state.get(STEP_TRACE_KEY)
    if trace_up is not None:
        rows, trace_name = _read_trace(trace_up), trace_up.name
    elif last is not None:
        trace_name, rows = last
    else:
        st.info("Upload a step trace, or do a timing run first (Timing run page): its steps are used here.")
        st.stop()
    fit = guarded(fit_step_model, rows)
    if fit.quality is not None and not fit.quality.usable:
        st.error(f"The step model fits too poorly to predict from: {fit.quality.reason}.")
        if not st.checkbox("Predict anyway (the sweep then rests on a poor fit)", key="allow_poor_fit"):
            st.stop()
    doc["step_model"] = fit.model.model_dump()
    c = st.columns(4)
    c[0].metric("Steps fitted", fmt(fit.steps), help=f"From {trace_name}.")
    c[1].metric("RMSE of step time (s)", fmt(fit.rmse_s))
    c[2].metric("Mean abs. relative error", fmt_share(fit.mean_abs_pct_error))
    c[3].metric("R²", fmt(fit.r2))
    st.caption("Fitted: " + ", ".join(f"{k} = {fmt(v)}" for k, v in fit.model.model_dump().items()))
    poor_fit = fit_warning(fit)
    if poor_fit:
        st.warning(poor_fit, icon=":material/report:")
scenario = guarded(parse_scenario, doc, base.name)

st.subheader("Sweep")
mode = "rate" if scenario.workload.arrival is not None else "users"
c = st.columns([3, 1, 1])
loads_text = c[0].text_input("Offered loads (requests/s)" if mode == "rate" else "Concurrent users",
                             value="0.25, 0.5, 0.75, 1, 1.25, 1.5, 2" if mode == "rate" else "1, 2, 4, 8, 16, 32",
                             key="loads")
requests = int(c[1].number_input("Requests per point", min_value=10, step=100, key="sweep_requests",
                                 value=int(scenario.workload.num_requests or 1000)))
search = c[2].toggle("Search for capacity", value=True, key="sweep_search",
                     help="Bisect between the last load meeting the SLOs and the first missing them.")
c = st.columns(4)
slo_ttft = c[0].number_input("SLO: TTFT (s)", min_value=0.0, value=5.0, step=0.5, key="sweep_slo_ttft")
slo_tpot = c[1].number_input("SLO: request TPOT (s)", min_value=0.0, value=None, step=0.01, key="sweep_slo_tpot",
                             placeholder="no limit")
slo_latency = c[2].number_input("SLO: latency (s)", min_value=0.0, value=None, step=1.0, key="sweep_slo_latency",
                                placeholder="no limit")
target = c[3].number_input("Share of requests that must meet it", min_value=0.01, max_value=1.0, value=0.95,
                           step=0.01, key="sweep_target")
try:
    loads = [float(x) for x in loads_text.replace(",", " ").split()]
except ValueError:
    fail(InputFormatError(f"offered loads: {loads_text!r} is not a list of numbers"))
slo = SLO(ttft_s=slo_ttft or None, tpot_s=slo_tpot or None, latency_s=slo_latency or None)
settings = json.dumps({"scenario": scenario.model_dump(mode="json"), "loads": loads, "requests": requests,
                       "search": search, "slo": slo.model_dump(), "target": target}, sort_keys=True)

share = sharing()
if not share.may_start_work and is_long_sweep(len(set(loads)), requests, search):
    bound = sweep_requests_bound(len(set(loads)), requests, search)
    st.warning(share.opt_in_message(f"a sweep of up to {bound:,} simulated requests (more than "
                                    f"{SHARED_SWEEP_MAX_REQUESTS:,})") +
               " Fewer loads or requests per point make a short sweep, which runs.", icon=":material/lock:")
elif st.button("Run the sweep", type="primary", key="run_sweep"):
    bar = st.progress(0.0, text="Starting…")

    def on_point(done: int, total: int, point) -> None:
        bar.progress(min(1.0, done / total), text=f"{done} simulations (up to {total}): load {point.load:g}, "
                                                  f"p95 TTFT {fmt(point.ttft_s.get('p95'))} s")

    result = guarded(sweep, scenario, loads, mode=mode, slo=slo, slo_target=target, requests=requests,
                     search=search, progress=on_point)
    bar.progress(1.0, text=f"Done: {len(result.points)} simulations")
    st.session_state["sweep_result"] = (settings, result)

with st.expander("Measured vs simulated: load a `servebench validate-sweep` result", expanded=False):
    st.caption("validate-sweep runs the real engine at each offered rate, fits the step model on the traces and "
               "simulates the same rates on the same seeds. Load its output folder (on this machine) or upload its "
               "validate_sweep.json to overlay the measured and simulated curves.")
    c = st.columns(2)
    vs_upload = c[0].file_uploader("validate_sweep.json", type=["json"], key="validate_sweep_upload")
    vs_folder = c[1].text_input("…or its output folder", key="validate_sweep_folder",
                                placeholder="out/validate_sweep", disabled=not sharing().may_start_work,
                                help="Read from this machine's disk; off on a shared dashboard.")
    vs_doc = None
    if vs_upload is not None:
        if (too_big := upload_error(vs_upload)) is not None:
            fail(InputFormatError(too_big))
        try:
            raw = json.loads(vs_upload.getvalue().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            fail(InputFormatError(f"{vs_upload.name}: not JSON: {exc}"))
        vs_doc = guarded(sweep_validation_doc, raw, vs_upload.name)
    elif vs_folder and sharing().may_start_work:
        vs_doc = guarded(read_sweep_validation, Path(vs_folder))
    if vs_doc is not None:
        c = st.columns(3)
        c[0].metric("Measured knee (requests/s)", fmt(vs_doc.get("measured_knee_rps")))
        c[1].metric("Simulated knee (requests/s)", fmt(vs_doc.get("simulated_knee_rps")))
        err = vs_doc.get("knee_relative_error")
        c[2].metric("Knee error", "-" if not isinstance(err, (int, float)) else f"{err:+.1%}")
        if vs_doc.get("fit_summary"):
            st.caption(f"Simulated with the {vs_doc['fit_summary']}.")
        st.plotly_chart(measured_vs_simulated(vs_doc), key="validate_sweep_overlay")
        st.dataframe(pd.DataFrame([{"rate": p["rate_rps"], **{f"{k} measured": fmt(p["measured"].get(k))
                                                              for k in ("ttft_p95_s", "latency_p95_s")},
                                    **{f"{k} simulated": fmt(p["simulated"].get(k))
                                       for k in ("ttft_p95_s", "latency_p95_s")},
                                    "below knee": p.get("below_knee")} for p in vs_doc["points"]]),
                     hide_index=True)

stored = st.session_state.get("sweep_result")
if stored is None:
    st.info("Set the scenario and loads, then run the sweep.")
    st.stop()
stored_settings, result = stored
result: SweepResult
if stored_settings != settings:
    st.warning("The settings changed since this sweep ran; run it again to update the results.")

cap = result.capacity
c = st.columns(4)
c[0].metric("Usable capacity", f"{fmt(cap.load)} {'req/s' if result.mode == 'rate' else 'users'}", help=cap.note)
c[1].metric("First load missing the SLOs", fmt(cap.upper))
c[2].metric("Knee (p95 latency or TTFT doubles)", fmt(result.knee_load))
c[3].metric("KV budget (tokens)", fmt(result.kv_budget_tokens))
st.caption(cap.note)
st.plotly_chart(sweep_figs.latency_vs_load(result), key="sweep_latency")
st.plotly_chart(sweep_figs.outcomes_vs_load(result), key="sweep_outcomes")

loads_done = [p.load for p in result.points]
default = cap.upper if cap.upper in loads_done else loads_done[-1]
at_load = st.selectbox("Active sequences over time at load", loads_done, index=loads_done.index(default),
                       format_func=lambda x: f"{x:g}", key="trace_load")
scenario_run = Scenario.model_validate(json.loads(stored_settings)["scenario"])
sim = guarded(_trace_at, scenario_run.model_dump_json(), at_load, result.mode, result.requests_per_point)
st.plotly_chart(sweep_figs.trace_over_time(sim.trace, kv_budget_tokens=sim.kv_budget_tokens,
                                           title=f"Engine over time at load {at_load:g}"), key="sweep_trace")

st.dataframe(pd.DataFrame(sweep_rows(result)), hide_index=True)
c = st.columns(2)
c[0].download_button("Sweep (CSV)", lambda: sweep_csv(result), file_name=f"{result.scenario}.sweep.csv",
                     mime="text/csv", on_click="ignore")
c[1].download_button("Sweep (JSON)", lambda: result.model_dump_json(indent=2), file_name=f"{result.scenario}.sweep.json",
                     mime="application/json", on_click="ignore")
