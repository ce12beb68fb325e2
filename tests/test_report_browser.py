"""Open the report site from file:// in headless Chromium: charts render, nothing is fetched, nothing runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import browser_page, require_chromium, screenshot

from servebench.analysis.summary import SLO
from servebench.output.site import RunInput, SiteOptions, build_site, load_run, write_site
from servebench.records.loaders import read_path, to_table
from servebench.records.schema import parse_objects
from servebench.records.table import validate

EVIL = "<script>alert(1)</script>"
SAMPLE = Path(__file__).resolve().parent.parent / "sample_data"


def _site(tmp_path: Path) -> Path:
    table, ws, we = to_table(read_path(SAMPLE / "requests_sample.csv"))
    evil = [
        {"request_id": EVIL, "start": 0.0, "admitted": 0.2, "first_token": 0.5, "end": 2.5, "status": "success",
         "prompt_tokens": 10, "output_tokens": 9, "slice": EVIL},
        {"request_id": "b", "start": 1.0, "end": 4.0, "status": "timeout", "slice": EVIL, "error": EVIL},
        {"request_id": "c", "start": 1.5, "admitted": 1.6, "first_token": 2.0, "end": 3.0, "status": "success",
         "prompt_tokens": 10, "output_tokens": 5, "slice": "plain"},
    ]
    runs = [
        RunInput(name="requests_sample.csv", path=str(SAMPLE / "requests_sample.csv"), kind="records", table=table,
                 window_start=ws, window_end=we),
        RunInput(name=f"evil {EVIL}", path="evil.json", kind="records",
                 table=validate(parse_objects(evil, "evil.json"), 0.0, 5.0), window_start=0.0, window_end=5.0,
                 warnings=[f"a warning about {EVIL}"]),
        load_run(SAMPLE / "r1_r4.json"),
        _sweep(tmp_path),
    ]
    out = tmp_path / "site"
    write_site(build_site(runs, SiteOptions(title=f"Report {EVIL}", slo=SLO(ttft_s=1.0))), out)
    return out


def _sweep(tmp_path: Path) -> RunInput:
    from servebench.serving.scenario import load_scenario
    from servebench.serving.sweep import sweep

    result = sweep(load_scenario(SAMPLE / "scenarios" / "profile_a.yaml"), [0.5, 2.0], slo=SLO(ttft_s=2.0),
                   requests=60, search=False)
    folder = tmp_path / "sweep-a"
    folder.mkdir()
    (folder / "sweep.json").write_text(result.model_dump_json())
    return load_run(folder)


def _open(page: object, url: str) -> dict[str, int]:
    page.goto(url)  # type: ignore[attr-defined]
    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=30_000)  # type: ignore[attr-defined]
    page.wait_for_function(  # type: ignore[attr-defined]
        "document.querySelectorAll('.js-plotly-plot').length === document.querySelectorAll('.chart').length",
        timeout=30_000)
    return page.evaluate(  # type: ignore[attr-defined]
        "({charts: document.querySelectorAll('.chart').length,"
        "  plots: document.querySelectorAll('.js-plotly-plot').length,"
        "  svgs: document.querySelectorAll('.js-plotly-plot .main-svg').length,"
        "  traces: document.querySelectorAll('.js-plotly-plot .trace').length})")


@pytest.mark.slow
def test_site_renders_offline_in_chromium(tmp_path: Path) -> None:
    require_chromium()
    site = _site(tmp_path)
    with browser_page() as page:
        requests: list[str] = []
        dialogs: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))

        counts = _open(page, (site / "index.html").as_uri())
        assert counts["charts"] >= 1 and counts["plots"] == counts["charts"] and counts["svgs"] >= counts["plots"]
        assert counts["traces"] > 0
        body = page.inner_text("body")
        assert f"Report {EVIL}" in body and f"evil {EVIL}" in body
        screenshot(page, "report_index")

        page.click("text=requests_sample.csv")
        page.wait_for_load_state("load")
        counts = _open(page, page.url)
        assert counts["charts"] >= 7 and counts["plots"] == counts["charts"]
        screenshot(page, "report_run")

        evil_page = next(site.glob("run-02-*.html"))
        counts = _open(page, evil_page.as_uri())
        assert counts["plots"] == counts["charts"]
        body = page.inner_text("body")
        assert f"a warning about {EVIL}" in body and EVIL in body
        # the slice name reaches the stage chart as text, not markup
        svg_text = page.evaluate(
            "Array.from(document.querySelectorAll('.js-plotly-plot text')).map(t => t.textContent).join('|')")
        assert EVIL in svg_text
        screenshot(page, "report_escaping")

        counts = _open(page, next(site.glob("sweep-*.html")).as_uri())
        assert counts["charts"] == 2 and counts["plots"] == 2
        screenshot(page, "report_sweep")

        assert page.console_errors == []  # type: ignore[attr-defined]
        assert dialogs == []
        assert requests and all(u.startswith("file://") for u in requests), \
            [u for u in requests if not u.startswith("file://")]
