"""Regenerate docs/screenshots/: every dashboard page in headless Chromium, as a reader would first see it.

    python scripts/screenshots.py

Starts `streamlit run app.py` on loopback (tests/browser.py), opens each page at 1,400 px wide, waits until
Streamlit is idle and every chart is drawn, and saves a full-page PNG. Compare is shown with three runs (the
sample, R1-R4 and a GuideLLM export uploaded together); the Load sweep after one run of its default sweep.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from browser import browser_page, streamlit_server  # noqa: E402

OUT = REPO / "docs" / "screenshots"
TIMEOUT_MS = 180_000
# the script has ended and every chart container (there before plotly's code has loaded) holds a drawn chart
IDLE = """() => document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'
  && [...document.querySelectorAll('.stPrintGraphic, [data-testid="stPlotlyChart"]')]
       .every(c => c.querySelector('.main-svg'))"""
PAGES = (  # sidebar link -> file name
    ("Summary", "summary"), ("Percentile explorer", "percentiles"), ("Diagnosis", "diagnosis"),
    ("KV calculator", "kv"), ("Load sweep", "sweep"), ("Timing run", "timing_run"),
    ("Capacity planner", "planner"),
)


def settle(page) -> None:
    """Wait until the current run is over and every chart is drawn."""
    page.wait_for_timeout(300)
    page.wait_for_function(IDLE, timeout=TIMEOUT_MS, polling=100)
    page.wait_for_timeout(300)


def shoot(page, name: str) -> None:
    """Bring every chart into view once (Streamlit draws them when seen), then save the page."""
    charts = page.locator('[data-testid="stPlotlyChart"]')
    for i in range(charts.count()):
        charts.nth(i).scroll_into_view_if_needed()
        page.wait_for_timeout(150)
    page.locator('[data-testid="stMain"]').evaluate("e => e.scrollTo(0, 0)")
    page.wait_for_timeout(300)
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
    print(f"docs/screenshots/{name}.png")


def main() -> None:
    with streamlit_server() as url, browser_page(viewport=(1400, 2600)) as page:  # tall: the main area scrolls inside
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        settle(page)
        for link, name in PAGES:
            page.get_by_role("link", name=link).click()
            page.get_by_role("heading", name=link).first.wait_for()
            settle(page)
            if name == "sweep":
                page.get_by_role("button", name="Run the sweep").click()
                page.locator('[data-testid="stPlotlyChart"] .main-svg').first.wait_for()
                settle(page)
            shoot(page, name)
        page.get_by_role("link", name="Summary").click()
        settle(page)
        page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(
            [str(REPO / "sample_data" / "r1_r4.json"),
             str(REPO / "tests" / "data" / "importers" / "guidellm-0.8.1-errors.json")])
        page.get_by_text("guidellm-0.8.1-errors.json (upload").first.wait_for()
        settle(page)
        shoot(page, "summary_guidellm_upload")
        page.get_by_role("link", name="Compare runs").click()
        page.get_by_role("heading", name="Compare runs").first.wait_for()
        settle(page)
        shoot(page, "compare")


if __name__ == "__main__":
    main()
