"""Timing run: serve a scenario in real time on the local torch engine, then open its records on the Summary page."""

from __future__ import annotations

import os

import streamlit as st

from pages._shared import (
    STEP_TRACE_KEY,
    RecordSource,
    chosen_scenario,
    fail,
    guarded,
    sample_scenarios,
    set_source,
    sharing,
)
from servebench.dashboard.timing import BackgroundRun
from servebench.output.cautions import cpu_model_warning
from servebench.records.rundir import METADATA, RECORDS, STEPS
from servebench.serving.engine.model import PRESETS as ENGINE_PRESETS
from servebench.serving.engine.model import device_name, pick_device
from servebench.serving.scenario import with_request_count

st.title("Timing run")
st.caption("A real run: a decoder-only transformer with seeded random weights (no downloads) serves the scenario's "
           "arrivals on the wall clock, with a paged KV cache and continuous batching under the same scheduler as "
           "the simulator. Queueing is real; timeouts, rejections and cancellations stay in the records.")

samples = sample_scenarios()
c1, c2 = st.columns(2)
sample = c1.selectbox("Scenario", samples, index=samples.index("tiny_cpu.yaml") if "tiny_cpu.yaml" in samples else 0,
                      key="run_sample")
up = c2.file_uploader("…or upload one (YAML or JSON)", type=["yaml", "yml", "json"], key="run_upload")
scenario = chosen_scenario(up, sample)
if scenario.description:
    st.caption(scenario.description)

c = st.columns(5)
model = c[0].selectbox("Engine model", list(ENGINE_PRESETS), key="run_model",
                       help="Shapes of real models with random weights; tiny and small suit a CPU.")
device = c[1].selectbox("Device", ["auto", "cpu", "cuda"], key="run_device")
threads = int(c[2].number_input("CPU threads", min_value=1, max_value=os.cpu_count() or 1, value=1, key="run_threads"))
requests = int(c[3].number_input("Requests", min_value=1, key=f"run_requests:{scenario.name}",
                                 value=int(scenario.workload.num_requests or 100)))
max_wall_s = c[4].number_input("Stop after (s)", min_value=1.0, value=60.0, step=10.0, key="run_max_wall",
                               help="Requests still live then end as cancelled (run_time_limit); unsent ones are not offered.")
dev, dtype = guarded(pick_device, device)
shape = ENGINE_PRESETS[model]
st.info(f"Runs on **{device_name(dev)}** ({str(dtype).removeprefix('torch.')}) · model **{model}**: "
        f"{shape.layers} layers, {shape.heads} heads ({shape.kv_heads} KV), {shape.param_count:,} parameters",
        icon=":material/memory:")
too_big = cpu_model_warning(model, shape.param_count, dev.type)
if too_big:
    st.warning(too_big, icon=":material/warning:")

RUN_KEY = "timing_run_job"  # the BackgroundRun in progress (or just ended) in this session


@st.fragment(run_every=0.5)
def _watch(job: BackgroundRun) -> None:
    """Show the run's progress and its Stop button, twice a second; once it has ended, rerun the page to open it."""
    if job.done:
        st.rerun()
    total = job.total or job.scenario.workload.num_requests or 1
    text = "Warming up…" if not job.total else f"{job.ended:,} of {total:,} requests ended ({job.sent:,} sent)"
    st.progress(min(1.0, job.ended / total), text="Stopping: cancelling the live requests…" if job.stopping else text)
    st.button("Stop the run", key="run_stop", icon=":material/stop_circle:", on_click=job.stop,
              disabled=job.stopping, help="End the run now and open what it measured: requests still live are "
                                          "cancelled (stopped_by_user), the ones not yet sent are not offered.")


job: BackgroundRun | None = st.session_state.get(RUN_KEY)
if job is not None and job.done:  # the run ended (or was stopped): open its records on the Summary page
    del st.session_state[RUN_KEY]
    if job.error is not None:
        job.discard()
        fail(job.error)
    meta, folder, records = job.result()
    name = f"timing run {job.scenario.name} ({job.options['model']}, {meta['runtime']['device_name']}).jsonl"
    set_source(RecordSource.of(name, records, "timing run", metadata=meta, steps=folder.steps))
    st.session_state[STEP_TRACE_KEY] = (name, folder.steps)
    st.switch_page("pages/summary.py")

share = sharing()
if job is not None:
    _watch(job)
elif not share.may_start_work:  # shared on a network: no button, so nobody else starts work on this machine
    st.warning(share.opt_in_message("a timing run"), icon=":material/lock:")
elif st.button("Start the timing run", type="primary", key="run_start"):
    to_run = guarded(with_request_count, scenario, requests)
    source = up.name if up is not None else f"sample_data/scenarios/{sample}"
    st.session_state[RUN_KEY] = BackgroundRun(to_run, scenario_source=source, model=model, device=device,
                                              threads=threads, max_wall_s=max_wall_s).start()
    st.rerun()

st.caption(f"Files a CLI run writes: {RECORDS}, {STEPS}, {METADATA} "
           "(`servebench run SCENARIO -o DIR`; `servebench validate DIR` compares it with a simulation).")
