"""The dashboard's frame on every page: page config, sharing banner, the pages' navigation and the sidebar's
glossary and engineer toggle. app.py runs it; benchmarks/dashboard.py runs it around a bare Summary to measure
what the frame alone costs a first load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import streamlit as st

from pages._shared import engineer_toggle, glossary, preload_chart_code, sharing

ROOT = Path(__file__).resolve().parent.parent  # the folder of app.py: pages resolve from it wherever the script is


def app_pages(summary: Callable[[], None] | None = None) -> dict[str, list[st.Page]]:
    """Return the navigation's sections and pages; ``summary`` replaces the Summary page (a benchmark's floor)."""
    def page(path: str, title: str, icon: str, **kwargs: bool) -> st.Page:
        return st.Page(ROOT / path, title=title, icon=icon, **kwargs)

    return {
        "Measure": [
            st.Page(summary or ROOT / "pages/summary.py", title="Summary", icon=":material/summarize:", default=True),
            page("pages/percentiles.py", "Percentile explorer", ":material/percent:"),
            page("pages/token_timing.py", "Token timing", ":material/timeline:"),
            page("pages/compare.py", "Compare runs", ":material/compare_arrows:"),
            page("pages/diagnosis.py", "Diagnosis", ":material/troubleshoot:"),
        ],
        "Capacity": [
            page("pages/kv.py", "KV calculator", ":material/memory:"),
            page("pages/sweep.py", "Load sweep", ":material/ssid_chart:"),
            page("pages/timing_run.py", "Timing run", ":material/timer:"),
            page("pages/planner.py", "Capacity planner", ":material/calculate:"),
            page("pages/cache.py", "Cache experiments", ":material/cached:"),
            page("pages/retries.py", "Retries and fairness", ":material/replay:"),
            page("pages/traces.py", "Traces", ":material/stacked_line_chart:"),
        ],
    }


def run_app(summary: Callable[[], None] | None = None) -> None:
    """Draw the frame and run the page the URL asks for (``summary`` in place of the Summary page, if given)."""
    st.set_page_config(page_title="servebench", page_icon="⏱️", layout="wide")
    banner = sharing().banner()  # on every page while the dashboard listens beyond this machine
    if banner:
        st.warning(banner, icon=":material/public:")
    glossary()
    engineer_toggle()  # field keys and the spec's terms, for engineers, on every page
    preload_chart_code()  # the chart library's code, fetched once the first view is drawn (hidden)
    st.navigation(app_pages(summary)).run()
