"""Load sweep: simulate a scenario over offered loads, find the usable capacity, and see where latency breaks."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import streamlit as st

from pages._figures import overlay_charts, sweep_charts, trace_charts, validation_charts
from pages._shared import (
    STEP_TRACE_KEY,
    chosen_scenario,
    fail,
    guarded,
    sample_scenarios,
    sharing,
    static_table,
    upload_error,
)
from pages._url import keep, one_of, positive, seed
from servebench.analysis.summary import SLO
from servebench.capacity.model_presets import PRESETS, get_preset
from servebench.capacity.stepmodel import COEFFICIENTS, StepFit, fit_step_model
from servebench.dashboard.answers import sweep_answer
from servebench.dashboard.sharing import SHARED_SWEEP_MAX_REQUESTS, is_long_sweep, sweep_requests_bound
from servebench.dashboard.sweep_form import SLO_TTFT_MS, load_axis, replay_caption
from servebench.dashboard.wording import SLO_TPOT_HELP, SLO_TTFT_HELP, ms_to_s, s_to_ms
from servebench.errors import InputFormatError
from servebench.formatting import NO_DATA, fmt, fmt_share
from servebench.output.cautions import fit_warning
from servebench.output.figures import sweep as sweep_figs
from servebench.records.steps import StepTrace, steps_from_bytes
from servebench.serving.engine.sweep_validation import read_sweep_validation, sweep_validation_doc
from servebench.serving.scenario import (
    FlatStep,
    Scenario,
    StepModelSpec,
    with_kv_budget_tokens,
    with_max_num_seqs,
    with_mix,
    with_model,
    with_policy,
    with_step_model,
)
from servebench.serving.sweep import SweepResult, evaluate, sweep, sweep_csv

KEPT_KEY = "kept_sweeps"  # label -> SweepResult: every sweep run this session, for overlaying (A vs B)


def _read_trace(upload) -> StepTrace:
    if (too_big := upload_error(upload)) is not None:
        fail(InputFormatError(too_big))
    return guarded(steps_from_bytes, upload.getvalue(), upload.name)  # the one step-trace reader


@st.cache_resource(max_entries=4, show_spinner="Simulating that load…")
def _trace_at(scenario_json: str, load: float, mode: str, requests: int | None):
    scenario = Scenario.model_validate_json(scenario_json)
    _, sim = evaluate(scenario, load, mode, SLO(), 0.95, requests)
    return sim


def _label(scenario: Scenario) -> str:
    """Name a sweep by what tells it apart: scenario, policy, sequence limit, KV budget, step model."""
    server = scenario.server
    budget = f"{server.kv_budget_gib:g} GiB" if server.kv_budget_gib is not None else \
        f"{server.budget_tokens():,} KV tokens"
    return f"{scenario.name}: {server.policy}, {server.max_num_seqs} seqs, {budget}"


def _measured_upload(upload) -> tuple[str, SweepResult | dict]:
    """Read an uploaded sweep.json (servebench load --sweep or sweep) or validate_sweep.json; errors stop the page."""
    if (too_big := upload_error(upload)) is not None:
        fail(InputFormatError(too_big))
    try:
        raw = json.loads(upload.getvalue().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        fail(InputFormatError(f"{upload.name}: not JSON: {exc}"))
    if isinstance(raw, dict) and "capacity" in raw and "points" in raw:
        try:
            return "sweep", SweepResult.model_validate(raw)
        except ValueError as exc:
            fail(InputFormatError(f"{upload.name}: not a servebench sweep.json ({str(exc).splitlines()[0]})"))
    return "validation", guarded(sweep_validation_doc, raw, upload.name)


st.title("Load sweep")
st.caption("A discrete-event simulation of a continuous-batching server, swept over offered load. "
           "Every arrival ends in one record: offered = success + failed + timeout + cancelled + rejected.")

st.subheader("Scenario")
samples = sample_scenarios()
seed("sweep_sample", "scenario", one_of(samples), "profile_b.yaml" if "profile_b.yaml" in samples else samples[0])
c1, c2 = st.columns(2)
sample = c1.selectbox("Sample scenario", samples, key="sweep_sample")
up = c2.file_uploader("…or upload one (YAML or JSON)", type=["yaml", "yml", "json"], key="scenario_upload")
base = chosen_scenario(up, sample)
keep("scenario", sample if up is None else None, "profile_b.yaml")
if base.description:
    st.caption(base.description)
scenario = base

c = st.columns(4)
preset = c[0].selectbox("Model shape", ["scenario's", *PRESETS], key=f"sweep_model:{base.name}")
shape = guarded(get_preset, preset) if preset != "scenario's" else base.server.model
if shape is not None:
    seed(f"sweep_gib:{base.name}", "kv_gib", positive(float), float(base.server.kv_budget_gib or 8.0))
    gib = c[1].number_input("KV budget (GiB)", min_value=0.01, step=1.0, key=f"sweep_gib:{base.name}")
    scenario = guarded(with_model, scenario, shape, gib)
    keep("kv_gib", gib, base.server.kv_budget_gib)
else:
    seed(f"sweep_tok:{base.name}", "kv_tokens", positive(int), int(base.server.budget_tokens()))
    tokens = int(c[1].number_input("KV budget (tokens)", min_value=1, step=1024, key=f"sweep_tok:{base.name}"))
    scenario = guarded(with_kv_budget_tokens, scenario, tokens)
    keep("kv_tokens", tokens, base.server.kv_budget_tokens)
seed(f"sweep_policy:{base.name}", "policy", one_of(["reserve", "paged"]), base.server.policy)
policy = c[2].radio("Admission policy", ["reserve", "paged"], key=f"sweep_policy:{base.name}", horizontal=True)
scenario = guarded(with_policy, scenario, policy)
keep("policy", policy, base.server.policy)
seed(f"sweep_seqs:{base.name}", "max_seqs", positive(int), int(base.server.max_num_seqs))
seqs = int(c[3].number_input("Max running sequences", min_value=1, key=f"sweep_seqs:{base.name}"))
scenario = guarded(with_max_num_seqs, scenario, seqs)
keep("max_seqs", seqs, base.server.max_num_seqs)

replayed = replay_caption(base)  # a trace gives every request (servebench.dashboard.sweep_form): no mix
if replayed is not None:
    st.markdown(f"**Workload**: {replayed}")
else:
    st.markdown("**Workload mix** (one row per request class)")
    classes = base.workload.classes
    all_fixed = all(cl.prompt.kind == "fixed" and cl.output.kind == "fixed" for cl in classes)
    mix = pd.DataFrame([{"class": cl.name, "weight": cl.weight, "prompt tokens": cl.prompt.value,
                         "output tokens": cl.output.value, "output cap": cl.max_output_tokens} for cl in classes])
    edited = st.data_editor(mix, key=f"sweep_mix:{base.name}", hide_index=True, num_rows="dynamic" if all_fixed else "fixed",
                            disabled=[] if all_fixed else ["class", "prompt tokens", "output tokens", "output cap"])
    if not all_fixed:
        st.caption("Classes with length distributions keep them; only their weights are editable here.")

    def _cell(value, cast=int):
        return None if pd.isna(value) else cast(value)

    rows = [{"name": _cell(r["class"], str), "weight": _cell(r["weight"], float), "prompt_tokens": _cell(r["prompt tokens"]),
             "output_tokens": _cell(r["output tokens"]), "output_cap": _cell(r["output cap"])}
            for r in edited.to_dict("records")]
    scenario = guarded(with_mix, scenario, rows)

st.markdown("**Step-time model**")
step_how = st.radio("Step time", ["scenario's", "flat timings", "coefficients", "fitted from a timing run"],
                    horizontal=True, key=f"step_how:{base.name}")
fit: StepFit | None = None
if step_how == "flat timings":
    flat = base.step_model.flat or FlatStep(prefill_s=0.15, prompt_tokens=1000, tpot_s=0.03)
    c = st.columns(3)
    spec = StepModelSpec(flat=FlatStep(  # typed in ms, as every time on the dashboard; the scenario takes s
        prefill_s=ms_to_s(c[0].number_input("Prefill of one prompt (ms)", min_value=0.0,
                                            value=s_to_ms(flat.prefill_s), step=10.0,
                                            key=f"flat_prefill_ms:{base.name}")),
        prompt_tokens=int(c[1].number_input("…of this many tokens", min_value=1, value=int(flat.prompt_tokens),
                                            key=f"flat_tokens:{base.name}")),
        tpot_s=ms_to_s(c[2].number_input("Decode step (ms)", min_value=0.0, value=s_to_ms(flat.tpot_s), step=1.0,
                                         key=f"flat_tpot_ms:{base.name}"))))
    scenario = guarded(with_step_model, scenario, spec)
elif step_how == "coefficients":
    current = guarded(lambda: base.step_model.to_model())
    c = [col for _ in range(0, len(COEFFICIENTS), 4) for col in st.columns(4)]  # rows of 4, one per coefficient
    spec = StepModelSpec(**{name: col.number_input(name, min_value=0.0, value=float(getattr(current, name)),
                                                   format="%.3e", key=f"coef_{name}:{base.name}")
                            for col, name in zip(c, COEFFICIENTS)})
    scenario = guarded(with_step_model, scenario, spec)
elif step_how == "fitted from a timing run":
    trace_up = st.file_uploader("Step trace of a timing run (CSV, JSON or JSONL)", key="trace_upload")
    last = st.session_state.get(STEP_TRACE_KEY)
    if trace_up is not None:
        trace, trace_name = _read_trace(trace_up), trace_up.name
    elif last is not None:
        trace_name, trace = last
    else:
        st.info("Upload a step trace, or do a timing run first (Timing run page): its steps are used here.")
        st.stop()
    fit = guarded(fit_step_model, trace)
    c = st.columns(4)
    c[0].metric("Steps fitted", fmt(fit.steps), help=f"From {trace_name}.")
    c[1].metric("RMSE of step time (ms)", fmt(s_to_ms(fit.rmse_s)),
                help="How far the fitted step times are from the measured ones, typically (root mean square).")
    c[2].metric("Mean abs. relative error", fmt_share(fit.mean_abs_pct_error),
                help="How far off the fitted step time is from a measured step, on average, as a share of it.")
    c[3].metric("R²", fmt(fit.r2), help="How much of the steps' variation the fit explains (1: all of it).")
    st.caption("Fitted: " + ", ".join(f"{k} = {fmt(v)}" for k, v in fit.model.model_dump().items()))
    poor_fit = fit_warning(fit)  # one message: the numbers, the thresholds, a suggestion, then the choice
    if poor_fit:
        st.error(poor_fit, icon=":material/report:")
        if not st.checkbox("Predict anyway (the sweep then rests on a poor fit)", key="allow_poor_fit"):
            st.stop()
    scenario = guarded(with_step_model, scenario, fit.model)

st.subheader("Sweep")
axis = guarded(load_axis, scenario)  # a trace is swept by its speedup, as servebench sweep sweeps it
mode = axis.mode
c = st.columns([3, 1, 1])
loads_default = axis.default_loads
seed("loads", "loads", str, loads_default)
loads_text = c[0].text_input(axis.label, key="loads")
seed("sweep_requests", "requests", positive(int), int(scenario.workload.num_requests or 1000))
requests = int(c[1].number_input("Requests per point", min_value=10, step=100, key="sweep_requests"))
search = c[2].toggle("Search for capacity", value=True, key="sweep_search",
                     help="Bisect between the last load meeting the SLOs and the first missing them.")
c = st.columns(4)
# TTFT and TPOT in ms, as on every page (the planner's, the Traces page's, Summary's numbers); the sweep takes s
seed("sweep_slo_ttft_ms", "slo_ttft_ms", positive(float), SLO_TTFT_MS)
slo_ttft_ms = c[0].number_input("SLO: TTFT (ms)", min_value=0.0, step=500.0, key="sweep_slo_ttft_ms",
                                help=SLO_TTFT_HELP)
slo_tpot_ms = c[1].number_input("SLO: request TPOT (ms)", min_value=0.0, value=None, step=10.0,
                                key="sweep_slo_tpot_ms", placeholder="no limit", help=SLO_TPOT_HELP)
slo_ttft, slo_tpot = ms_to_s(slo_ttft_ms), ms_to_s(slo_tpot_ms)
slo_latency = c[2].number_input("SLO: latency (s)", min_value=0.0, value=None, step=1.0, key="sweep_slo_latency",
                                placeholder="no limit")
seed("sweep_target", "target", positive(float), 0.95)
target = c[3].number_input("Share of requests that must meet it", min_value=0.01, max_value=1.0, step=0.01,
                           key="sweep_target")
for param, value, default in (("loads", loads_text, loads_default), ("requests", requests, None),
                              ("slo_ttft_ms", slo_ttft_ms, SLO_TTFT_MS), ("target", target, 0.95)):
    keep(param, value, default)
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
                                                  f"p95 TTFT {fmt(s_to_ms(point.ttft_s.get('p95')))} ms")

    result = guarded(sweep, scenario, loads, mode=mode, slo=slo, slo_target=target, requests=requests,
                     search=search, progress=on_point)
    bar.progress(1.0, text=f"Done: {len(result.points)} simulations")
    st.session_state["sweep_result"] = (settings, result)
    st.session_state.setdefault(KEPT_KEY, {})[_label(scenario)] = result  # the same settings again replace it

measured: list[sweep_figs.SweepSeries] = []
with st.expander("Measured sweeps: `servebench load --sweep` or `validate-sweep` output", expanded=False,
                 icon=":material/compare_arrows:"):
    st.caption("`servebench load URL --sweep RATES -o DIR` measures a real server at each rate and writes "
               "DIR/sweep.json; `servebench validate-sweep` runs the local engine at each rate and simulates the same "
               "rates (validate_sweep.json). Upload either, or give validate-sweep's output folder, to overlay it "
               "on the simulated sweeps below.")
    c = st.columns(2)
    m_upload = c[0].file_uploader("sweep.json or validate_sweep.json", type=["json"], key="validate_sweep_upload")
    vs_folder = c[1].text_input("…or validate-sweep's output folder", key="validate_sweep_folder",
                                placeholder="out/validate_sweep", disabled=not sharing().may_start_work,
                                help="Read from this machine's disk; off on a shared dashboard.")
    vs_doc = None
    if m_upload is not None:
        kind, read = _measured_upload(m_upload)
        if kind == "sweep":
            measured.append(sweep_figs.series_of(read, f"measured: {m_upload.name}", measured=True))
            st.caption(f"{m_upload.name}: {len(read.points)} measured points of {read.scenario}; capacity "
                       f"{sweep_figs.capacity_reading(read).value}, knee {fmt(read.knee_load)}.")
        else:
            vs_doc = read
    elif vs_folder and sharing().may_start_work:
        vs_doc = guarded(read_sweep_validation, Path(vs_folder))
    if vs_doc is not None:
        measured += sweep_figs.series_of_validation(vs_doc)
        c = st.columns(3)
        knee_help = "The lowest load whose p95 latency or TTFT is over twice the lowest load's."
        c[0].metric("Measured knee (requests/s)", fmt(vs_doc.get("measured_knee_rps")), help=knee_help)
        c[1].metric("Simulated knee (requests/s)", fmt(vs_doc.get("simulated_knee_rps")), help=knee_help)
        err = vs_doc.get("knee_relative_error")
        c[2].metric("Knee error", NO_DATA if not isinstance(err, (int, float)) else f"{err:+.1%}",
                    help="How far the simulated knee is from the measured one, as a share of the measured.")
        if vs_doc.get("fit_summary"):
            st.caption(f"Simulated with the {vs_doc['fit_summary']}.")
        for name, spec in validation_charts(vs_doc).items():  # full width: a knee's label fits right of its line
            st.vega_lite_chart(spec=spec, key=f"validate_sweep_{name}")
        static_table(pd.DataFrame([{"Rate (req/s)": fmt(p["rate_rps"]),
                                    "TTFT p95 measured (ms)": fmt(s_to_ms(p["measured"].get("ttft_p95_s"))),
                                    "TTFT p95 simulated (ms)": fmt(s_to_ms(p["simulated"].get("ttft_p95_s"))),
                                    "Latency p95 measured (s)": fmt(p["measured"].get("latency_p95_s")),
                                    "Latency p95 simulated (s)": fmt(p["simulated"].get("latency_p95_s")),
                                    "Below the knee": "yes" if p.get("below_knee") else "no"}
                                   for p in vs_doc["points"]]))

kept: dict[str, SweepResult] = st.session_state.get(KEPT_KEY, {})
if len(kept) + len(measured) > 1 or (kept and measured):
    st.subheader("Sweeps side by side")
    st.caption("Every sweep run in this session is kept under its settings (change the policy or the KV budget and "
               "run again for A vs B); measured sweeps loaded above are dashed.")
    chosen = st.multiselect("Simulated sweeps", list(kept), default=list(kept)[-4:], key="overlay_pick")
    series = [sweep_figs.series_of(kept[name], name) for name in chosen] + measured
    if series:
        for name, spec in overlay_charts(series, mode).items():
            st.vega_lite_chart(spec=spec, key=f"sweep_overlay_{name}")
    if st.button("Forget the kept sweeps", key="forget_sweeps"):
        st.session_state[KEPT_KEY] = {}
        st.rerun()

stored = st.session_state.get("sweep_result")
if stored is None:
    st.info("Set the scenario and loads, then run the sweep.")
    st.stop()
stored_settings, result = stored
result: SweepResult
if stored_settings != settings:
    st.warning("The settings changed since this sweep ran; run it again to update the results.")

st.subheader("Capacity")
st.success(f"**{sweep_answer(result)}**")
cap = result.capacity
reading = sweep_figs.capacity_reading(result)
unit = sweep_figs.load_unit(result)
c = st.columns(4)
c[0].metric("Usable capacity", f"{reading.value} {unit}", help=f"{reading.interval}. {cap.note}.")
c[1].metric(f"Plausible range ({unit})", "—" if reading.low is None or reading.high is None else
            sweep_figs.range_text(reading.low, reading.high),
            help="From the highest load clearly meeting the SLOs to the lowest clearly missing them, given the "
                 "requests per point (Wilson 95% intervals of each load's SLO attainment).")
c[2].metric(f"Knee ({unit})", fmt(result.knee_load),
            help="The lowest load whose p95 latency or p95 TTFT is over twice the lowest load's.")
c[3].metric("KV budget (tokens)", fmt(result.kv_budget_tokens),
            help="How many tokens of KV cache the server holds: what the running requests share.")
st.caption(f"{reading.note} Search: {cap.note}.")
charts = sweep_charts(result)
st.vega_lite_chart(spec=charts["latency"], key="sweep_latency")
st.vega_lite_chart(spec=charts["ttft"], key="sweep_ttft")
st.caption(sweep_figs.FAILURE_AWARE_NOTE)
st.vega_lite_chart(spec=charts["outcomes"], key="sweep_outcomes")

loads_done = [p.load for p in result.points]
default = cap.upper if cap.upper in loads_done else loads_done[-1]
at_load = st.selectbox("Active sequences over time at load", loads_done, index=loads_done.index(default),
                       format_func=lambda x: f"{x:g}", key="trace_load")
scenario_run = Scenario.model_validate(json.loads(stored_settings)["scenario"])
sim = guarded(_trace_at, scenario_run.model_dump_json(), at_load, result.mode, result.requests_per_point)
for name, spec in trace_charts(sim.trace, sim.kv_budget_tokens, f"Engine over time at load {at_load:g}").items():
    st.vega_lite_chart(spec=spec, key=f"sweep_trace_{name}")

for title, frame in sweep_figs.sweep_frames(result):
    static_table(frame, title=f"**{title}**")
c = st.columns(2)
c[0].download_button("Sweep (CSV)", lambda: sweep_csv(result), file_name=f"{result.scenario}.sweep.csv",
                     mime="text/csv", on_click="ignore")
c[1].download_button("Sweep (JSON)", lambda: result.model_dump_json(indent=2), file_name=f"{result.scenario}.sweep.json",
                     mime="application/json", on_click="ignore")
