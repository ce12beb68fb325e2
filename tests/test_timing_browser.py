"""The timing run's Stop button in a real browser (issue 36): the run ends early and its records open on Summary."""

from __future__ import annotations

import re

import pytest
from browser import browser_page, require_chromium, streamlit_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TIMEOUT_MS = 120_000


def test_the_stop_button_ends_a_timing_run_and_opens_what_it_measured() -> None:
    require_chromium()
    with streamlit_server() as url, browser_page(viewport=(1400, 1000)) as page:
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(f"{url}/timing_run", wait_until="domcontentloaded")
        page.get_by_role("heading", name="Timing run").first.wait_for()
        requests = page.get_by_label("Requests", exact=True)
        requests.fill("400")  # minutes of work on a CPU: the stop has to end it
        requests.press("Enter")
        page.wait_for_timeout(500)
        page.get_by_role("button", name="Start the timing run").click()
        page.get_by_text(re.compile(r"[1-9][\d,]* of 400 requests ended")).first.wait_for()
        page.get_by_role("button", name="Stop the run").click()
        page.get_by_role("heading", name="Summary").first.wait_for()
        page.get_by_text("timing run tiny_cpu").first.wait_for()
        label = page.locator('[data-testid="stMetricLabel"]', has_text=re.compile(r"^\s*Requests\s*$"))
        counted = page.locator('[data-testid="stMetric"]', has=label).first  # not "Requests/s" beside it
        shown = int(counted.locator('[data-testid="stMetricValue"]').inner_text().replace(",", ""))
        assert 1 <= shown < 400
        assert page.locator('[data-testid="stException"]').count() == 0
