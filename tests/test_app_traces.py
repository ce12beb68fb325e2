"""The Traces page through AppTest: an excerpt, an upload of each format, a bad upload and recovery, the planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from servebench.analysis.trace_stats import trace_stats
from servebench.dashboard.trace_charts import HIT_RATE_TITLE, OVER_TIME_TITLE
from servebench.dashboard.traces import kept_upload, option_text
from servebench.output.plain import fmt, fmt_share
from servebench.records.traces import read_trace
from vega_charts import drawn_charts, valid

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
    at.number_input(key="traces_slo_ttft").set_value(2.0)
    at.run()
    at.button(key="traces_plan").click().run()
    assert not at.exception and not at.error
    (done,) = at.success
    assert done.value == "**1 replica of H100 ×1, $2.99/h**"
    text = " ".join(md.value for md in at.markdown)
    assert "Sized for the busiest minute" in text and "prefix caching off" in text
    assert "| H100 |" in text
    at.number_input(key="traces_slo_ttft").set_value(3.0).run()
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


def test_an_upload_is_kept_once_under_its_digest_and_own_name(tmp_path: Path) -> None:
    first = kept_upload("dir/t.csv", b"abc", tmp_path)
    assert first.name == "t.csv" and first.read_bytes() == b"abc"
    assert kept_upload("t.csv", b"abc", tmp_path) == first
    assert kept_upload("t.csv", b"abd", tmp_path) != first
    assert option_text(None) == "no configuration meets the SLOs"
