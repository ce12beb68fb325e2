"""pages._frame: the frame every page draws (navigation, glossary, engineer toggle), with Summary or a stand-in.

benchmarks/dashboard.py times the frame around a bare Summary as the floor of the first load; these check that the
stand-in really gets the same frame and that app.py's pages resolve from any script's folder.
"""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent

STAND_IN = """import sys
sys.path.insert(0, {repo!r})
import streamlit as st
from pages._frame import run_app
from pages._shared import records_sidebar


def summary() -> None:
    st.title("Stand-in")
    {sidebar}
    st.write("A bare Summary.")


run_app(summary)
"""


def _run(tmp_path: Path, sidebar: bool) -> AppTest:
    script = tmp_path / "frame.py"  # outside the repository: the pages must not resolve from the script's folder
    script.write_text(STAND_IN.format(repo=str(REPO), sidebar="records_sidebar()" if sidebar else "pass"))
    at = AppTest.from_file(str(script), default_timeout=90)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_the_stand_in_replaces_summary_inside_the_same_frame(tmp_path: Path) -> None:
    at = _run(tmp_path, sidebar=False)
    assert [t.value for t in at.title] == ["Stand-in"]
    assert [m.value for m in at.main.markdown] == ["A bare Summary."]
    assert [t.label for t in at.toggle] == ["Engineer view"]  # the frame's sidebar, as on every page
    assert [e.label for e in at.sidebar.expander] == ["Glossary"]
    assert not at.file_uploader  # the records sidebar is Summary's, not the frame's


def test_the_stand_in_with_the_records_sidebar_reads_the_sample(tmp_path: Path) -> None:
    at = _run(tmp_path, sidebar=True)
    assert [u.label for u in at.file_uploader] == ["Upload records"]
    assert any("requests_sample.csv" in c.value for c in at.sidebar.caption)


def test_the_frames_pages_resolve_from_another_scripts_folder(tmp_path: Path) -> None:
    at = _run(tmp_path, sidebar=False)
    at.switch_page(str(REPO / "pages" / "kv.py")).run()  # a page by its file, as the navigation's link opens it
    assert not at.exception, [e.message for e in at.exception]
    assert "KV calculator" in [t.value for t in at.title]
