"""The dashboard in a real browser: `streamlit run` on loopback, headless Chromium, a real file upload.

Skipped, with the reason, where Chromium or Playwright is missing. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from browser import REPO, browser_page, require_chromium, screenshot, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIMEOUT_MS = 60_000
VEGA_DRAWN = '[data-testid="stVegaLiteChart"] canvas, [data-testid="stVegaLiteChart"] svg.marks'
# Streamlit fetches plotly.js (4.7 MB) with its PlotlyChart element's code, the first time a page draws one
PLOTLY_FETCHED = "performance.getEntriesByType('resource').some(e => e.name.includes('PlotlyChart'))"


def _wait_idle(page) -> None:
    """Wait until Streamlit has finished the current run (no 'running' status widget)."""
    page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached", timeout=TIMEOUT_MS)


def _metric(page, label: str) -> str:
    # the whole label, not a substring: "Requests" must not find "Peak active requests"
    exact = re.compile(rf"^\s*{re.escape(label)}\s*$")
    box = page.locator('[data-testid="stMetric"]').filter(
        has=page.locator('[data-testid="stMetricLabel"]', has_text=exact)).first
    return box.locator('[data-testid="stMetricValue"]').inner_text(timeout=TIMEOUT_MS).strip()


def test_summary_upload_renders_contract_and_charts() -> None:
    require_chromium()
    with streamlit_server() as url, browser_page(viewport=(1400, 2200)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        _wait_idle(page)
        assert _metric(page, "Requests") == "3,000"  # opens on the sample with nothing to do
        # the first view is the overview (outcomes, p95s over time, CDFs: SVG pictures) beside the numbers, then
        # tables; the charts are drawn in the panels opened, never with plotly.js
        page.locator('.st-key-overview svg[role="img"]').nth(2).wait_for()
        assert page.locator('.stPrintGraphic').count() == 0  # every chart container, drawn or still loading
        assert page.locator('[data-testid="stPlotlyChart"]').count() == 0
        page.get_by_text("CDFs of latency, TTFT and TPOT").first.click()
        page.locator(VEGA_DRAWN).nth(2).wait_for()  # the three CDFs
        page.locator('[data-testid="stVegaLiteChart"] canvas').nth(2).wait_for()  # on canvases: cheaper than SVG
        _wait_idle(page)
        assert page.locator('[data-testid="stPlotlyChart"]').count() == 0
        assert not page.evaluate(PLOTLY_FETCHED)
        screenshot(page, "summary_sample")

        upload = page.locator('[data-testid="stFileUploader"] input[type="file"]').first
        upload.set_input_files(str(REPO / "sample_data" / "r1_r4.json"))
        page.get_by_text("r1_r4.json (upload").first.wait_for()
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid="stMetricValue"]')]
                     .some(e => e.innerText.trim() === '0.2857')""", timeout=TIMEOUT_MS)
        _wait_idle(page)
        assert _metric(page, "Requests") == "4"
        assert _metric(page, "Successes") == "2"
        assert _metric(page, "Successful requests/s") == "0.2857"  # 2 successes over the default window 0-7 s
        assert _metric(page, "Non-success fraction") == "50%"
        chart = page.locator(VEGA_DRAWN).first  # the latency CDF: its panel stays open
        chart.wait_for()
        assert chart.bounding_box()["height"] > 100
        assert _metric(page, "Latency p95 (ms)") == "2,500"  # milliseconds by default
        page.get_by_role("radio", name="s", exact=True).first.click()  # the unit toggle: the fields in seconds
        page.wait_for_function(
            """() => [...document.querySelectorAll('[data-testid="stMetricValue"]')]
                     .some(e => e.innerText.trim() === '2.5')""", timeout=TIMEOUT_MS)
        _wait_idle(page)
        assert _metric(page, "Latency p95 (s)") == "2.5"
        assert page.locator('[data-testid="stException"]').count() == 0
        screenshot(page, "summary_upload_r1_r4")

        page.get_by_role("link", name="Percentile explorer").click()
        page.get_by_role("heading", name="Percentile explorer").first.wait_for()
        page.locator(VEGA_DRAWN).first.wait_for()
        _wait_idle(page)
        assert _metric(page, "Records counted") == "2 of 4"  # the upload carries across pages
        screenshot(page, "percentiles_r1_r4")

        page.get_by_role("link", name="KV calculator").click()
        page.get_by_role("heading", name="KV calculator").first.wait_for()
        page.locator(VEGA_DRAWN).first.wait_for()
        _wait_idle(page)
        assert page.get_by_text("8 sequences fit:").first.is_visible()  # the spec's profile B, the answer first
        assert page.locator('[data-testid="stException"]').count() == 0
        assert not page.evaluate(PLOTLY_FETCHED)
        screenshot(page, "kv_profile_b")


def _same_origin(url: str, origin: str) -> bool:
    """Return whether ``url`` is the app's own origin (its WebSocket included) or data the page made itself."""
    from urllib.parse import urlsplit

    if url.startswith(("data:", "blob:", "about:")):
        return True
    app, got = urlsplit(origin), urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(got.scheme, got.scheme)
    return (scheme, got.hostname, got.port) == (app.scheme, app.hostname, app.port)


PAGES = {  # link text in the sidebar -> heading it opens
    "Percentile explorer": "Percentile explorer", "Compare runs": "Compare runs", "Diagnosis": "Diagnosis", "KV calculator": "KV calculator",
    "Load sweep": "Load sweep", "Timing run": "Timing run", "Summary": "Summary",
}


def test_every_page_loads_only_from_the_apps_own_origin() -> None:
    """Record every request the pages make (the browser's, workers', WebSocket); none leaves the app's origin."""
    require_chromium()
    with streamlit_server() as url, browser_page(viewport=(1400, 1600)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        seen: list[str] = []
        outside: list[str] = []

        def record(route) -> None:
            seen.append(route.request.url)
            if _same_origin(route.request.url, url):
                route.continue_()
            else:  # recorded, and stopped here so the test never reaches the network
                outside.append(route.request.url)
                route.abort()

        page.context.route("**/*", record)
        page.context.on("request", lambda r: seen.append(r.url))
        page.on("websocket", lambda ws: seen.append(ws.url))
        page.goto(url, wait_until="networkidle")
        page.get_by_role("heading", name="Summary").first.wait_for()
        _wait_idle(page)
        assert page.get_by_text("Shared on the network").count() == 0  # local: no banner
        assert page.locator('[data-testid="stAppDeployButton"]').count() == 0
        assert page.get_by_role("button", name="Deploy").count() == 0
        for link, heading in PAGES.items():
            page.get_by_role("link", name=link).click()
            page.get_by_role("heading", name=heading).first.wait_for()
            _wait_idle(page)
            page.wait_for_load_state("networkidle")
            assert page.locator('[data-testid="stException"]').count() == 0, link
        page.get_by_role("link", name="Load sweep").click()  # charts drawn from a result, not only empty pages
        page.get_by_role("heading", name="Load sweep").first.wait_for()
        _wait_idle(page)
        page.get_by_role("button", name="Run the sweep").click()
        page.locator(VEGA_DRAWN).nth(4).wait_for()  # latency, TTFT, outcomes, the engine over time (two)
        _wait_idle(page)
        page.wait_for_load_state("networkidle")
        screenshot(page, "sweep_local_only")
        page.locator('[data-testid="stMarkdownContainer"]:has(table)').nth(2).wait_for()  # its three tables
        assert page.evaluate(WIDE_TABLES) == []  # the sweep's tables fit the 1,400 px window too
    assert any(u.startswith(url) for u in seen), "no request was recorded at all"
    assert any(u.startswith("ws://") for u in seen), "the app's WebSocket was not recorded"
    assert not outside, f"requests outside {url}: {sorted(set(outside))}"
    assert all(_same_origin(u, url) for u in seen), sorted({u for u in seen if not _same_origin(u, url)})


def test_links_straight_to_kv_sweep_and_planner_never_fetch_plotly() -> None:
    """A shared link to the KV calculator, the Load sweep (run) or the planner (planned), and Summary's over-time
    panel opened: every chart is Vega-Lite, so the browser never fetches plotly.js (about 2 s of a first load here)."""
    require_chromium()
    with streamlit_server() as url, browser_page(viewport=(1400, 1600)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        fetched: list[str] = []
        page.context.on("request", lambda r: "plotly" in r.url.lower() and fetched.append(r.url))

        def visit(path: str, heading: str, button: str | None, charts: int) -> None:
            page.goto(f"{url}/{path}", wait_until="domcontentloaded")
            page.get_by_role("heading", name=heading).first.wait_for()
            _wait_idle(page)
            if button is not None:
                page.get_by_role("button", name=button, exact=True).click()
            page.locator(VEGA_DRAWN).nth(charts - 1).wait_for()
            _wait_idle(page)
            assert page.locator('[data-testid="stException"]').count() == 0, path
            assert page.locator('[data-testid="stPlotlyChart"]').count() == 0, path
            assert not page.evaluate(PLOTLY_FETCHED), path

        visit("kv", "KV calculator", None, 1)
        assert page.get_by_text("8 sequences fit:").first.is_visible()  # the numbers behind it are in a panel
        visit("sweep", "Load sweep", "Run the sweep", 5)  # latency, TTFT, outcomes, the engine over time (two)
        screenshot(page, "sweep_vega_lite")
        visit("planner", "Capacity planner", "Plan", 1)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        _wait_idle(page)
        page.get_by_text("Throughput, TTFT and latency over time").first.click()
        page.locator(VEGA_DRAWN).nth(2).wait_for()  # successes/s, TTFT and latency by bin (the overview is SVG)
        _wait_idle(page)
        assert not page.evaluate(PLOTLY_FETCHED)
    assert not fetched, fetched


def test_several_files_uploaded_at_once_are_compared() -> None:
    require_chromium()
    with streamlit_server() as url, browser_page(viewport=(1400, 2400)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        _wait_idle(page)
        upload = page.locator('[data-testid="stFileUploader"] input[type="file"]').first
        upload.set_input_files([str(REPO / "sample_data" / "r1_r4.json"),
                                str(REPO / "tests" / "data" / "importers" / "guidellm-0.8.1-errors.json")])
        page.get_by_text("guidellm-0.8.1-errors.json (upload").first.wait_for()
        _wait_idle(page)
        assert _metric(page, "Requests") == "41"
        page.get_by_role("link", name="Compare runs").click()
        page.get_by_role("heading", name="Compare runs").first.wait_for()
        page.get_by_text("Is it noise?").first.wait_for()
        _wait_idle(page)
        assert page.locator('[data-testid="stVegaLiteChart"]').count() == 0  # the tables first, the charts on request
        page.get_by_text("Distributions: overlaid CDFs").first.click()
        page.locator(VEGA_DRAWN).nth(5).wait_for()  # latency, TTFT, TPOT: overlaid CDFs and percentile bars
        _wait_idle(page)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stPlotlyChart"]').count() == 0  # Vega-Lite: plotly.js never loaded
        assert not page.evaluate(PLOTLY_FETCHED)
        overflow = page.evaluate("""() => [...document.querySelectorAll('[data-testid="stColumn"]')].map(col => {
          const c = col.getBoundingClientRect();
          return [...col.querySelectorAll('canvas')].map(v => v.getBoundingClientRect().right - c.right);
        }).flat()""")
        assert len(overflow) == 6 and max(overflow) <= 1  # each chart is drawn inside its column
        assert page.locator('[data-testid="stDataFrame"]').count() == 0  # Markdown tables, not grids
        assert page.evaluate(WIDE_TABLES) == []  # each table fits the page: no horizontal scrolling
        # the two uploads only: the sample the app opened with is not compared unless asked for
        assert _contract_columns(page) == ["field", "r1_r4.json", "guidellm-0.8.1-errors.json",
                                           "Δ guidellm-0.8.1-errors.json"]
        assert "requests_sample.csv" not in page.locator('[data-testid="stMain"]').inner_text()
        assert page.locator('[data-testid="stVegaLiteChart"]').count() == 6
        screenshot(page, "compare_two_uploads")
        page.get_by_role("combobox", name="Baseline").click()  # the user picks the baseline
        page.get_by_role("option", name="guidellm-0.8.1-errors.json").click()
        page.wait_for_function("""() => [...document.querySelectorAll('th')]
                                  .some(e => e.innerText.trim() === 'Δ r1_r4.json')""", timeout=TIMEOUT_MS)
        _wait_idle(page)
        assert _contract_columns(page) == ["field", "guidellm-0.8.1-errors.json", "r1_r4.json", "Δ r1_r4.json"]
        page.get_by_text("Include sample files").first.click()
        page.wait_for_function("""() => [...document.querySelectorAll('th')]
                                  .some(e => e.innerText.trim() === 'requests_sample.csv')""", timeout=TIMEOUT_MS)
        _wait_idle(page)
        assert _contract_columns(page)[:4] == ["field", "guidellm-0.8.1-errors.json", "r1_r4.json",
                                               "requests_sample.csv"]  # the baseline picked is kept
        assert page.locator('[data-testid="stException"]').count() == 0
        screenshot(page, "compare_three_runs")


def _contract_columns(page) -> list[str]:
    """Return the header of Compare's first table (the contract side by side)."""
    return page.locator('[data-testid="stMarkdownContainer"] table').first.locator("th").all_inner_texts()


TABLES = '[data-testid="stDataFrame"], [data-testid="stTable"], [data-testid="stMarkdownContainer"]:has(table)'
WIDE_TABLES = """() => [...document.querySelectorAll('""" + TABLES + """')].map(e => {
  const s = e.querySelector('.dvn-scroller') || e.querySelector('table')?.parentElement || e;
  const heads = [...e.querySelectorAll('[role="columnheader"], th')].map(c => c.innerText.trim()).join('|');
  return {columns: heads, scroll_px: s.scrollWidth, visible_px: s.clientWidth};
}).filter(t => t.scroll_px > t.visible_px + 1)"""


def _records_with_every_section(tmp_path) -> Path:
    """Write the sample with cached prompt tokens and logical ids, so Summary also shows its prefix-cache and
    retries tables (which appear only with such columns)."""
    import pandas as pd

    frame = pd.read_csv(REPO / "sample_data" / "requests_sample.csv")
    frame["cached_prompt_tokens"] = (frame["prompt_tokens"] // 2).where(frame.index % 2 == 0, 0)
    frame["logical_id"] = frame["request_id"].str.slice(0, 8)  # ten attempts share each logical request
    frame["attempt"] = frame.groupby("logical_id").cumcount() + 1
    path = tmp_path / "every_section.csv"
    frame.to_csv(path, index=False)
    return path


def _tables(page) -> int:
    return page.locator(TABLES).count()


def test_summary_tables_fit_a_1400_px_window_without_scrolling_sideways(tmp_path) -> None:
    """Every table on Summary (the prefix-cache and retries tables too) and the Percentile explorer's records grid
    fits a 1,400 px window: each table's scrollable width is its visible width, in ms and in s."""
    require_chromium()
    records = _records_with_every_section(tmp_path)
    with streamlit_server() as url, browser_page(viewport=(1400, 3600)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Slices").first.wait_for()  # the sample has slices: the widest table
        _wait_idle(page)
        page.locator('[data-testid="stMarkdownContainer"] table').nth(6).wait_for()
        assert _tables(page) >= 7
        assert page.evaluate(WIDE_TABLES) == []
        page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(str(records))
        page.get_by_role("heading", name="Prefix cache").first.wait_for()
        page.get_by_role("heading", name="Retries: logical requests").first.wait_for()
        _wait_idle(page)
        page.locator('[data-testid="stMarkdownContainer"] table').nth(9).wait_for()
        shown = _tables(page)
        assert shown >= 10  # the sample's tables, the prefix cache's and the logical requests'
        assert page.evaluate(WIDE_TABLES) == []
        page.get_by_role("radio", name="s", exact=True).first.click()  # milliseconds (longer numbers) by default
        page.wait_for_function(
            """() => [...document.querySelectorAll('th')].some(e => e.innerText.trim() === 'Latency p95 (s)')""",
            timeout=TIMEOUT_MS)
        _wait_idle(page)
        assert _tables(page) == shown
        assert page.evaluate(WIDE_TABLES) == []
        screenshot(page, "summary_tables_1400px")

        page.get_by_role("link", name="Percentile explorer").click()  # its records grid, in a closed panel
        page.get_by_role("heading", name="Percentile explorer").first.wait_for()
        page.locator('[data-testid="stExpander"] summary', has_text="records counted").first.click()
        grid = page.locator('[data-testid="stDataFrame"] .dvn-scroller').first
        grid.wait_for()
        _wait_idle(page)
        assert page.evaluate(WIDE_TABLES) == []
        screenshot(page, "percentile_records_1400px")


def test_the_first_click_on_the_engineer_view_and_the_unit_takes() -> None:
    """The engineer toggle, drawn by app.py before st.navigation, lost its first click (Streamlit dropped its state
    on the session's first rerun), so it stayed off until clicked again; the ms / s choice did not carry from one
    page to the next. Both are kept under keys of their own (pages._shared)."""
    require_chromium()
    with streamlit_server() as url, browser_page() as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        page.get_by_role("heading", name="Summary").first.wait_for()
        _wait_idle(page)
        box = page.locator("label:has-text('Engineer view') input[type=checkbox]")
        assert not box.is_checked()
        page.get_by_text("Engineer view").click()
        page.get_by_text("The contract: eight fields").first.wait_for()  # the engineer view's own text
        _wait_idle(page)
        assert box.is_checked()
        page.get_by_text("s", exact=True).first.click()  # the Time unit: seconds
        page.get_by_text("Latency p95 (s)").first.wait_for()
        _wait_idle(page)
        page.get_by_role("link", name="Diagnosis").click()
        page.get_by_role("heading", name="Diagnosis").first.wait_for()
        _wait_idle(page)
        page.locator('[data-testid="stButtonGroup"]').first.wait_for()
        chosen = page.locator('[data-testid="stButtonGroup"] button[aria-checked="true"], '
                              '[data-testid="stBaseButton-segmented_controlActive"]').all_inner_texts()
        assert chosen == ["s"] and box.is_checked()
