"""pages._frame: the frame every page draws (navigation, glossary, engineer toggle), with Summary or a stand-in.

benchmarks/dashboard.py times the frame around a bare Summary as the floor of the first load; these check that the
stand-in (the benchmark's own script, benchmarks/dashboard.py's frame_script) really gets the same frame and that
app.py's pages resolve from any script's folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parent.parent


def _benchmark() -> ModuleType:
    """Return benchmarks/dashboard.py, whose floor scripts these tests run as the benchmark writes them."""
    spec = importlib.util.spec_from_file_location("benchmark_dashboard", REPO / "benchmarks" / "dashboard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCHMARK = _benchmark()


def _run(tmp_path: Path, sidebar: bool) -> AppTest:
    script = tmp_path / "frame.py"  # outside the repository: the pages must not resolve from the script's folder
    script.write_text(BENCHMARK.frame_script(sidebar))
    at = AppTest.from_file(str(script), default_timeout=90)
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_the_stand_in_replaces_summary_inside_the_same_frame(tmp_path: Path) -> None:
    at = _run(tmp_path, sidebar=False)
    assert [t.value for t in at.title] == ["Summary"]
    assert [m.value for m in at.main.markdown] == [BENCHMARK.FLOOR]
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
