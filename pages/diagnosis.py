"""Diagnosis: what limits a load profile (KV memory, queueing, prefill, decode or nothing), with its evidence."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from pages._figures import profile_sweep_chart
from pages._shared import (
    SAMPLE_DIR,
    engineer_view,
    guarded,
    metric,
    records_sidebar,
    show_reader_warnings,
    show_server_over_time,
    static_table,
    unit_choice,
)
from servebench.analysis import diagnosis, walkthrough
from servebench.capacity import kv
from servebench.capacity.model_presets import PRESETS, get_preset
from servebench.dashboard.answers import sweep_answer
from servebench.dashboard.verdict_tables import (
    bindings_frame,
    bindings_heading,
    evidence_frame,
    limit_words,
    profiles_frame,
    read_profile_table,
    rules_frame,
)
from servebench.dashboard.walkthrough_sweeps import PROFILE_SWEEP_NOTE, profile_sweeps
from servebench.formatting import fmt, fmt_share
from servebench.output.safetext import safe_text

LIMIT_TITLES = {"kv_memory": "KV memory", "queueing": "Queueing", "prefill": "Prefill", "decode": "Decode",
                "none": "Nothing limits it", "undetermined": "Cannot tell which limit"}


CAPACITY_PREFIX = {"at_limit": "≤ ", "below_limit": "≈ ", "cannot_tell": ""}


def _in_words(value: object) -> str:
    """Return a walk-through answer as the page says it: a limit by its title ("KV memory", not kv_memory)."""
    return LIMIT_TITLES.get(value, value) if isinstance(value, str) else fmt(value)


def render_headline(v: diagnosis.Verdict) -> None:
    """Show the one answer first: the load measured, the capacity it implies and the limit that binds."""
    h = v.headline
    if h is None:
        return
    box = {"below_limit": st.success, "at_limit": st.warning, "cannot_tell": st.info}[h.standing]
    box(safe_text(f"**{v.profile}**: {h.text}"), icon=":material/speed:")
    c = st.columns(3)
    metric(c[0], "measured_rate_per_s", "Measured load (requests/s)", fmt(h.measured_rate_per_s),
           "Arrival rate offered: (requests - 1) / (last start - first start).")
    capacity = fmt(h.capacity_rate_per_s)
    metric(c[1], "capacity_rate_per_s", "Capacity (requests/s)", capacity if h.capacity_rate_per_s is None
           else CAPACITY_PREFIX[h.standing] + capacity, h.capacity_basis)
    metric(c[2], "binding_limit", "Limit that binds", LIMIT_TITLES.get(h.limit, h.limit) if h.limit else fmt(None),
           "At this load when the verdict names a limit; else the first to bind as load grows.")
    lines = h.evidence if engineer_view() else h.evidence_words or h.evidence  # the rules' keys for engineers only
    if lines:
        st.markdown("**Evidence**\n\n" + "\n".join(f"- {safe_text(e)}" for e in lines))


def render_verdict(v: diagnosis.Verdict, unit: str) -> None:
    """Show one verdict: the headline, the numbers behind it, its evidence and the experiment that would check it.

    ``unit``: the page's time unit, the one ``v`` was diagnosed with (its sentences) and its tables read in."""
    render_headline(v)
    box = st.success if v.limit == "none" else st.warning
    key = f" (`{v.limit}`)" if engineer_view() else ""
    box(safe_text(f"**Profile {v.profile}: {LIMIT_TITLES.get(v.limit, v.limit)}**{key}. {v.summary}"))
    c = st.columns(4)
    metric(c[0], "max_concurrent_sequences", "Max concurrent sequences", fmt(v.max_concurrent_sequences),
           f"{fmt(v.budget_tokens)} tokens in the budget / {fmt(v.tokens_per_request)} per request.")
    metric(c[1], "in_service", "Average in service", fmt(v.in_service),
           "Little's law: rate × (prefill p50 + (N - 1) × TPOT p50).")
    metric(c[2], "utilization", "Utilization of the limit", fmt_share(v.utilization))
    metric(c[3], "saturation_rate_per_s", "KV saturation rate (requests/s)", fmt(v.saturation_rate_per_s),
           "Little's law: the KV limit / time in service, an estimate; the headline's capacity also weighs what the "
           "run completed.")
    c = st.columns(4)
    metric(c[0], "queue_share_of_ttft", "Queue wait share of TTFT p95", fmt_share(v.queue_share_of_ttft))
    metric(c[1], "prefill_share_of_ttft", "Prefill share of TTFT p95", fmt_share(v.prefill_share_of_ttft))
    metric(c[2], "tpot_growth", "TPOT growth under load", fmt(v.tpot_growth),
           "TPOT p50 with many sequences / with few.")
    metric(c[3], "bytes_per_token", "KV bytes per token", fmt(v.bytes_per_token))
    engineer = engineer_view()  # the rules' names for measurements and limits, as the CLI and the JSON give them
    static_table(evidence_frame(v, unit, engineer))
    st.markdown(f"**Why this verdict.** {v.explanation if engineer else v.explanation_words or v.explanation}")
    for gap in v.cannot_tell:
        st.info(f"Cannot tell: {gap}")
    st.caption("Every rule, in precedence order (" + " > ".join(map(limit_words, diagnosis.PRECEDENCE)) +
               "): with a symptom, the first rule whose every condition holds wins.")
    static_table(rules_frame(v, unit, engineer))
    if v.bindings:
        st.markdown(bindings_heading(v))
        static_table(bindings_frame(v, engineer))
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


def _profile_table(upload) -> tuple[str, diagnosis.ProfileTable]:
    """Return the uploaded profile table, or the spec's two profiles (sample_data/profiles_ab.json)."""
    name, data = ((upload.name, upload.getvalue()) if upload is not None
                  else ("profiles_ab.json", (SAMPLE_DIR / "profiles_ab.json").read_bytes()))
    return name, guarded(read_profile_table, name, data)


st.title("Diagnosis")
unit, _ = unit_choice()  # TTFT, TPOT and queue wait in ms by default, as on every page; the verdicts hold seconds
mode = st.radio("Mode", ["Guided A/B walk-through", "Diagnose the records in use", "Diagnose a profile table"],
                horizontal=True, key="diag_mode")

if mode == "Diagnose the records in use":
    ds = records_sidebar()
    show_reader_warnings(ds)
    st.caption(f"{safe_text(ds.source.name)} · {len(ds.table):,} records · {ds.window_text()}. "
               "`admitted` splits TTFT into queue wait and prefill (without it the verdict says what it cannot "
               "tell); `prompt_tokens` gives the KV limit.")
    shape, budget, policy, cap = _shape_inputs()
    verdict = guarded(diagnosis.diagnose_records, ds.table, ds.window_start, ds.window_end, shape=shape,
                      budget_bytes=budget, policy=policy, output_cap=cap, name=ds.source.name,
                      shared_clock=ds.shared_clock, server_metrics=ds.server, unit=unit)
    render_verdict(verdict, unit)
    if ds.server is not None:
        st.subheader("The server over time")
        show_server_over_time(ds, unit)
    else:
        st.caption("No server metrics with these records: upload the run's server_metrics.parquet (or AIPerf's "
                   "server_metrics_export.parquet) with them to see the server's running, waiting, KV use and "
                   "preemptions here, and to let the server's own evidence decide without `admitted` times.")

elif mode == "Diagnose a profile table":
    st.caption("A measurement table like the spec's: per profile prompt tokens, queue wait and prefill p50/p95, "
               "TTFT p95, TPOT p50, peak active and its share of the run, arrival rate, output tokens.")
    up = st.file_uploader("Upload a profile table (JSON)", type=["json"], key="profile_upload")
    name, table = _profile_table(up)
    st.caption(f"Showing **{name}**" + (f": {table.description}" if table.description else ""))
    for v in guarded(diagnosis.diagnose_table, table, unit):
        render_verdict(v, unit)
        st.divider()

else:
    name, table = _profile_table(None)
    steps = guarded(walkthrough.walkthrough, table, unit)
    answers: dict[int, dict] = st.session_state.setdefault("wt_answers", {})
    st.caption("The spec's exercise, *Diagnose two load profiles*, in five steps. For each step write down your "
               "prediction first, then reveal the computed answer and see how close you were.")
    done = sum(1 for s in steps if s.number in answers)
    st.progress(done / len(steps), text=f"{done} of {len(steps)} steps revealed")
    if st.button("Start over", key="wt_reset", disabled=not answers):
        answers.clear()
        st.rerun()
    for step in steps:
        st.subheader(f"Step {step.number}: {step.title}")
        if step.number == 2:
            st.markdown(f"**The measurements** ({name})")
            static_table(profiles_frame(table, unit, engineer=engineer_view()))
        st.markdown(step.question)
        revealed = answers.get(step.number)
        if revealed is None:
            with st.form(f"wt_form_{step.number}"):
                given: dict[str, float | str | None] = {}
                cols = st.columns(2)
                for i, a in enumerate(step.numbers):
                    given[a.name] = cols[i % 2].number_input(
                        a.prompt_label, value=None, format="%.4g", key=f"wt_{a.name}",
                        placeholder="your prediction")
                for i, c in enumerate(step.choices):
                    given[c.name] = cols[i % 2].selectbox(c.label, c.options, index=None, key=f"wt_{c.name}",
                                                          placeholder="pick one", format_func=_in_words)
                notes = st.text_area("Your reasoning (not scored)", key=f"wt_notes_{step.number}", height=80)
                if st.form_submit_button("Reveal the answer", type="primary", key=f"wt_reveal_{step.number}"):
                    answers[step.number] = {"given": dict(given), "notes": notes}
                    st.rerun()
            st.caption("Reveal this step to go on.")
            break
        if revealed["notes"]:
            st.markdown(f"**Your reasoning:** {revealed['notes']}")
        score = walkthrough.score_prediction(step, revealed["given"])
        if score.total:
            st.markdown(f"**{score.correct} of {score.total} right**")
            static_table(pd.DataFrame([{"answer": s.label, "your prediction": _in_words(s.predicted),
                                        "computed": _in_words(s.expected), "off by": fmt(s.error),
                                        "how close": s.closeness, "tolerance": s.tolerance,
                                        "within tolerance": "no prediction" if s.predicted is None
                                        else "yes" if s.within else "no"} for s in score.scores]))
        st.info(step.explanation)
    else:
        st.success("All five steps revealed. The same diagnosis, with its evidence:")
        verdicts = guarded(diagnosis.diagnose_table, table, unit)
        for v in verdicts:
            render_verdict(v, unit)
        st.subheader("The knee: each profile swept over load")  # the walk-through ends on its picture
        st.caption(PROFILE_SWEEP_NOTE)
        for plan in guarded(profile_sweeps, verdicts, SAMPLE_DIR / "scenarios"):
            result, chart = guarded(profile_sweep_chart, plan.profile, plan.loads, plan)
            st.markdown(safe_text(f"**Profile {plan.profile}** ({plan.scenario.name}): {sweep_answer(result)}"))
            st.vega_lite_chart(spec=chart, key=f"wt_sweep_{plan.profile}")
