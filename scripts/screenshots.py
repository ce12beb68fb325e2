"""Regenerate docs/screenshots/: every dashboard page in headless Chromium, whole, as a reader would first see it.

    python scripts/screenshots.py

Starts `streamlit run app.py` on loopback (tests/browser.py), opens each page at 1,400 px wide, waits until
Streamlit is idle and every chart is drawn, then makes the window as tall as the page (Streamlit scrolls its
main area inside the window, so a full-page shot alone would stop at the window's height) and saves it.
The Load sweep is shown after one run of its default sweep, the Capacity planner after one plan with its
defaults; Diagnosis again with its walk-through revealed to the end (the profiles' sweeps); Compare with the
runs uploaded (R1-R4 and a GuideLLM export, uploaded together); Token timing on a vLLM export, whose records
carry token times.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from browser import browser_page, streamlit_server  # noqa: E402

OUT = REPO / "docs" / "screenshots"
WIDTH_PX, WINDOW_PX = 1400, 1000
MAX_HEIGHT_PX = 16_000  # Chromium's limit for one screenshot is 16,384 px
TIMEOUT_MS = 180_000
IMPORTERS = REPO / "tests" / "data" / "importers"
# the script has ended, every chart container (.stPrintGraphic, there with a skeleton before its chart
# library has loaded) holds a drawn plotly (.main-svg) or Vega-Lite (canvas) chart, and no element is still a
# skeleton (metrics and tables are drawn after the run, from code the browser loads then)
IDLE = """() => document.querySelector('[data-testid="stApp"]')?.dataset.testScriptState === 'notRunning'
  && [...document.querySelectorAll('.stPrintGraphic')].every(c => c.querySelector('.main-svg, canvas, svg.marks'))
  && !document.querySelector('[data-testid="stSkeleton"]')"""
PAGE_HEIGHT = """() => { const main = document.querySelector('[data-testid="stMain"]');
  const side = document.querySelector('[data-testid="stSidebarContent"]');
  return Math.max(main ? main.scrollHeight : 0, side ? side.scrollHeight : 0); }"""
SUMMARY_PANELS = ("Non-success causes as a chart", "Requests over the window",
                  "Throughput, TTFT and latency over time", "CDFs of latency, TTFT and TPOT", "Downloads: the records")
COMPARE_PANELS = ("Distributions: overlaid CDFs",)  # opened too: the shot shows its charts
RUN_BUTTONS = {"sweep": "Run the sweep", "planner": "Plan"}  # pages shown after one run with their defaults
PAGES = (  # sidebar link -> file name, in the order the sidebar lists them (Compare and Token timing below)
    ("Summary", "summary"), ("Percentile explorer", "percentiles"), ("Diagnosis", "diagnosis"),
    ("KV calculator", "kv"), ("Load sweep", "sweep"), ("Timing run", "timing_run"),
    ("Capacity planner", "planner"), ("Cache experiments", "cache"), ("Retries and fairness", "retries"),
    ("Traces", "traces"),
)


def settle(page) -> None:
    """Wait until the current run is over and every chart is drawn."""
    page.wait_for_timeout(300)
    page.wait_for_function(IDLE, timeout=TIMEOUT_MS, polling=100)
    page.wait_for_timeout(300)


def shoot(page, name: str) -> None:
    """Make the window as tall as the page (until its height stops changing), then save the whole page."""
    height = WINDOW_PX
    for _ in range(4):  # charts drawn in a taller window can change the page's height once or twice
        wanted = min(MAX_HEIGHT_PX, max(WINDOW_PX, int(page.evaluate(PAGE_HEIGHT)) + 40))
        if wanted == height:
            break
        height = wanted
        page.set_viewport_size({"width": WIDTH_PX, "height": height})
        settle(page)
        page.wait_for_timeout(500)
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / f"{name}.png"))
    page.set_viewport_size({"width": WIDTH_PX, "height": WINDOW_PX})
    print(f"docs/screenshots/{name}.png ({WIDTH_PX} x {height} px)")


def open_page(page, link: str) -> None:
    page.get_by_role("link", name=link, exact=True).click()
    page.get_by_role("heading", name=link).first.wait_for()
    settle(page)
    # a page's charts are drawn in panels, once opened (they stay open in the session)
    for panel in {"Summary": SUMMARY_PANELS, "Compare runs": COMPARE_PANELS}.get(link, ()):
        box = page.locator('[data-testid="stExpander"] summary', has_text=panel).first
        for _ in range(3):  # a click while the last panel's fragment reran was lost (once in two runs)
            if not box.count() or box.evaluate("s => s.parentElement.open"):
                break
            box.click()
            settle(page)


def main() -> None:
    with streamlit_server() as url, browser_page(viewport=(WIDTH_PX, WINDOW_PX)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        settle(page)
        for link, name in PAGES:
            open_page(page, link)
            if name in RUN_BUTTONS:
                page.get_by_role("button", name=RUN_BUTTONS[name], exact=True).click()
                page.locator('[data-testid="stVegaLiteChart"] canvas').first.wait_for()
                settle(page)
            shoot(page, name)
        open_page(page, "Diagnosis")  # the guided walk-through revealed to its end: both profiles' sweeps
        for _ in range(5):
            page.get_by_role("button", name="Reveal the answer", exact=True).first.click()
            settle(page)
        page.get_by_role("heading", name="The knee: each profile swept over load").wait_for()
        settle(page)
        shoot(page, "diagnosis_walkthrough")
        open_page(page, "Summary")
        upload = page.locator('[data-testid="stFileUploader"] input[type="file"]').first
        upload.set_input_files([str(REPO / "sample_data" / "r1_r4.json"),
                                str(IMPORTERS / "guidellm-0.8.1-errors.json")])
        page.get_by_text("guidellm-0.8.1-errors.json (upload").first.wait_for()
        settle(page)
        shoot(page, "summary_guidellm_upload")
        open_page(page, "Compare runs")
        shoot(page, "compare")
        open_page(page, "Summary")
        upload.set_input_files(str(IMPORTERS / "vllm-serve-detailed.json"))
        page.get_by_text("vllm-serve-detailed.json (upload").first.wait_for()
        settle(page)
        open_page(page, "Token timing")
        shoot(page, "token_timing")


if __name__ == "__main__":
    main()
