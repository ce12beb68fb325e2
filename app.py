"""servebench dashboard: `streamlit run app.py` opens the Summary page on the sample records."""

from __future__ import annotations

import streamlit as st

st.set_page_config(page_title="servebench", page_icon="⏱️", layout="wide")

PAGES = {
    "Records": [
        st.Page("pages/summary.py", title="Summary", icon="📋", default=True),
        st.Page("pages/percentiles.py", title="Percentile explorer", icon="📈"),
    ],
}

st.navigation(PAGES).run()
