"""Retries and fairness: one overload under three client/server policies, and two tenants under fcfs and fair."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from pages._shared import guarded, static_table
from servebench.analysis.summary import SLO, Report
from servebench.dashboard.cells import by_row
from servebench.dashboard.fairness import shift_headline, shift_table, tenant_shifts
from servebench.dashboard.wording import DEFAULT_TIME_UNIT, ms_to_s
from servebench.formatting import fmt
from servebench.serving.retry_experiment import (
    BACKOFF_SHED,
    IMMEDIATE,
    NO_RETRY,
    retry_policies,
    run_variants,
    scheduling_variants,
)
from servebench.serving.scenario import load_scenario

SCENARIOS = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios"
STORM, TENANTS = SCENARIOS / "retry_storm.yaml", SCENARIOS / "two_tenants.yaml"
CHOICES = ("goodput rises: more attempts, more chances", "about the same", "goodput falls")
ANSWER = CHOICES[2]

st.title("Retries and fairness")
st.caption("The same arrivals under each policy (one seed): only the clients' retry rule, the server's shedding or "
           "its scheduling rule changes. Source: sample_data/scenarios/retry_storm.yaml and two_tenants.yaml; the "
           "rules are in docs/retries.md.")


@st.cache_data(show_spinner="Simulating the policies…", max_entries=16)
def _storm_rows(duration_s: float) -> list[dict]:
    sc = load_scenario(STORM)
    sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"duration_s": duration_s})})
    return [run.row() for run in run_variants(retry_policies(sc))]


@st.cache_resource(show_spinner="Simulating fcfs and fair…", max_entries=4)
def _tenant_reports(ttft_objective_s: float | None) -> dict[str, Report]:
    slo = SLO(ttft_s=ttft_objective_s) if ttft_objective_s else None
    return {run.label: run.report for run in run_variants(scheduling_variants(load_scenario(TENANTS)), slo)}


st.subheader("Interview practice: predict, then reveal")
st.markdown("**Interview question.** A replica serves about 1.5 requests/s; 2 requests/s arrive for a minute and "
            "a queue builds until requests time out after 15 s. Each client now retries a failed request at once, "
            "up to 4 attempts. Compared with no retries, what happens to **goodput**?")
guess = st.radio("Your prediction", CHOICES, index=None, key="retries_quiz_guess")
if st.button("Reveal the simulation's answer", key="retries_quiz_reveal"):
    st.session_state["retries_quiz_revealed"] = True
if st.session_state.get("retries_quiz_revealed"):
    rows = {r["policy"]: r for r in guarded(_storm_rows, 120.0)}
    none, now, shed = rows[NO_RETRY], rows[IMMEDIATE], rows[BACKOFF_SHED]
    verdict = "Right." if guess == ANSWER else ("Not quite." if guess is not None else "")
    st.success(f"{verdict} Goodput falls: {fmt(none['goodput, req/s'])} req/s without retries, "
               f"{fmt(now['goodput, req/s'])} req/s with immediate retries ({fmt(now['amplification'], 3)} attempts "
               f"per user request), {fmt(shed['goodput, req/s'])} req/s with backoff and shedding.")
    st.info("Every timed-out attempt held a seat and produced tokens nobody used; sending it straight back adds "
            "load to a server that is already past capacity, so the queue and the waste grow faster. Shedding "
            "(reject what waited too long, before it costs compute) and bounded, jittered backoff keep the "
            "server near capacity, so more user requests succeed even though more attempts are refused.")

st.subheader("The retry storm under three policies")
duration = st.slider("Seconds of arrivals", 20, 120, 60, 10, key="retries_duration",
                     help="retry_storm.yaml sends 2 requests/s for 120 s; shorter is quicker to simulate.")
static_table(by_row(guarded(_storm_rows, float(duration)), "policy"))
st.caption("Amplification = attempts / user requests. Rejections under shedding are cheap (no compute); "
           "timeouts are not (a seat held, tokens wasted).")

st.subheader("Two tenants: fcfs vs fair")
# in ms, as every page's TTFT; the simulator and the report take seconds
objective_ms = st.number_input("TTFT objective (ms)", min_value=0.0, value=5000.0, step=1000.0,
                               key="tenants_ttft_objective_ms",
                               help="Goodput counts the requests whose first token came within it. 0: no objective, "
                                    "every completed request counts (then both rules serve everyone, and the goodput "
                                    "shares are equal).")
objective_s = ms_to_s(objective_ms) or None
reports = guarded(_tenant_reports, objective_s)
labels = ("fcfs", "fair")
shifts = tenant_shifts(reports["fcfs"], reports["fair"])
jain = tuple(reports[k].fairness.jain_index if reports[k].fairness else None for k in labels)
st.markdown(shift_headline(shifts, labels, jain, objective_s, DEFAULT_TIME_UNIT))  # type: ignore[arg-type]
c = st.columns(2)
JAIN_HELP = "How evenly the tenants shared goodput, by weight: 1 = each in proportion to its weight; 1/2 = one got all."
c[0].metric("Jain's index over goodput, fcfs", fmt(jain[0], 3), help=JAIN_HELP)
c[1].metric("Jain's index over goodput, fair", fmt(jain[1], 3), help=JAIN_HELP)
static_table(shift_table(shifts, labels, DEFAULT_TIME_UNIT))
st.caption("Under fcfs the light chat tenant waits behind the batch backlog; under fair scheduling admission goes "
           "to the tenant with the least weighted admitted tokens, so chat's TTFT drops while batch waits a little "
           "longer. Source: sample_data/scenarios/two_tenants.yaml, one seed.")
