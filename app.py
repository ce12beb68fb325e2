"""servebench dashboard: `streamlit run app.py` opens the Summary page on the sample records."""

from __future__ import annotations

import streamlit as st

from pages._shared import engineer_toggle, glossary, preload_chart_code, sharing

st.set_page_config(page_title="servebench", page_icon="⏱️", layout="wide")
banner = sharing().banner()  # on every page while the dashboard listens beyond this machine
if banner:
    st.warning(banner, icon=":material/public:")

PAGES = {
    "Measure": [
        st.Page("pages/summary.py", title="Summary", icon=":material/summarize:", default=True),
        st.Page("pages/percentiles.py", title="Percentile explorer", icon=":material/percent:"),
        st.Page("pages/token_timing.py", title="Token timing", icon=":material/timeline:"),
        st.Page("pages/compare.py", title="Compare runs", icon=":material/compare_arrows:"),
        st.Page("pages/diagnosis.py", title="Diagnosis", icon=":material/troubleshoot:"),
    ],
    "Capacity": [
        st.Page("pages/kv.py", title="KV calculator", icon=":material/memory:"),
        st.Page("pages/sweep.py", title="Load sweep", icon=":material/ssid_chart:"),
        st.Page("pages/timing_run.py", title="Timing run", icon=":material/timer:"),
        st.Page("pages/planner.py", title="Capacity planner", icon=":material/calculate:"),
        st.Page("pages/cache.py", title="Cache experiments", icon=":material/cached:"),
        st.Page("pages/retries.py", title="Retries and fairness", icon=":material/replay:"),
        st.Page("pages/traces.py", title="Traces", icon=":material/stacked_line_chart:"),
    ],
}

glossary()
engineer_toggle()  # field keys and the spec's terms, for engineers, on every page
preload_chart_code()  # the chart library's code, fetched once the first view is drawn (hidden)
st.navigation(PAGES).run()
