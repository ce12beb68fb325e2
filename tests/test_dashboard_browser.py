"""Summary in a real browser at 1,400 x 900: the overview above the fold (measured from element boxes), and an SLO
and a window change on a 100,000-record upload giving the numbers the library computes.

Skipped, with the reason, where Chromium or Playwright is missing. Screenshots go to test-artifacts/.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from browser import browser_page, require_chromium, screenshot, streamlit_server
from test_app_browser import TIMEOUT_MS, VEGA_DRAWN, _metric, _wait_idle

pytestmark = [pytest.mark.browser, pytest.mark.slow]

WIDTH, HEIGHT = 1400, 900
# every box in the overview, and the first table's top: a table follows the overview, it is not beside it
OVERVIEW_BOXES = """() => {
  const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, top: r.top, right: r.right,
                                                                  bottom: r.bottom, height: r.height}; };
  const o = document.querySelector('.st-key-overview');
  const table = document.querySelector('[data-testid="stMarkdownContainer"] table');
  return {charts: [...o.querySelectorAll('svg[role="img"]')].map(box),
          metrics: [...o.querySelectorAll('[data-testid="stMetric"]')].map(box),
          numbers: box(document.querySelector('.st-key-overview_numbers')),
          table_top: table ? table.getBoundingClientRect().top : null};
}"""


def _overview_drawn(page) -> None:
    page.wait_for_function("""() => {
      const o = document.querySelector('.st-key-overview');
      return o && o.querySelectorAll('svg[role="img"]').length === 3 && o.querySelectorAll('[data-testid="stMetric"]').length === 8;
    }""", timeout=TIMEOUT_MS)
    _wait_idle(page)


def test_summary_opens_on_its_overview_above_the_fold_at_1400x900() -> None:
    require_chromium()
    with streamlit_server() as url, browser_page(viewport=(WIDTH, HEIGHT)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        _overview_drawn(page)
        boxes = page.evaluate(OVERVIEW_BOXES)
        screenshot(page, "summary_overview_1400x900")
        assert len(boxes["charts"]) == 3 and len(boxes["metrics"]) == 8
        for b in boxes["charts"] + boxes["metrics"]:
            assert 0 <= b["top"] and b["bottom"] <= HEIGHT and b["right"] <= WIDTH, b  # no scrolling to see it
        assert sorted(b["height"] >= 150 for b in boxes["charts"]) == [False, True, True]  # the bar, then the plots
        assert page.locator('.stPrintGraphic').count() == 0  # no chart library loaded for the first screen
        assert min(m["left"] for m in boxes["metrics"]) >= max(c["right"] for c in boxes["charts"])  # beside
        bottom = max(b["bottom"] for b in boxes["charts"] + boxes["metrics"])
        assert boxes["table_top"] is not None and boxes["table_top"] > bottom  # the tables follow
        assert "Eight numbers that sum up the run" in page.locator(".st-key-overview_numbers").inner_text()
        assert page.console_errors == []


# the modules of these stems (STEM.HASH.js) the browser has fetched, by file name
FETCHED = """(stems) => performance.getEntriesByType('resource').map(e => e.name.split('/').pop())
  .filter(n => stems.includes(n.split('.')[0]))"""
# the chart element's code and the two modules its first chart imports
CHART_CODE = ["ArrowVegaLiteChart", "embed", "vega-interpreter"]


def _preloaded(page, url: str, stems: list[str]) -> list[str]:
    """Open Summary, wait until the modules of ``stems`` have been fetched once it is drawn; return their names."""
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url, wait_until="domcontentloaded")
    _overview_drawn(page)
    page.wait_for_function(f"() => ({FETCHED})({stems!r}).length >= {len(stems)}", timeout=TIMEOUT_MS)
    fetched = sorted(page.evaluate(FETCHED, stems))
    assert sorted(n.split(".")[0] for n in fetched) == sorted(stems)
    return fetched


def test_the_chart_code_is_fetched_once_the_first_view_is_drawn_and_serves_the_first_chart() -> None:
    """Summary's first view draws no chart, so the first panel opened paid for Vega's code (about 0.35 s of the
    browser's main thread): the page now fetches and compiles it once the view is drawn and the page is idle, by the
    URLs Streamlit imports it from, so opening the CDF panel fetches nothing more."""
    require_chromium()
    with streamlit_server() as url, browser_page(viewport=(WIDTH, HEIGHT)) as page:
        fetched = _preloaded(page, url, CHART_CODE)
        assert page.locator(".stPrintGraphic").count() == 0  # no chart drawn for it
        assert page.locator(".st-key-chart_code").bounding_box() is None  # hidden: it takes no room
        page.get_by_text("CDFs of latency, TTFT and TPOT").first.click()
        page.locator(VEGA_DRAWN).nth(2).wait_for()
        _wait_idle(page)
        assert sorted(page.evaluate(FETCHED, CHART_CODE)) == fetched  # the charts used the modules already fetched
        assert page.console_errors == []


UPLOAD_CODE = ["axios", "Radio"]  # the uploader's HTTP client, and the radio of the record sets held


def test_a_first_upload_finds_its_code_fetched_while_the_page_was_idle(tmp_path) -> None:
    """The uploader's HTTP client and the 'Showing' radio were fetched on the first upload (about 0.03 s each on its
    path): the page fetches them with the chart code once idle, and the upload fetches nothing more."""
    require_chromium()
    small = tmp_path / "small.csv"
    small.write_text("start,first_token,end,status,output_tokens\n0,0.1,1,success,4\n1,1.2,2,success,5\n")
    with streamlit_server() as url, browser_page(viewport=(WIDTH, HEIGHT)) as page:
        fetched = _preloaded(page, url, UPLOAD_CODE)
        page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(str(small))
        page.get_by_text("small.csv · 2 records").first.wait_for()
        page.get_by_text("small.csv (upload)").first.wait_for()  # the radio of the record sets held
        _wait_idle(page)
        assert sorted(page.evaluate(FETCHED, UPLOAD_CODE)) == fetched  # the upload used the modules already fetched
        assert page.console_errors == []


def _big_records(path: Path, n: int = 100_000, seed: int = 18) -> None:
    """Write n records (90% success) over n / 50 s as CSV: start, first_token, end, status, output_tokens."""
    rng = np.random.default_rng(seed)
    start = np.sort(rng.uniform(0, n / 50, n))
    ttft = rng.lognormal(-1.5, 0.5, n)
    out = rng.integers(2, 400, n)
    end = start + ttft + out * rng.uniform(0.01, 0.04, n)
    ok = rng.uniform(size=n) < 0.9
    lines = ["start,first_token,end,status,output_tokens"]
    lines += [f"{s:.6f},{s + t:.6f},{e:.6f},success,{o}" if good else f"{s:.6f},,{e:.6f},timeout,"
              for s, t, e, o, good in zip(start, ttft, end, out, ok)]
    path.write_text("\n".join(lines) + "\n")


def test_an_slo_and_a_window_change_on_100k_records_show_the_librarys_numbers(tmp_path) -> None:
    from servebench.analysis.summary import SLO, build_report
    from servebench.formatting import fmt, fmt_share
    from servebench.records.loaders import load_table
    from servebench.records.window_zoom import trim

    require_chromium()
    from playwright.sync_api import expect

    big = tmp_path / "records_100k.csv"
    _big_records(big)
    table, ws, we = load_table(big)
    expected_attainment = build_report(table, ws, we, SLO(ttft_s=0.3)).slo.attainment
    kept = trim(table, ws, ws + 1000.0).table
    expected_kept_attainment = build_report(kept, ws, ws + 1000.0, SLO(ttft_s=0.3)).slo.attainment
    with streamlit_server() as url, browser_page(viewport=(WIDTH, HEIGHT)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(url, wait_until="domcontentloaded")
        _overview_drawn(page)
        page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(str(big))
        page.get_by_text("records_100k.csv · 100,000 records").first.wait_for()
        # the caption is drawn before the report: until the overview's numbers are the new run's, the old ones show
        requests = page.locator('[data-testid="stMetric"]').filter(
            has=page.locator('[data-testid="stMetricLabel"]', has_text=re.compile(r"^\s*Requests\s*$"))).first
        expect(requests.locator('[data-testid="stMetricValue"]')).to_have_text("100,000", timeout=TIMEOUT_MS)
        _overview_drawn(page)

        ttft = page.get_by_label("TTFT limit (ms)", exact=True)
        ttft.fill("300")
        ttft.press("Enter")
        page.locator('[data-testid="stMetricLabel"]', has_text="SLO attainment").first.wait_for()
        _wait_idle(page)
        assert _metric(page, "SLO attainment") == fmt_share(expected_attainment)

        end = page.get_by_label("Window end (s)", exact=True)  # not its help button
        end.fill("1000")
        end.press("Enter")
        expect(requests.locator('[data-testid="stMetricValue"]')).to_have_text(fmt(len(kept)), timeout=TIMEOUT_MS)
        _overview_drawn(page)  # only records wholly inside the window are counted
        assert _metric(page, "SLO attainment") == fmt_share(expected_kept_attainment)  # the limit kept
        screenshot(page, "summary_100k_window")
        assert page.console_errors == []
