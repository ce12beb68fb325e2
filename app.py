"""servebench dashboard: `streamlit run app.py` opens the Summary page on the sample records."""

from __future__ import annotations

from pages._frame import run_app

run_app()
