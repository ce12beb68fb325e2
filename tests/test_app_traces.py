"""The Traces page through AppTest: an excerpt, an upload of each format, a bad upload and recovery, the planner."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from streamlit.testing.v1 import AppTest
from vega_charts import drawn_charts, valid

from servebench.analysis.summary import SLO
from servebench.analysis.trace_stats import trace_stats
from servebench.capacity.model_presets import get_preset
from servebench.dashboard.trace_charts import HIT_RATE_TITLE, OVER_TIME_TITLE, hit_rate_chart, over_time_charts
from servebench.dashboard.traces import (
    UPLOAD_KEEP_S,
    answers,
    kept_upload,
    option_text,
    plan_request,
    plan_window_text,
    prune_uploads,
    trace_metrics,
)
from servebench.formatting import fmt, fmt_share
from servebench.output.figures.trace import trace_bins
from servebench.records.traces import read_trace

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")
TRACES = REPO / "sample_data" / "traces"
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            + "".join(f"{t},ChatGPT,{100 + t},{0 if t % 7 == 0 else 20 + t},0,Conversation log\n"
                      for t in range(0, 90)))
RECORDS = "".join(json.dumps({"start": t / 2, "first_token": t / 2 + 0.25, "end": t / 2 + 1, "status": "success",
                               "prompt_tokens": 50 + t,
                               "output_tokens": 10 + t}) + "\n" for t in range(80))


def _page() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    at.switch_page("pages/traces.py").run()
    assert not at.exception and not at.error
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _upload(at: AppTest, name: str, data: bytes) -> None:
    at.file_uploader(key="traces_upload").set_value((name, data, "text/plain")).run()


def test_the_first_excerpt_shows_its_stats_answers_and_both_charts() -> None:
    at = _page()
    name = at.selectbox(key="traces_sample").value
    stats = trace_stats(read_trace(TRACES / name))
    m = _metrics(at)
    assert m["Requests"] == fmt(stats.requests)
    assert m["Busiest minute (req/s)"] == fmt(stats.peak_rate_rps)
    assert m["Prompt tokens p50 / p99"] == f"{fmt(stats.prompt_tokens.p50)} / {fmt(stats.prompt_tokens.p99)}"
    assert m["Reusable prefix share"] == fmt_share(stats.prefix.reusable_token_share)
    assert any("in the busiest minute" in md.value for md in at.markdown)
    charts = drawn_charts(at)
    assert {OVER_TIME_TITLE, HIT_RATE_TITLE} <= set(charts)
    for spec, _ in charts.values():
        valid(spec)
    assert not at.get("plotly_chart")


@pytest.mark.parametrize("name, data, requests", [
    ("conv.jsonl", (TRACES / "mooncake_conversation_300.jsonl").read_bytes(), "300"),
    ("code.csv", (TRACES / "azure_code_2023_300.csv").read_bytes(), "300"),
    ("burst.csv", BURSTGPT.encode(), "90"),
    ("run.jsonl", RECORDS.encode(), "80"),
])
def test_an_upload_of_each_format_replaces_the_excerpt(name: str, data: bytes, requests: str) -> None:
    at = _page()
    _upload(at, name, data)
    assert not at.exception and not at.error
    assert _metrics(at)["Requests"] == requests
    has_hashes = name == "conv.jsonl"
    assert (HIT_RATE_TITLE in drawn_charts(at)) is has_hashes
    assert (_metrics(at)["Reusable prefix share"] != "—") is has_hashes


def test_the_readers_warnings_are_shown_above_the_numbers() -> None:
    at = _page()
    line = {"timestamp": 0, "input_length": 1600, "output_length": 5, "hash_ids": [1, 2]}
    _upload(at, "short.jsonl", (json.dumps(line) + "\n" + json.dumps({**line, "timestamp": 5000}) + "\n").encode())
    assert not at.exception and not at.error
    assert [w.value for w in at.warning] == [
        "2 requests have a number of hash_ids other than their input_length in 512-token blocks; their tokens "
        "past the last block count as never cached"]
    assert _metrics(at)["Requests"] == "2"


def test_a_bad_upload_is_one_line_with_file_line_and_field_and_removing_it_recovers() -> None:
    at = _page()
    bad = BURSTGPT.replace("\n3,ChatGPT,103,", "\n3,ChatGPT,10.5,", 1).encode()
    _upload(at, "broken.csv", bad)
    assert not at.exception
    (err,) = at.error
    assert err.value == "broken.csv: line 5, field 'Request tokens': 10.5 is not a whole number"
    assert not at.metric
    at.file_uploader(key="traces_upload").set_value(None).run()
    assert not at.exception and not at.error
    assert _metrics(at)["Requests"] == fmt(len(read_trace(TRACES / at.selectbox(key="traces_sample").value)))


def test_the_plan_button_names_replicas_gpu_and_cost_with_details_a_click_away() -> None:
    at = _page()
    at.selectbox(key="traces_sample").select("azure_conv_2023_300.csv").run()
    at.multiselect(key="traces_gpus").set_value(["H100"])
    at.multiselect(key="traces_tp").set_value([1])
    at.multiselect(key="traces_seqs").set_value([64])
    at.number_input(key="traces_slo_ttft_ms").set_value(2000.0)  # times in ms, as every page shows them
    at.run()
    at.button(key="traces_plan").click().run()
    assert not at.exception and not at.error
    (done,) = at.success
    assert done.value == "**1 replica of H100 ×1, $2.99/h**"
    text = " ".join(md.value for md in at.markdown)
    assert "Sized for the busiest minute" in text and "prefix caching off" in text
    assert "| H100 |" in text
    at.number_input(key="traces_slo_ttft_ms").set_value(3000.0).run()
    assert "plan again" in at.warning[0].value


def test_a_burstgpt_plan_says_how_many_failed_requests_it_left_out() -> None:
    at = _page()
    _upload(at, "burst.csv", BURSTGPT.encode())
    at.multiselect(key="traces_gpus").set_value(["H100"])
    at.multiselect(key="traces_tp").set_value([1])
    at.multiselect(key="traces_seqs").set_value([64])
    at.run()
    at.button(key="traces_plan").click().run()
    assert not at.exception and not at.error
    assert at.success[0].value.startswith("**1 replica of H100 ×1")
    # the busiest minute [0, 60) holds t = 0, 7, ..., 56: nine requests of 0 output tokens
    assert any("9 requests of the window left out: 0 output tokens" in c.value for c in at.caption)


def test_no_gpu_no_slo_or_a_wrong_format_is_one_line_each() -> None:
    at = _page()
    at.selectbox(key="traces_sample").select("azure_conv_2023_300.csv").run()
    at.multiselect(key="traces_gpus").set_value([]).run()
    at.button(key="traces_plan").click().run()
    assert not at.exception and [e.value for e in at.error] == ["give at least one GPU type"]
    at.multiselect(key="traces_gpus").set_value(["H100"])
    at.number_input(key="traces_slo_ttft_ms").set_value(0.0)
    at.number_input(key="traces_slo_tpot_ms").set_value(0.0).run()
    at.button(key="traces_plan").click().run()
    assert not at.exception and at.error[0].value.startswith("give at least one SLO")
    at.selectbox(key="traces_format").select("mooncake").run()
    assert not at.exception
    assert [e.value for e in at.error] == ["azure_conv_2023_300.csv: line 1: invalid JSON at column 1: Expecting value"]


def test_an_upload_is_kept_once_under_its_digest_and_own_name(tmp_path: Path) -> None:
    first = kept_upload("dir/t.csv", b"abc", tmp_path)
    assert first.name == "t.csv" and first.read_bytes() == b"abc"
    assert kept_upload("t.csv", b"abc", tmp_path) == first
    assert kept_upload("t.csv", b"abd", tmp_path) != first
    assert option_text(None) == "no configuration meets the SLOs"


# --- servebench.dashboard.traces and trace_charts as units ------------------------------------------------------

def test_the_cache_sentence_names_the_smallest_capacity_within_a_tenth_of_the_unbounded_share() -> None:
    stats = trace_stats(read_trace(TRACES / "mooncake_conversation_300.jsonl"))
    prefix = stats.prefix
    first = next(h for h in prefix.hit_rate_by_capacity if h.token_hit_rate >= 0.9 * prefix.reusable_token_share)
    assert answers(stats)[2] == (f"An unbounded prefix cache would serve {fmt_share(prefix.reusable_token_share)} of "
                                 f"the prompt tokens; a cache of {fmt(first.capacity_tokens)} tokens serves "
                                 f"{fmt_share(first.token_hit_rate)}.")


def test_a_trace_under_a_minute_has_no_busiest_minute_and_plans_the_whole_of_it(tmp_path: Path) -> None:
    path = kept_upload("short.csv", "\n".join(BURSTGPT.splitlines()[:31]).encode() + b"\n", tmp_path)
    trace = read_trace(path)
    stats = trace_stats(trace)
    metrics = {m.label: m.value for m in trace_metrics(stats)}
    assert metrics["Busiest minute (req/s)"] == "—" and metrics["Reusable prefix share"] == "—"
    assert "spans less than a minute" in answers(stats)[0]
    charts = over_time_charts(trace_bins(trace))
    for spec in charts:
        valid(spec)
        assert spec["datasets"]["peak"].empty
    assert "shaded" not in " ".join(charts[0]["title"]["subtitle"])
    request, rate_rps = plan_request(str(path), "auto", get_preset("llama-3.1-8b"), SLO(ttft_s=5.0), slo_target=0.95,
                                     gpus=["H100"], tensor_parallel=[1], max_num_seqs=[64], headroom=0.2)
    assert request.workload.trace.duration_s is None and request.requests_per_simulation == 25  # 30 less 5 failed
    assert "the whole trace (it spans less than a minute)" in plan_window_text(request, rate_rps)


def test_the_over_time_chart_draws_trace_bins_numbers_and_the_hit_rate_chart_the_lru_shares() -> None:
    trace = read_trace(TRACES / "mooncake_synthetic_250.jsonl")
    bins = trace_bins(trace)
    requests, prompt, output = over_time_charts(bins)
    for spec, values in ((requests, bins.requests_per_s), (prompt, bins.prompt_tokens_per_s),
                         (output, bins.output_tokens_per_s)):
        valid(spec)
        assert spec["datasets"]["rate"]["y"].tolist() == values.tolist()
        assert spec["datasets"]["peak"].to_dict("records") == [{"x0": bins.peak_window[0],
                                                                "x1": bins.peak_window[0] + 60.0}]
    prefix = trace_stats(trace).prefix
    hits = hit_rate_chart(prefix)
    valid(hits)
    assert hits["datasets"]["lru"]["y"].tolist() == [100 * h.token_hit_rate for h in prefix.hit_rate_by_capacity]
    assert hits["datasets"]["unbounded"]["y"].tolist() == [100 * prefix.reusable_token_share]


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=200), other=st.binary(min_size=1, max_size=20))
def test_an_upload_file_holds_its_bytes_and_is_shared_by_equal_bytes_only(data: bytes, other: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        path = kept_upload("t.jsonl", data, Path(root))
        assert path.read_bytes() == data and kept_upload("t.jsonl", data, Path(root)) == path
        assert kept_upload("t.jsonl", data + other, Path(root)) != path
        assert [p.name for p in path.parent.iterdir()] == ["t.jsonl"]  # no partial file left behind


def test_an_upload_over_the_limit_names_the_limit() -> None:
    from streamlit.testing.v1.util import patch_config_options

    with patch_config_options({"server.maxUploadSize": 1}):
        at = _page()
        _upload(at, "big.jsonl", (TRACES / "mooncake_conversation_300.jsonl").read_bytes() * 16)  # 1.1 MB
        assert not at.exception
        assert at.error[0].value.startswith("big.jsonl is 1.1 MB: the dashboard takes uploads up to 1 MB")


@pytest.mark.browser
@pytest.mark.slow
def test_in_a_browser_an_uploaded_trace_draws_both_charts_without_plotly() -> None:
    from browser import browser_page, require_chromium, screenshot, streamlit_server

    require_chromium()
    drawn = '[data-testid="stVegaLiteChart"] canvas'
    with streamlit_server() as url, browser_page(viewport=(1400, 2200)) as page:
        page.set_default_timeout(60_000)
        page.goto(f"{url}/traces", wait_until="domcontentloaded")
        page.get_by_role("heading", name="Traces").first.wait_for()
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached")
        page.locator('[data-testid="stFileUploader"] input[type="file"]').first.set_input_files(
            str(TRACES / "mooncake_synthetic_250.jsonl"))
        page.wait_for_function("""() => [...document.querySelectorAll('[data-testid="stMetricValue"]')]
                                        .some(e => e.innerText.trim() === '250')""")
        page.locator(drawn).nth(3).wait_for()  # three over time, and the hit rate against capacity
        page.wait_for_selector('[data-testid="stStatusWidget"]', state="detached")
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator('[data-testid="stPlotlyChart"]').count() == 0
        assert not page.evaluate("performance.getEntriesByType('resource').some(e => e.name.includes('PlotlyChart'))")
        page.wait_for_timeout(2000)
        screenshot(page, "traces_upload_mooncake_synthetic")


def test_old_uploads_are_pruned_when_another_is_written(tmp_path: Path) -> None:
    """Uploads were kept forever under the temporary folder: a dashboard left running filled the disk with traces."""
    old = kept_upload("old.csv", b"a" * 10, tmp_path)
    recent = kept_upload("recent.csv", b"b" * 10, tmp_path)
    now = time.time()
    os.utime(old.parent, (now - UPLOAD_KEEP_S - 60, now - UPLOAD_KEEP_S - 60))
    os.utime(recent.parent, (now - 3600, now - 3600))
    new = kept_upload("new.csv", b"c" * 10, tmp_path)
    assert not old.parent.exists() and recent.is_file() and new.is_file()
    assert kept_upload("recent.csv", b"b" * 10, tmp_path) == recent and recent.parent.stat().st_mtime > now - 60  # in use
    # past the budget the least recently used go first; the one just written never
    os.utime(recent.parent, (now - 7200, now - 7200))
    third = kept_upload("third.csv", b"d" * 10, tmp_path)
    assert prune_uploads(tmp_path, keep=third.parent, budget_bytes=25) == [recent.parent]
    assert new.is_file() and third.is_file()
    assert prune_uploads(tmp_path, keep=third.parent, budget_bytes=0) == [new.parent] and third.is_file()
