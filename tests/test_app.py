"""The dashboard through Streamlit's AppTest: every page runs without an exception and shows its key numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest
from vega_charts import drawn_charts, drawn_list

from servebench.output.figures.markdown_table import markdown_tables

REPO = Path(__file__).resolve().parent.parent
APP = str(REPO / "app.py")
IMPORTER_DATA = REPO / "tests" / "data" / "importers"


def _tables(at: AppTest) -> list:
    """Return the page's Markdown tables (its static tables) as frames of the text shown."""
    return markdown_tables(m.value for m in at.markdown)


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=90)
    at.run()
    assert not at.exception
    return at


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _number(at: AppTest, label: str):
    return next(n for n in at.number_input if n.label == label)


def test_opens_on_summary_with_sample_loaded() -> None:
    at = _app()
    assert at.title[0].value == "Summary"
    m = _metrics(at)
    from servebench.records.loaders import load_table
    sample, _, _ = load_table(REPO / "sample_data" / "requests_sample.csv")
    assert m["Requests"] == f"{len(sample):,}"
    assert m["Successes"] == f"{int(sample.is_success.sum()):,}"
    # the eight contract keys are shown under their spec names in the engineer view, and only there
    contract = {"requests", "successes", "non_success_fraction", "successful_requests_per_second",
                "successful_output_tokens_per_second", "success_latency_p95_s", "success_ttft_p95_s",
                "success_request_tpot_p95_s"}
    assert not contract & {c.value.strip("`") for c in at.caption}
    assert not any("contract" in m.value.lower() for m in at.markdown)
    at.toggle(key="engineer_view").set_value(True).run()
    assert contract <= {c.value.strip("`") for c in at.caption}
    assert any("The contract: eight fields" in m.value for m in at.markdown)
    assert not at.error


def test_no_page_draws_a_plotly_chart() -> None:
    """Every page, opened as a shared link opens it, draws Vega-Lite only, so no visit loads plotly.js (4.7 MB).

    The charts drawn after a button (a sweep, a plan) or in Summary's panels are checked in their own tests.
    """
    pages = sorted(p.name for p in (REPO / "pages").glob("*.py") if not p.name.startswith("_"))
    assert len(pages) == 12
    with_charts = set()
    for name in pages:
        at = AppTest.from_file(APP, default_timeout=90)
        at.switch_page(f"pages/{name}").run()
        assert not at.exception, name
        assert not at.get("plotly_chart"), name
        if drawn_charts(at):
            with_charts.add(name)
    assert {"percentiles.py", "kv.py"} <= with_charts  # charts drawn on opening, as Vega-Lite
    assert "summary.py" not in with_charts  # its overview is SVG pictures: no chart library for the first screen


def test_r1_r4_over_window_0_10_gives_0_2_successful_requests_per_second() -> None:
    at = _app()
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    assert _number(at, "Window end (s)").value == 7.0  # default: max end
    _number(at, "Window start (s)").set_value(0.0)
    _number(at, "Window end (s)").set_value(10.0)
    at.run()
    assert not at.exception
    m = _metrics(at)
    assert m["Successful requests/s"] == "0.2"
    assert m["Successful output tokens/s"] == "1"
    assert m["Non-success fraction"] == "50%"  # a fraction, shown as a percent
    assert m["Latency p95 (ms)"] == "2,500"  # times in milliseconds unless asked for seconds
    assert m["TTFT p95 (ms)"] == "500"
    assert m["Request TPOT p95 (ms)"] == "250"
    assert m["Rejected"] == "1" and m["Timed out"] == "1"


def test_slo_inputs_give_attainment_and_goodput() -> None:
    at = _app()
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    _number(at, "Window end (s)").set_value(10.0)
    _number(at, "TTFT limit (ms)").set_value(400.0)  # in ms, as every time on the page
    at.run()
    m = _metrics(at)
    assert m["SLO attainment"] == "25%"  # only R2 (TTFT 250 ms) of 4 requests
    assert m["Goodput (requests/s)"] == "0.1"
    assert at.query_params["slo_ttft_ms"] == "400"


# TTFTs of 2.51 ms, 2,510 ms and 2,520 ms (start 0: first_token is the TTFT to the bit), each then 1 s of decoding
BOUNDARY_RECORDS = b"".join(
    b'{"request_id": "%s", "start": 0, "first_token": %s, "end": %s, "status": "success", "output_tokens": 11}\n'
    % (rid, ft, end) for rid, ft, end in ((b"a", b"0.00251", b"1.00251"), (b"b", b"2.51", b"3.51"),
                                          (b"c", b"2.52", b"3.52")))


@pytest.mark.parametrize("ttft_ms, ttft_s, good", [(2.51, 0.00251, 1), (2510.0, 2.51, 2)])
def test_an_slo_typed_in_ms_gives_the_report_of_the_library_in_seconds(tmp_path: Path, ttft_ms: float,
                                                                         ttft_s: float, good: int) -> None:
    """The limits took seconds while every time on the page reads in ms: now 2,510 ms (or 2.51 ms) judges the
    records as ``SLO(ttft_s=2.51)`` (0.00251) does, a request whose TTFT is exactly the limit meeting it (2.51 / 1000
    is below 0.00251, so dividing by 1000 failed the request at 2.51 ms)."""
    from servebench import SLO, build_report, load_table
    from servebench.formatting import fmt, fmt_share

    path = tmp_path / "boundary.jsonl"
    path.write_bytes(BOUNDARY_RECORDS)
    table, ws, we = load_table(path)
    expected = build_report(table, ws, we, SLO(ttft_s=ttft_s)).slo
    assert expected.good_requests == good  # the request exactly at the limit meets it
    at = _app()
    at.file_uploader(key="records_upload").set_value(("boundary.jsonl", BOUNDARY_RECORDS, "application/json")).run()
    box = _number(at, "TTFT limit (ms)")
    assert box.value is None and box.step == 100.0  # no limit until one is typed
    box.set_value(ttft_ms).run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert m["SLO attainment"] == fmt_share(expected.attainment)
    assert m["Goodput (requests/s)"] == fmt(expected.goodput_requests_per_second)
    assert m["Goodput (output tokens/s)"] == fmt(expected.goodput_output_tokens_per_second)


def test_bad_upload_shows_file_row_and_field_not_a_traceback() -> None:
    at = _app()
    bad = b"start,end,status,first_token,output_tokens\n0,1,success,0.5,3\n0,1,success,0.5,9.0\n"
    at.file_uploader(key="records_upload").set_value(("bad.csv", bad, "text/csv")).run()
    assert not at.exception
    (err,) = at.error
    assert "bad.csv" in err.value and "row 2" in err.value and "output_tokens" in err.value
    assert "Still showing **requests_sample.csv**" in at.info[-1].value or _metrics(at)["Requests"] == "3,000"


def test_other_tools_export_is_imported_with_its_warnings() -> None:
    at = _app()
    data = (IMPORTER_DATA / "vllm-serve-detailed.json").read_bytes()
    at.file_uploader(key="records_upload").set_value(("vllm-serve-detailed.json", data, "application/json")).run()
    assert not at.exception and not at.error
    assert at.warning, "the importer's notes are shown"
    assert "vllm" in at.expander[0].label.lower()
    assert int(_metrics(at)["Requests"].replace(",", "")) > 0


def test_llmperf_file_without_timestamps_shows_rates_as_na() -> None:
    at = _app()
    data = (IMPORTER_DATA / "llmperf-individual.json").read_bytes()
    at.file_uploader(key="records_upload").set_value(("llmperf-individual.json", data, "application/json")).run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert m["Successful requests/s"] == "n/a" and m["Successful output tokens/s"] == "n/a"
    assert "Peak active requests" not in m  # every request on its own clock from 0: no concurrency to show
    assert m["Latency p95 (ms)"] not in ("n/a", "—")


def test_token_timing_after_summary_shows_the_gaps_summarys_own_report_leaves_out() -> None:
    """Summary's report on records with token times has no ITL (it shows none: the gaps were most of an upload's
    report); Token timing, opened next, gets the report with them, built beside Summary, and its numbers are
    those of the full report."""
    recs = [{"start": i, "first_token": i + 0.1, "end": i + 1.05, "status": "success", "output_tokens": 4,
             "token_times": [i + 0.1, i + 0.2, i + 0.4, i + 1.0 + 0.01 * i]} for i in range(6)]
    at = _app()
    at.file_uploader(key="records_upload").set_value(("tokens.json", json.dumps(recs).encode(),
                                                      "application/json")).run()
    assert not at.exception and not at.error and _metrics(at)["Requests"] == "6"
    at.switch_page("pages/token_timing.py").run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert m["ITL p50 (ms)"] == "200" and m["ITL p99 (ms)"] == "650"  # gaps 0.1, 0.2 and 0.6 to 0.65 s


def test_token_timings_itl_cdf_is_built_beside_summary_and_drawn_as_built_from_the_records(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Summary starts Token timing's ITL CDF in its worker thread after the report (0.1 s of Token timing's run on
    1.2 million gaps); Token timing draws that series, which is the one its records give, and builds none itself."""
    import threading

    import numpy as np

    from servebench.output.figures import tokens as token_figs
    from servebench.output.figures import vegalite
    from servebench.records.loaders import read_bytes
    from servebench.records.window_zoom import full_table

    rng = np.random.default_rng(36)
    recs = []
    for i in range(40):
        times = (i + 0.2 + np.cumsum(rng.random(int(rng.integers(2, 9))) / 10)).tolist()
        recs.append({"start": i, "first_token": times[0], "end": times[-1] + 0.01, "status": "success",
                     "output_tokens": len(times), "token_times": times})
    data = json.dumps(recs).encode()
    built_in: list[str] = []
    itl_series = token_figs.itl_series

    def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
        built_in.append(threading.current_thread().name)
        return itl_series(*args, **kwargs)

    monkeypatch.setattr(token_figs, "itl_series", counted)
    at = _app()
    at.file_uploader(key="records_upload").set_value(("itl_beside.json", data, "application/json")).run()
    assert not at.exception and not at.error
    at.switch_page("pages/token_timing.py").run()
    assert not at.exception and not at.error
    assert len(built_in) == 1 and built_in[0].startswith("report-beside")  # in Summary's worker, not the page
    spec, frames = next(c for c in drawn_list(at) if c[0]["title"]["text"].startswith("ITL"))
    table = full_table(read_bytes(data, "itl_beside.json"))
    expected = itl_series(table, max_points=vegalite.LINE_POINTS)
    assert expected is not None
    cdf = frames["cdf"]
    assert cdf["x"].tolist() == pytest.approx((1000 * expected.x).tolist())  # every gap's step, in ms
    assert cdf["share"].tolist() == pytest.approx(expected.y.tolist()) and expected.n == 130


def test_aiperf_token_times_are_carried_over_with_the_servers_token_counts() -> None:
    """AIPerf's inter_chunk_latency fits only the server's token counts: the CLI's --format aiperf:tokens=server is
    an Import option, and Token timing offers it where it would otherwise show no inter-token latency."""
    at = _app()
    data = (IMPORTER_DATA / "aiperf-0.13.0-clean-icl.jsonl").read_bytes()  # with its inter_chunk_latency lists
    at.file_uploader(key="records_upload").set_value(("profile_export.jsonl", data, "application/jsonl")).run()
    assert not at.exception and not at.error
    notes = " ".join(w.value for w in at.warning)
    assert "'Count the server's output tokens' under Import options" in notes and "--format" not in notes
    at.switch_page("pages/token_timing.py").run()
    assert not at.exception and not at.error
    assert "ITL p50 (ms)" not in _metrics(at)
    assert any("Count the server's output tokens" in i.value for i in at.info)
    at.button(key="tok_server_tokens").click().run()  # the page's button turns the sidebar's option on
    assert not at.exception and not at.error
    def toggle():
        return next(t for t in at.toggle if t.label == "Count the server's output tokens")

    assert toggle().value is True
    m = _metrics(at)
    assert float(m["ITL p50 (ms)"]) == pytest.approx(15, abs=3)  # the mock server's 15 ms, in ms by default
    toggle().set_value(False).run()  # off again: the client's counts, no token times
    assert not at.exception and "ITL p50 (ms)" not in _metrics(at)
    toggle().set_value(True).run()
    at.switch_page("pages/summary.py").run()  # the option holds on every page: the server's output tokens
    assert not at.exception and not at.error
    assert any("tokens=server" in w.value for w in at.warning)


def test_import_options_drop_cooldown_and_override_the_format() -> None:
    at = _app()
    data = (IMPORTER_DATA / "guidellm-0.8.1-errors.json").read_bytes()
    at.file_uploader(key="records_upload").set_value(("guidellm-0.8.1-errors.json", data, "application/json")).run()
    assert not at.exception and not at.error
    assert _metrics(at)["Requests"] == "41"  # every listed request, the cooldown one marked
    next(t for t in at.toggle if t.label.startswith("Leave out warm-up")).set_value(True).run()
    assert not at.exception and not at.error
    assert _metrics(at)["Requests"] == "40"  # GuideLLM's own request_totals: 30 + 7 + 3
    next(s for s in at.selectbox if s.label == "Read as").set_value("vllm").run()
    assert not at.exception
    assert "does not look like a vLLM" in at.error[0].value


def test_window_is_a_zoom_that_keeps_the_records_inside_and_says_what_it_left_out() -> None:
    at = _app()
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    _number(at, "Window end (s)").set_value(5.0)
    at.run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert m["Requests"] == "3"  # R3 ends at 7, past the window: left out, the rest still on the page
    assert m["Successful requests/s"] == "0.4"  # 2 successes over the 5 s window
    (note,) = [i.value for i in at.info if "left out" in i.value]
    assert "keeps 3 of 4 records" in note and "1 ended after its end" in note
    assert at.query_params["we"] == "5.0"  # the zoom is in the URL


def test_epoch_windows_read_as_seconds_from_the_first_request_and_a_file_without_times_says_so() -> None:
    """GuideLLM's window read '1795947574.931 to 1795947585.040 s'; llmperf's, which has no times, a made-up
    'window 0 to 1.3773 s'."""
    at = _app()
    data = (IMPORTER_DATA / "guidellm-0.8.1-errors.json").read_bytes()
    at.file_uploader(key="records_upload").set_value(("guidellm.json", data, "application/json")).run()
    assert not at.exception and not at.error
    assert _number(at, "Window start (s)").value == 0.0
    assert _number(at, "Window end (s)").value == pytest.approx(10.1084, abs=1e-4)
    captions = " ".join(c.value for c in at.caption)
    assert "window 0 to 10.108 s from the first request (sent 2026-11-29 10:19:34.931 UTC)" in captions
    assert "The first of 41 requests was sent at 2026-11-29 10:19:34.931 UTC" in captions
    assert "1795947574.931 to" not in captions  # the epoch appears once, as the clock's origin, never as a window
    _number(at, "Window end (s)").set_value(5.0).run()  # five seconds after the first request
    assert not at.exception and not at.error
    assert float(at.query_params["we"]) == pytest.approx(1795947574.930873 + 5.0)  # the URL keeps the file's clock
    assert "window 0 to 5 s from the first request" in " ".join(c.value for c in at.caption)
    assert int(_metrics(at)["Requests"]) < 41
    at.switch_page("pages/diagnosis.py").run()
    at.radio(key="diag_mode").set_value("Diagnose the records in use").run()
    assert "window 0 to 5 s from the first request" in " ".join(c.value for c in at.caption)
    data = (IMPORTER_DATA / "llmperf-individual.json").read_bytes()
    at.file_uploader(key="records_upload").set_value(("llmperf.json", data, "application/json")).run()
    at.switch_page("pages/summary.py").run()
    assert not at.exception and not at.error
    assert not [n for n in at.number_input if n.label.startswith("Window")]  # nothing to choose
    captions = " ".join(c.value for c in at.caption)
    assert "no window: the file has no timestamps on one clock (each request is on its own, from 0 s)" in captions
    assert "1.3773" not in captions and _metrics(at)["Requests"] == "40"


def test_bad_upload_keeps_the_last_good_records_and_removing_it_returns_to_them() -> None:
    at = _app()
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    bad = b"start,end,status,first_token,output_tokens\n0,1,success,0.5,9.0\n2,1,timeout,,\n0,1,sucess,,\n"
    at.file_uploader(key="records_upload").set_value(("bad.csv", bad, "text/csv")).run()
    assert not at.exception
    (err,) = at.error
    assert "3 bad rows" in err.value  # every bad row listed, so one pass fixes them all
    assert "row 2, field 'end'" in err.value and "row 3, field 'status'" in err.value
    assert any("Still showing **r1_r4.json**" in i.value for i in at.info)
    assert _metrics(at)["Requests"] == "4"  # the previous good record set stays on screen
    at.file_uploader(key="records_upload").set_value([]).run()  # the file removed with its x
    assert not at.exception and not at.error
    assert _metrics(at)["Requests"] == "4"
    assert not any("Still showing" in i.value for i in at.info)


def test_outcomes_add_up_to_offered() -> None:
    at = _app()
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    _number(at, "Window end (s)").set_value(10.0)
    at.run()
    m = _metrics(at)
    parts = ("Completed", "Failed", "Timed out", "Cancelled", "Rejected")
    assert sum(int(m[p]) for p in parts) == int(m["Offered"]) == 4
    assert m["Accepted"] == "3"
    # the overview's picture: the same counts as one bar, each outcome a part of it
    bar = next(md.value for md in at.markdown if "Every request by outcome (4 offered)" in md.value)
    parts_drawn = re.findall(r"<title>([^<]+): ([\d,]+)</title>", bar)
    assert {p: int(n.replace(",", "")) for p, n in parts_drawn} == {p: int(m[p]) for p in parts if int(m[p])}
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="40" width="([\d.]+)"', bar)]
    assert sum(widths) == pytest.approx(520 - 48 - 30, abs=0.05)  # the parts fill the bar: they add up to offered


def test_query_params_reproduce_the_view() -> None:
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update(run="r1_r4.json", ws="0", we="10", slo_ttft="0.4")
    at.run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert m["Requests"] == "4" and m["Successful requests/s"] == "0.2"  # the window 0-10 from the URL
    assert m["SLO attainment"] == "25%"  # a link from when the limits took seconds: slo_ttft=0.4 is 400 ms
    assert _number(at, "TTFT limit (ms)").value == 400.0
    _number(at, "Latency limit (s)").set_value(3.0).run()
    assert at.query_params["slo_latency"] == "3" and at.query_params["slo_ttft_ms"] == "400"
    assert "slo_ttft" not in at.query_params  # the link is rewritten in ms


def test_an_slo_in_ms_from_the_url_is_kept_to_the_digit() -> None:
    at = AppTest.from_file(APP, default_timeout=90)
    at.query_params.update(run="r1_r4.json", ws="0", we="10", slo_ttft_ms="250.125", slo_tpot_ms="-5")
    at.run()
    assert not at.exception and not at.error
    assert _number(at, "TTFT limit (ms)").value == 250.125
    assert _number(at, "Request TPOT limit (ms)").value is None  # not above zero: no limit
    assert _metrics(at)["SLO attainment"] == "25%"  # R2's TTFT, 250 ms, meets 250.125 ms
    assert at.query_params["slo_ttft_ms"] == "250.125" and "slo_tpot_ms" not in at.query_params


def test_upload_replaces_the_records_on_every_page() -> None:
    at = _app()
    data = b'{"start": 0, "end": 2, "status": "timeout"}\n{"start": 1, "first_token": 1.5, "end": 3, ' \
           b'"status": "success", "output_tokens": 5}\n'
    at.file_uploader(key="records_upload").set_value(("mine.jsonl", data, "application/jsonl")).run()
    assert _metrics(at)["Requests"] == "2"
    assert at.selectbox(key="records_sample").value is None  # the sample picker no longer claims a sample
    at.switch_page("pages/percentiles.py").run()
    assert not at.exception
    assert _metrics(at)["Records counted"] == "1 of 2"
    at.switch_page("pages/summary.py").run()
    at.selectbox(key="records_sample").select("requests_sample.csv").run()
    assert _metrics(at)["Requests"] == "3,000"


def test_extra_columns_are_noted_once_and_break_the_summary_down() -> None:
    at = _app()
    data = ("request_id,start,first_token,end,status,output_tokens,error,gpu,first_tokn\n"
            "a,0,0.5,1,success,3,,A100,\n"
            "a,1,,2,failed,,boom\u202e[x],H100\x1b[31m,1.5\n"
            "c,2,2.5,3,success,2,,A100,\n").encode()
    at.file_uploader(key="records_upload").set_value(("export.csv", data, "text/csv")).run()
    assert not at.exception and not at.error
    (note,) = [i.value for i in at.info if "schema does not know" in i.value]
    assert "'gpu'" in note and "did you mean 'first_token'" in note
    box = next(s for s in at.selectbox if s.label == "Break down by")
    assert list(box.options) == ["slice", "gpu", "first_tokn"]
    box.set_value("gpu").run()
    assert not at.exception and not at.error
    assert "Slices by gpu" in [h.value for h in at.subheader]
    slices = next(d for d in _tables(at) if "Slice" in d.columns)
    assert sorted(slices["Slice"]) == ["A100", "H100\\x1b[31m"]  # the escape shown, not sent to the page
    causes = next(d for d in _tables(at) if "cause" in d.columns)
    assert list(causes["cause"]) == ["boom<U+202E>[x]"]
    shown = [e.value for e in (*at.markdown, *at.caption, *at.warning, *at.info, *at.subheader)]
    assert not [s for s in shown if any(ch in str(s) for ch in "\x1b\u202e")]


def test_percentile_explorer_any_percentile_and_failure_aware() -> None:
    at = _app()
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    at.switch_page("pages/percentiles.py").run()
    assert not at.exception
    assert _metrics(at)["p95 (success-only, ms)"] == "2,500"  # milliseconds by default
    assert at.selectbox(key="metric").options[:3] == ["Latency", "TTFT", "Request TPOT"]  # not 'Latency (s)' in ms
    at.segmented_control(key="unit").set_value("s").run()
    m = _metrics(at)
    assert m["p95 (success-only, s)"] == "2.5"
    assert m["Records counted"] == "2 of 4"
    at.number_input(key="q_input").set_value(99.9).run()
    assert at.slider(key="q_slider").value == pytest.approx(99.9)
    assert "p99.9 (success-only, s)" in _metrics(at)
    at.number_input(key="q_input").set_value(40.0)
    at.radio(key="view").set_value("failure-aware").run()
    m = _metrics(at)
    assert m["p40 (failure-aware, s)"] == "2.5"  # rank 2 of latencies [0.25, 2.5, inf, inf]
    assert m["Records counted"] == "4 of 4"
    at.radio(key="view").set_value("failure-aware")
    at.number_input(key="q_input").set_value(75.0).run()
    assert _metrics(at)["p75 (failure-aware, s)"] == "∞"
    at.selectbox(key="metric").select("queue_wait").run()
    assert not at.exception
    assert at.info  # R1-R4 has no admitted times


def test_summary_downloads_are_offered_once_their_panel_is_opened() -> None:
    """The first view draws no download button; the panel, opened, offers the records and the report as files."""
    at = _app()
    assert not at.get("download_button")
    at.session_state["downloads_open"] = True
    at.run()
    assert not at.exception
    names = [b.proto.label for b in at.get("download_button")]
    assert names == ["Records (CSV)", "Records (Parquet)", "Records (JSONL)", "Report (JSON)", "Report site (ZIP)"]


def test_summary_over_time_is_vega_lite_in_the_unit_with_the_bins_numbers() -> None:
    from servebench.output.figures.over_time import over_time_bins
    from servebench.records.loaders import load_table

    at = _app()
    at.segmented_control(key="unit").set_value("ms").run()
    at.session_state["over_time_open"] = True
    at.run()
    assert not at.exception and not at.get("plotly_chart")
    charts = drawn_charts(at)
    lines = charts["Latency (ms) of the successes ending in each bin"][1]["lines"]
    table, ws, we = load_table(REPO / "sample_data" / "requests_sample.csv")
    bins = over_time_bins(table, ws, we)
    p95 = lines[lines["series"] == "p95"].sort_values("x")["y"]
    assert p95.tolist() == pytest.approx([None if v is None else 1000 * v for v in bins.percentiles_s["latency"][95]])
    bars = charts[f"Successful requests/s (60 bins of {bins.width_s:.3g} s)"][1]["bins"]
    assert bars["y"].tolist() == pytest.approx(bins.successes_per_s.tolist())


def test_a_file_of_several_runs_draws_its_rate_curve_as_vega_lite() -> None:
    import copy
    import json

    doc = json.loads((IMPORTER_DATA / "guidellm-0.8.1-errors.json").read_text())
    second = copy.deepcopy(doc["benchmarks"][0])
    second["config"]["strategy"]["rate"] = 8.0
    doc["benchmarks"].append(second)
    at = _app()
    at.file_uploader(key="records_upload").set_value(("two.json", json.dumps(doc).encode(), "application/json")).run()
    assert not at.exception and not at.error and not at.get("plotly_chart")
    charts = drawn_charts(at)
    rate = charts["Successful requests/s"][1]["lines"]
    assert rate["x"].tolist() == [4.0, 8.0]
    assert set(charts["p95 latency and TTFT (s)"][1]["lines"]["series"]) == {"latency p95 (s)", "TTFT p95 (s)"}


def test_percentile_explorer_records_grid_shows_what_the_metric_is_computed_from() -> None:
    """The records grid fits the page: the value, who, how it ended and the metric's own fields; the CSV has all."""
    at = _app()
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    at.switch_page("pages/percentiles.py").run()
    at.session_state["pct_records_open"] = True
    at.run()
    assert not at.exception
    assert list(at.dataframe[0].value.columns) == ["Latency (ms)", "request_id", "status", "slice", "start", "end"]
    at.selectbox(key="metric").select("ttft")
    at.radio(key="view").set_value("failure-aware").run()
    grid = at.dataframe[0].value
    assert list(grid.columns)[1:] == ["request_id", "status", "slice", "start", "first_token", "error"]
    assert len(grid) == 4  # failures counted too
    (download,) = [b for b in at.get("download_button") if "every field" in b.proto.label]
    assert "All 4 records counted" in download.proto.label


def test_percentile_explorer_slices() -> None:
    at = _app()
    at.switch_page("pages/percentiles.py").run()
    at.selectbox(key="slice").select("review").run()
    assert not at.exception
    from servebench.records.loaders import load_table
    sample, _, _ = load_table(REPO / "sample_data" / "requests_sample.csv")
    review = sample.take(sample.slice == "review")
    # the review slice's successes, out of all its requests
    assert _metrics(at)["Records counted"] == f"{int(review.is_success.sum()):,} of {len(review):,}"


def test_kv_calculator_names_the_tensor_parallelism_that_fits_the_weights() -> None:
    at = _app()
    at.switch_page("pages/kv.py").run()
    at.selectbox(key="preset").select("llama-3.1-70b").run()
    at.radio(key="budget_how").set_value("From GPU memory").run()
    assert not at.exception
    text = at.error[0].value
    assert "no memory left for the KV cache: 80.0 GiB x 90% usable = 72.0 GiB" in text
    assert "Fix: raise tensor parallelism to 2" in text  # the page's own setting, as `servebench kv` says
    at.number_input(key="tp").set_value(2).run()
    assert not at.exception and not at.error


def test_kv_calculator_profile_b_allows_8_sequences() -> None:
    at = _app()
    at.switch_page("pages/kv.py").run()
    assert not at.exception
    assert at.success[0].value == ("**8 sequences fit: each request holds 8,000 tokens of KV (0.9766 GiB), and "
                                   "8 GiB holds 65,536 tokens.**")  # one input (the request), one answer
    assert not any(n.label.startswith("Tokens of one sequence") for n in at.number_input)
    m = _metrics(at)  # the numbers behind the answer, in a panel
    assert m["KV bytes per token"] == "131,072"
    assert m["KV per request"] == "0.9766 GiB"
    assert m["Tokens in the budget"] == "65,536"
    assert m["Tokens per request"] == "8,000"
    assert m["Max concurrent sequences"] == "8"
    assert m["Average in service"] == "7.369"  # 1/s x (1.2 + 199 x 0.031)
    _number(at, "Prompt tokens").set_value(1000)
    at.run()
    assert _metrics(at)["Max concurrent sequences"] == "54"  # profile A
    (spec, data), = drawn_charts(at).values()  # Vega-Lite: a link straight to this page never loads plotly.js
    assert not at.get("plotly_chart")
    assert spec["layer"][0]["encoding"]["y"]["scale"]["type"] == "log"
    assert data["here"].to_dict("records") == [{"x": 1000, "y": 54, "label": "54 at 1,000 tokens"}]


def test_no_page_turns_ms_into_seconds_by_dividing_by_1000() -> None:
    """A time typed in ms reaches the library through wording.ms_to_s, defined once and exact: 31.1 ms / 1000 is
    0.031100000000000003 where ms_to_s gives 0.0311 (the planner, Traces and KV pages divided by 1000)."""
    import ast

    divisions = [f"{page.name}:{node.lineno}" for page in sorted((REPO / "pages").glob("*.py"))
                 for node in ast.walk(ast.parse(page.read_text()))
                 if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
                 and isinstance(node.right, ast.Constant) and node.right.value in (1000, 1e3)]
    assert divisions == []


def test_kv_calculator_budget_from_gpu_memory_and_config() -> None:
    at = _app()
    at.switch_page("pages/kv.py").run()
    at.radio(key="budget_how").set_value("From GPU memory").run()
    assert not at.exception and not at.error
    at.radio(key="shape_from").set_value("config.json").run()
    at.file_uploader(key="config_upload").set_value(("config.json", b"{not json", "application/json")).run()
    assert not at.exception
    assert "config.json: not a JSON config" in at.error[0].value


def test_diagnosis_profile_table_names_kv_memory_for_b() -> None:
    at = _app()
    at.switch_page("pages/diagnosis.py").run()
    at.radio(key="diag_mode").set_value("Diagnose a profile table").run()
    assert not at.exception and not at.error
    # the limit in words; its key (`kv_memory`) shows in the engineer view only
    assert any("Profile B: KV memory**" in w.value for w in at.warning)
    assert any("Profile A: Nothing limits it**" in s.value for s in at.success)
    values = [m.value for m in at.metric if m.label == "Max concurrent sequences"]
    assert values == ["54", "8"]


def test_diagnosis_of_records_without_admitted_times_says_what_it_cannot_tell() -> None:
    at = _app()
    at.switch_page("pages/diagnosis.py").run()
    at.radio(key="diag_mode").set_value("Diagnose the records in use").run()
    assert not at.exception and not at.error
    assert at.warning or at.success  # a verdict for the sample
    at.selectbox(key="records_sample").select("r1_r4.json").run()
    assert not at.exception and not at.error
    assert any("no admitted times" in i.value for i in at.info)  # the verdict the data supports, and its gaps


def test_diagnosis_of_the_sample_leads_with_one_consistent_headline() -> None:
    """The verdict was Decode while the page said 'decode binds first at about 1.47 req/s (1.44x the measured
    rate)'; under 'cannot tell' it still said 'decode first at 9.685 req/s' from 41 mock requests."""
    at = _app()
    at.switch_page("pages/diagnosis.py").run()
    at.radio(key="diag_mode").set_value("Diagnose the records in use").run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert (m["Measured load (requests/s)"], m["Capacity (requests/s)"], m["Limit that binds"]) == \
        ("1.021", "≤ 0.9168", "Decode")
    head = at.warning[0].value
    assert "Measured at 1.02 requests/s, it completed 0.917/s (10% not successful" in head
    assert "decode binds at this load" in head
    said = " ".join(x.value for x in at.markdown)
    assert "**Decode** binds at the measured load" in said and "1.44" not in said  # the limit in words
    data = (IMPORTER_DATA / "guidellm-0.8.1-errors.json").read_bytes()
    at.file_uploader(key="records_upload").set_value(("guidellm-0.8.1-errors.json", data, "application/json")).run()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert (m["Measured load (requests/s)"], m["Capacity (requests/s)"], m["Limit that binds"]) == ("4", "—", "—")
    said = " ".join(x.value for x in [*at.markdown, *at.info, *at.warning])
    assert "(none estimated from this data)" in said and "9.685" not in said and "first." not in said
    assert "None" not in said
    data = (IMPORTER_DATA / "llmperf-individual.json").read_bytes()  # every request on its own clock
    at.file_uploader(key="records_upload").set_value(("llmperf-individual.json", data, "application/json")).run()
    assert not at.exception and not at.error
    assert _metrics(at)["Measured load (requests/s)"] == "—"
    assert any("no timestamps on one clock" in i.value for i in at.info)


def test_diagnosis_walkthrough_asks_then_reveals_and_scores() -> None:
    at = _app()
    at.switch_page("pages/diagnosis.py").run()
    assert not at.exception
    assert [s.value for s in at.subheader] == ["Step 1: What to measure"]  # one step at a time
    at.button(key="wt_reveal_1").click().run()
    at.number_input(key="wt_max_concurrent_sequences[B]").set_value(8)
    at.number_input(key="wt_tokens_per_request[B]").set_value(7800)  # forgot the output cap
    at.button(key="wt_reveal_2").click().run()
    assert not at.exception
    scores = _tables(at)[-1].set_index("answer")  # a Markdown table: a grid cut the answers off at 1,400 px
    assert scores.loc["B: maximum concurrent sequences", "within tolerance"] == "yes"
    assert scores.loc["B: tokens reserved per request", "computed"] == "8,000"
    assert scores.loc["B: tokens reserved per request", "off by"] == "-200"
    assert scores.loc["B: tokens reserved per request", "how close"] == "200 tokens low (2.5%)"
    assert scores.loc["B: tokens reserved per request", "tolerance"] == "exact"
    assert scores.loc["A: maximum concurrent sequences", "your prediction"] == "—"
    for n in (3, 4, 5):
        at.button(key=f"wt_reveal_{n}").click().run()
    assert not at.exception
    assert any("All five steps revealed" in s.value for s in at.success)
    assert any("Profile B: KV memory**" in w.value for w in at.warning)


def test_load_sweep_runs_with_progress_and_marks_capacity() -> None:
    at = _app()
    at.switch_page("pages/sweep.py").run()
    assert not at.exception and not at.error
    at.text_input(key="loads").set_value("0.5, 1, 1.5")
    at.number_input(key="sweep_requests").set_value(100)
    at.button(key="run_sweep").click().run()
    assert not at.exception and not at.error
    assert [p.value for p in at.get("progress")] == [100]
    m = _metrics(at)
    assert m["KV budget (tokens)"] == "65,536"
    assert m["Usable capacity"].endswith("req/s") and m["Usable capacity"] != "— req/s"
    charts = drawn_charts(at)  # Vega-Lite, not plotly: latency, TTFT, outcomes, the engine over time (two)
    assert not at.get("plotly_chart") and len(charts) == 5
    latency = next(data["lines"] for title, (_, data) in charts.items() if title.endswith("Latency against offered load"))
    assert {0.5, 1.0, 1.5} <= set(latency["x"])  # the grid's loads, and those the capacity search added
    marks = {v["label"].split()[0] for spec, _ in charts.values() for layer in spec["layer"]
             for v in layer["data"].get("values", []) if "label" in v}
    assert {"capacity", "knee", "SLO", "budget"} <= marks
    at.selectbox(key="sweep_sample").select("profile_a.yaml").run()
    assert not at.exception
    assert "settings changed" in at.warning[0].value


def test_report_site_zip_for_the_records_on_screen() -> None:
    import io
    import sys
    import zipfile

    sys.path.insert(0, str(REPO))
    from pages._shared import Dataset, RecordSource, site_zip
    from servebench.records.loaders import read_bytes, to_table

    src = RecordSource.of("r1_r4.json", (REPO / "sample_data" / "r1_r4.json").read_bytes(), "sample")
    loaded = read_bytes(src.data, src.name)
    table, ws, we = to_table(loaded, 0, 10)
    names = zipfile.ZipFile(io.BytesIO(site_zip(Dataset(src, loaded, table, ws, we), None))).namelist()
    assert "servebench-report/index.html" in names
    assert "servebench-report/assets/plotly.min.js" in names


def test_load_sweep_bad_step_trace_names_file_and_line() -> None:
    at = _app()
    at.switch_page("pages/sweep.py").run()
    at.radio(key="step_how:profile_b").set_value("fitted from a timing run").run()
    assert not at.exception
    bad = b'{"duration": 0.01, "prefill_tokens": 0, "decode_seqs": 1, "kv_tokens_read": 10}\n{"duration": \n'
    at.file_uploader(key="trace_upload").set_value(("steps.jsonl", bad, "application/jsonl")).run()
    assert not at.exception
    assert "steps.jsonl: line 2: invalid JSON" in at.error[0].value


def _finish_timing_run(at: AppTest, timeout_s: float = 120) -> None:
    """Wait for the timing run started on its own thread, then rerun the page, which opens its records."""
    assert not at.exception and not at.error
    assert at.session_state["timing_run_job"].wait(timeout_s)
    at.run()


@pytest.mark.slow
def test_timing_run_shows_device_then_opens_its_records_on_summary() -> None:
    at = _app()
    at.switch_page("pages/timing_run.py").run()
    assert not at.exception and not at.error
    assert "Runs on **" in at.info[0].value  # the device, before anything starts
    at.number_input(key="run_requests:tiny_cpu").set_value(12)
    at.button(key="run_start").click().run()
    _finish_timing_run(at)
    assert not at.exception and not at.error
    assert at.title[0].value == "Summary"
    assert any("Timing run of **tiny**" in s.value for s in at.success)
    assert _metrics(at)["Requests"] == "12"
    at.switch_page("pages/sweep.py").run()
    at.radio(key="step_how:profile_b").set_value("fitted from a timing run").run()
    assert not at.exception
    if at.error:  # a 12-request run on a busy machine can fit too poorly: the page refuses, then offers the override
        assert "This step model fits poorly" in at.error[0].value
        at.checkbox(key="allow_poor_fit").check().run()
        assert not at.exception
    assert int(_metrics(at)["Steps fitted"].replace(",", "")) > 0


# --- local by default: shared mode (server.address beyond loopback) -------------------------------------------

SHARED = {"server.address": "0.0.0.0"}


def _buttons(at: AppTest) -> set[str]:
    return {b.key for b in at.button if b.key}


def test_local_dashboard_shows_no_sharing_banner() -> None:
    from streamlit.testing.v1.util import patch_config_options

    with patch_config_options({"server.address": "127.0.0.1"}):
        at = _app()
        assert not any("Shared on the network" in w.value for w in at.warning)


def test_shared_dashboard_shows_the_banner(monkeypatch: pytest.MonkeyPatch) -> None:
    """app.py draws the banner above whichever page runs (AppTest reruns and switch_page run a page without app.py,
    so each case here starts a fresh app)."""
    from streamlit.testing.v1.util import patch_config_options

    monkeypatch.delenv("SERVEBENCH_ALLOW_REMOTE_WORK", raising=False)
    with patch_config_options(SHARED):
        at = _app()
        banner = at.warning[0].value
        assert banner.startswith("**Shared on the network** (listening on 0.0.0.0)")
        assert "timing runs and long sweeps stay off unless it is started with SERVEBENCH_ALLOW_REMOTE_WORK=1" in banner
        assert at.title[0].value == "Summary"
        monkeypatch.setenv("SERVEBENCH_ALLOW_REMOTE_WORK", "1")
        at = _app()
        assert "remote users may start timing runs and long sweeps here" in at.warning[0].value


def test_shared_timing_run_needs_the_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1.util import patch_config_options

    monkeypatch.delenv("SERVEBENCH_ALLOW_REMOTE_WORK", raising=False)
    with patch_config_options(SHARED):
        at = _app()
        at.switch_page("pages/timing_run.py").run()
        assert not at.exception and not at.error
        assert "run_start" not in _buttons(at)
        assert any("SERVEBENCH_ALLOW_REMOTE_WORK=1" in w.value and "a timing run does not start" in w.value
                   for w in at.warning)
        monkeypatch.setenv("SERVEBENCH_ALLOW_REMOTE_WORK", "1")
        at.run()
        assert not at.exception and not at.error
        assert "run_start" in _buttons(at)
        assert not any("does not start" in w.value for w in at.warning)


@pytest.mark.slow
def test_shared_timing_run_with_the_opt_in_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1.util import patch_config_options

    monkeypatch.setenv("SERVEBENCH_ALLOW_REMOTE_WORK", "1")
    with patch_config_options(SHARED):
        at = _app()
        at.switch_page("pages/timing_run.py").run()
        at.number_input(key="run_requests:tiny_cpu").set_value(4)
        at.button(key="run_start").click().run()
        _finish_timing_run(at)
        assert not at.exception and not at.error
        assert at.title[0].value == "Summary" and _metrics(at)["Requests"] == "4"


def test_shared_long_sweep_needs_the_opt_in_and_a_short_one_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1.util import patch_config_options

    monkeypatch.delenv("SERVEBENCH_ALLOW_REMOTE_WORK", raising=False)
    with patch_config_options(SHARED):
        at = _app()
        at.switch_page("pages/sweep.py").run()
        assert "run_sweep" in _buttons(at)  # the default sweep (7 loads x 300 requests) is short
        at.number_input(key="sweep_requests").set_value(20_000).run()
        assert not at.exception and not at.error
        assert "run_sweep" not in _buttons(at)
        assert any("simulated requests (more than 50,000) does not start" in w.value for w in at.warning)
        at.number_input(key="sweep_requests").set_value(100)
        at.text_input(key="loads").set_value("0.5, 1")
        at.run()
        at.button(key="run_sweep").click().run()
        assert not at.exception and not at.error
        assert "Usable capacity" in _metrics(at)
        monkeypatch.setenv("SERVEBENCH_ALLOW_REMOTE_WORK", "1")
        at.number_input(key="sweep_requests").set_value(20_000).run()
        assert "run_sweep" in _buttons(at)


def test_upload_over_the_limit_names_the_limit_and_keeps_the_records(monkeypatch: pytest.MonkeyPatch) -> None:
    from streamlit.testing.v1.util import patch_config_options

    with patch_config_options({"server.maxUploadSize": 1}):  # 1 MB, so the test file stays small
        at = _app()
        big = b"start,end,status\n" + b"0,1,timeout\n" * 100_000  # 1.1 MB
        at.file_uploader(key="records_upload").set_value(("big.csv", big, "text/csv")).run()
        assert not at.exception
        (err,) = at.error
        assert err.value.startswith("big.csv is 1.1 MB: the dashboard takes uploads up to 1 MB (server.maxUploadSize).")
        assert _metrics(at)["Requests"] == "3,000"  # the sample stays on screen
        at.switch_page("pages/timing_run.py").run()
        at.file_uploader(key="run_upload").set_value(("big.yaml", big, "application/yaml")).run()
        assert not at.exception
        assert "big.yaml is 1.1 MB" in at.error[0].value


def test_a_bad_scenario_upload_says_why_on_every_page_that_takes_one() -> None:
    at = _app()
    for page, how, key in (("pages/timing_run.py", None, "run_upload"),
                           ("pages/planner.py", ("plan_traffic_how", "A scenario's mix"), "plan_upload"),
                           ("pages/sweep.py", None, "scenario_upload")):
        at.switch_page(page).run()
        if how is not None:
            at.radio(key=how[0]).set_value(how[1]).run()
        at.file_uploader(key=key).set_value(("list.yaml", b"- 1\n- 2\n", "application/yaml")).run()
        assert not at.exception
        assert at.error[0].value.startswith("list.yaml: a scenario must be a mapping, got list"), page
        at.file_uploader(key=key).set_value(None).run()


def test_several_uploads_are_held_and_compared_side_by_side() -> None:
    at = _app()
    a = (REPO / "sample_data" / "r1_r4.json").read_bytes()
    b = b'{"start": 0, "end": 2, "status": "timeout"}\n{"start": 1, "first_token": 1.5, "end": 3, ' \
        b'"status": "success", "output_tokens": 5}\n'
    at.file_uploader(key="records_upload").set_value([("r1_r4.json", a, "application/json"),
                                                      ("mine.jsonl", b, "application/jsonl")]).run()
    assert not at.exception and not at.error
    assert _metrics(at)["Requests"] == "2"  # the newest upload is on screen
    at.switch_page("pages/compare.py").run()
    assert not at.exception and not at.error
    assert not at.dataframe  # Markdown tables: no grid for the browser to load and draw
    contract = _tables(at)[0].set_index("field")
    # the sample opened on the first visit is not part of it: the uploads are compared, the first is the baseline
    assert list(contract.columns) == ["r1_r4.json", "mine.jsonl", "Δ mine.jsonl"]
    assert contract.loc["Requests", "r1_r4.json"] == "4" and contract.loc["Requests", "mine.jsonl"] == "2"
    assert contract.loc["Requests", "Δ mine.jsonl"] == "-2 (-50%)"
    assert contract.loc["Non-success fraction", "r1_r4.json"] == "50%"  # a share reads as Summary writes it
    # times in ms by default, the tables' as the charts' (the contract read 2.5 in s above charts in ms)
    assert contract.loc["Latency p95 (ms)", "r1_r4.json"] == "2,500"
    assert "baseline (ms)" in next(t for t in _tables(at) if "95% intervals" in t.columns).columns
    outcomes = next(t for t in _tables(at) if "Offered" in t.columns).set_index("run")
    statuses = ["Completed", "Failed", "Timed out", "Cancelled", "Rejected"]
    counts = outcomes[[*statuses, "Offered"]].map(lambda v: int(v.replace(",", "")))
    assert (counts[statuses].sum(axis=1) == counts["Offered"]).all()
    assert list(counts.index) == ["r1_r4.json", "mine.jsonl"] and counts.loc["mine.jsonl", "Timed out"] == 1
    assert not drawn_charts(at)  # the charts are drawn once their panel is opened: the tables come first
    at.session_state["compare_charts_open"] = True
    at.run()
    assert not at.exception and not at.error
    charts = drawn_charts(at)
    curves = charts["Latency CDF (successes)"][1]["curves"]
    assert list(curves.groupby("run", sort=False)["share"].last().index) == ["r1_r4.json (n=2)", "mine.jsonl (n=1)"]
    # the user picks the baseline: every difference turns around
    next(s for s in at.selectbox if s.label == "Baseline").select_index(1).run()
    assert not at.exception and not at.error
    contract = _tables(at)[0].set_index("field")
    assert list(contract.columns) == ["mine.jsonl", "r1_r4.json", "Δ r1_r4.json"]
    assert contract.loc["Requests", "Δ r1_r4.json"] == "+2 (+100%)"
    assert set(next(t for t in _tables(at) if "95% intervals" in t.columns)["run"]) == {"r1_r4.json"}
    # the sample comes back only when asked for
    at.checkbox(key="compare_samples").check().run()
    assert not at.exception and not at.error
    contract = _tables(at)[0].set_index("field")
    assert list(contract.columns)[:3] == ["mine.jsonl", "r1_r4.json", "requests_sample.csv"]  # the baseline kept
    assert contract.loc["Requests", "requests_sample.csv"] == "3,000"
    assert contract.loc["Requests", "Δ requests_sample.csv"] == "+2,998 (+149,900%)"
    next(s for s in at.selectbox if s.label == "Baseline").select_index(0).run()  # back to r1_r4.json
    outcomes = next(t for t in _tables(at) if "Offered" in t.columns).set_index("run")
    counts = outcomes[[*statuses, "Offered"]].map(lambda v: int(v.replace(",", "")))
    assert counts.loc["requests_sample.csv", "Offered"] == 3000
    at.segmented_control(key="unit").set_value("s").run()  # milliseconds by default
    charts = drawn_charts(at)  # Vega-Lite, so the page never loads plotly.js
    assert not at.get("plotly_chart") and len(charts) == 6  # latency, TTFT, TPOT: overlaid CDFs, percentile bars
    curves = charts["Latency CDF (successes)"][1]["curves"]
    last = curves.groupby("run", sort=False)["share"].last()
    assert list(last.index) == ["r1_r4.json (n=2)", "mine.jsonl (n=1)", "requests_sample.csv (n=2,701)"]
    assert (last == 1.0).all() and (curves.groupby("run")["share"].first() == 0.0).all()
    mine = curves[curves["run"] == "mine.jsonl (n=1)"]
    assert list(zip(mine["x"], mine["share"])) == [(2.0, 0.0), (2.0, 1.0)]  # its one success took 2 s
    bars = charts["Latency: p50, p95, p99 per run"][1]["bars"].set_index(["run", "mark"])["value"]
    assert bars[("r1_r4.json", "p95")] == 2.5 and bars[("mine.jsonl", "p50")] == 2.0
    tpot = charts["Request TPOT: p50, p95, p99 per run"][1]["bars"].set_index(["run", "mark"])["value"]
    assert tpot[("mine.jsonl", "p50")] == 0.375  # (3 - 1.5) / (5 - 1)
    at.segmented_control(key="unit").set_value("ms").run()
    charts = drawn_charts(at)
    curves = charts["TTFT CDF (successes)"][1]["curves"]
    assert curves[curves["run"] == "mine.jsonl (n=1)"]["x"].tolist() == [500.0, 500.0]
    assert charts["TTFT CDF (successes)"][0]["encoding"]["x"]["title"] == "milliseconds"
    bars = charts["Latency: p50, p95, p99 per run"][1]["bars"].set_index(["run", "mark"])["value"]
    assert bars[("r1_r4.json", "p95")] == 2500.0


def test_summary_prefix_cache_tables_are_static_and_follow_the_unit() -> None:
    """Summary's small tables are static tables (no grid to load); the prefix cache's times follow the ms toggle."""
    import pandas as pd

    frame = pd.read_csv(REPO / "sample_data" / "requests_sample.csv").head(400)
    frame["cached_prompt_tokens"] = (frame["prompt_tokens"] // 2).where(frame.index % 2 == 0, 0)
    at = _app()
    at.file_uploader(key="records_upload").set_value(("cached.csv", frame.to_csv(index=False).encode(),
                                                      "text/csv")).run()
    assert not at.exception and not at.error
    assert not at.dataframe and not at.table  # every table on Summary is Markdown: no Arrow table component
    at.segmented_control(key="unit").set_value("s").run()  # milliseconds by default
    metrics = [t["metric"].iloc[0] for t in _tables(at) if "metric" in t.columns]
    assert metrics == ["TTFT with a hit (s)"]
    seconds = next(t for t in _tables(at) if "metric" in t.columns)
    at.segmented_control(key="unit").set_value("ms").run()
    ms = next(t for t in _tables(at) if "metric" in t.columns)
    assert list(ms["metric"]) == ["TTFT with a hit (ms)", "TTFT without a hit (ms)", "Prefill with a hit (ms)",
                                  "Prefill without a hit (ms)"]
    assert float(ms["max"].iloc[0].replace(",", "")) == pytest.approx(float(seconds["max"].iloc[0]) * 1000, rel=1e-3)
    assert "TTFT p50 with / without a hit (ms)" in _metrics(at)


NONE_WORD = re.compile(r"\bNone\b|\bnan\b|\bNaN\b")
RECORD_PAGES = ("summary.py", "percentiles.py", "token_timing.py", "diagnosis.py")


def _shown_text(at: AppTest) -> list[str]:
    """Return every text the page shows a person: Markdown, notes, metrics (with their help) and grid cells."""
    out = [str(e.value) for kind in ("markdown", "caption", "info", "warning", "success", "error", "title",
                                     "subheader", "header") for e in getattr(at, kind)]
    out += [f"{m.label} {m.value} {m.proto.help}" for m in at.metric]
    for grid in at.dataframe:
        frame = grid.value
        out += [str(v) for v in frame.to_numpy().ravel() if v is None or (isinstance(v, float) and v != v)]
        out += frame.astype(str).to_numpy().ravel().tolist()
    return [str(t) for t in out]


@pytest.mark.parametrize("name", [None, "llmperf-individual.json", "guidellm-0.8.1-errors.json"])
def test_no_page_shows_python_none(name: str | None) -> None:
    """'peak 6 against the KV limit None': no data reads —, on every record page, in the diagnosis of a model
    shape, and in the planner's options (a GPU that fits nothing had None in five cells)."""
    leaks = []
    for page in RECORD_PAGES:
        at = _app()
        if name is not None:
            data = (IMPORTER_DATA / name).read_bytes()
            at.file_uploader(key="records_upload").set_value((name, data, "application/json")).run()
        at.switch_page(f"pages/{page}").run()
        if page == "diagnosis.py":
            at.radio(key="diag_mode").set_value("Diagnose the records in use").run()
            leaks += [(page, t) for t in _shown_text(at) if NONE_WORD.search(t)]  # no model shape: no KV limit
            at.selectbox(key="diag_model").set_value(at.selectbox(key="diag_model").options[1]).run()
        assert not at.exception, page
        leaks += [(page, t) for t in _shown_text(at) if NONE_WORD.search(t)]
    if name is None:
        at = _app()
        at.switch_page("pages/planner.py").run()
        at.button(key="plan_run").click().run()
        assert not at.exception and at.dataframe
        leaks += [("planner.py", t) for t in _shown_text(at) if NONE_WORD.search(t)]
    assert leaks == []


def test_cache_experiment_table_writes_the_hit_rate_as_its_metric_does() -> None:
    """The table said 0.792 where the metric above it says 79.2%."""
    at = _app()
    at.switch_page("pages/cache.py").run()
    assert not at.exception and not at.dataframe
    table = next(t for t in _tables(at) if "metric" in t.columns).set_index("metric")
    assert table.loc["token hit rate", "caching on"] == _metrics(at)["Token hit rate"]
    assert table.loc["token hit rate", "caching off"] == "—"  # no cache, no hit rate to measure


def test_diagnosis_headline_evidence_and_why_in_words_keys_in_the_engineer_view() -> None:
    """Issue 36: the evidence under the headline and 'Why this verdict' named rules by key (ttft_p95, kv_memory)."""
    at = _app()
    at.switch_page("pages/diagnosis.py").run()
    at.radio(key="diag_mode").set_value("Diagnose a profile table").run()
    assert not at.exception and not at.error
    said = " ".join(x.value for x in at.markdown)
    assert "Why this verdict.** KV memory because its whole pattern holds" in said
    assert "- TTFT p95 10,300 ms > 2,000 ms: TTFT p95 above the objective" in said
    assert "kv_memory because" not in said and "ttft_p95" not in said
    at.session_state["engineer_view"] = True
    at.run()
    said = " ".join(x.value for x in at.markdown)
    assert "Why this verdict.** kv_memory because its whole pattern holds" in said
    assert "- ttft_p95 10,300 ms > 2,000 ms" in said


def test_token_timing_says_why_most_requests_count_as_stalled() -> None:
    """'92% stalled' (paged_chat, 4x the median ITL) read as a broken server; the page now says what the share means."""
    recs = [{"start": i, "first_token": i + 0.1, "end": i + 1.4, "status": "success", "output_tokens": 5,
             "token_times": [i + 0.1, i + 0.2, i + 0.3, i + 0.4, i + 1.4]} for i in range(6)]  # one 1 s pause each
    at = _app()
    at.file_uploader(key="records_upload").set_value(("stalls.json", json.dumps(recs).encode(),
                                                      "application/json")).run()
    at.switch_page("pages/token_timing.py").run()
    assert not at.exception and not at.error
    said = " ".join(x.value for x in at.markdown)
    assert "100% of requests paused longer than 400 ms at least once (4x the median gap between tokens, 100 ms)." \
        in said
    assert "prefilled in chunks beside the decodes" in said


def test_the_time_unit_chosen_on_one_page_is_the_next_pages() -> None:
    """Each page draws its own ms / s toggle, and Streamlit dropped its value when the page was left: Diagnosis,
    opened after Summary, showed neither unit chosen (its screenshot too) and read ms whatever was chosen."""
    at = _app()
    (unit,) = at.get("button_group")
    assert unit.value == "ms"
    unit.set_value("s").run()
    at.switch_page("pages/diagnosis.py").run()
    assert [w.value for w in at.get("button_group")] == ["s"]
    at.radio(key="diag_mode").set_value("Diagnose a profile table").run()
    said = " ".join(x.value for x in [*at.markdown, *at.warning, *at.success])
    assert "10.3 s" in said and "10,300 ms" not in said
    at.get("button_group")[0].set_value("ms").run()
    at.switch_page("pages/token_timing.py").run()
    assert [w.value for w in at.get("button_group")] == ["ms"]
    at.switch_page("pages/summary.py").run()
    assert [w.value for w in at.get("button_group")] == ["ms"] and not at.exception


def test_summary_with_an_slo_and_slices_draws_its_slice_tables() -> None:
    """A TTFT limit on the sample (which has slices) raised TypeError on Summary: the goodput metrics' loop variable
    'label' shadowed the column labeller the slice tables are renamed with, since 2026-12-01."""
    at = _app()
    (ttft,) = [n for n in at.number_input if n.key == "slo_ttft_ms"]
    ttft.set_value(2000.0).run()
    assert not at.exception and not at.error
    tables = " ".join(x.value for x in at.markdown)
    assert "Goodput (output tokens/s)" in [m.label for m in at.metric] and "Slices" in [h.value for h in at.subheader]
    assert "| Goodput (output tokens/s) |" not in tables  # the label did not become a column name


def test_every_page_opens_with_an_slo_the_engineer_view_and_token_times_held() -> None:
    """A state no single page's test reached: the SLO crash on Summary (a83d120) showed that only once a limit was set
    on records with slices. Records with token times, slices and a timeout, every SLO limit set, the engineer view on
    and the unit in s: every page opens without an exception or an error."""
    recs = [{"start": i * 0.5, "first_token": i * 0.5 + 0.1, "end": i * 0.5 + 1.4, "status": "success",
             "output_tokens": 5, "slice": "ab"[i % 2],
             "token_times": [i * 0.5 + t for t in (0.1, 0.2, 0.3, 0.4, 1.4)]} for i in range(40)]
    recs[7] = {**recs[7], "status": "timeout", "error": "deadline", "output_tokens": 2,
               "token_times": recs[7]["token_times"][:2]}
    at = _app()
    at.file_uploader(key="records_upload").set_value(("tok.json", json.dumps(recs).encode(),
                                                      "application/json")).run()
    for key, value in (("slo_ttft_ms", 500.0), ("slo_tpot_ms", 50.0), ("slo_latency", 10.0)):
        [n for n in at.number_input if n.key == key][0].set_value(value).run()
    at.get("button_group")[0].set_value("s").run()
    at.session_state["engineer_view_kept"] = True
    at.run()
    assert not at.exception and not at.error
    pages = sorted(p.name for p in (REPO / "pages").glob("*.py") if not p.name.startswith("_"))
    for name in pages:
        at.switch_page(f"pages/{name}").run()
        assert not at.exception and not at.error, (name, [e.message for e in at.exception])
