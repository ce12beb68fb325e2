"""A trace in pictures: arrivals and token mix over time, the hit-rate curve, and the report site's trace page."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import SAMPLE_DATA, run_cli

from servebench.analysis.trace_stats import CAPACITIES_TOKENS, busiest_window, prefix_stats
from servebench.output.figures.trace import hit_rate_by_capacity, trace_bins, trace_over_time
from servebench.output.site import SiteOptions, build_site, load_run
from servebench.records.traces import read_trace

TRACES = SAMPLE_DATA / "traces"
MOONCAKE = TRACES / "mooncake_conversation_300.jsonl"
AZURE = TRACES / "azure_conv_2023_300.csv"


@pytest.mark.parametrize("path", [MOONCAKE, AZURE])
def test_bins_keep_every_request_and_token(path) -> None:
    trace = read_trace(path)
    bins = trace_bins(trace)
    assert np.sum(bins.requests_per_s) * bins.width_s == pytest.approx(len(trace))
    assert np.sum(bins.prompt_tokens_per_s) * bins.width_s == pytest.approx(trace.prompt_tokens.sum())
    assert np.sum(bins.output_tokens_per_s) * bins.width_s == pytest.approx(trace.output_tokens.sum())
    assert bins.mids_s.size * bins.width_s >= trace.arrival_s[-1] and bins.mids_s.size <= 120
    assert bins.peak_window == busiest_window(trace.arrival_s)


def test_a_bin_holds_the_requests_that_arrive_in_it() -> None:
    trace = read_trace(MOONCAKE)
    bins = trace_bins(trace, width_s=10.0)
    expected = np.histogram(trace.arrival_s, bins=np.arange(0, 10.0 * (bins.mids_s.size + 1), 10.0))[0]
    assert (bins.requests_per_s * 10.0).round().astype(int).tolist() == expected.tolist()


def test_the_over_time_figure_draws_three_rows_and_shades_the_busiest_minute() -> None:
    bins = trace_bins(read_trace(MOONCAKE))
    fig = trace_over_time(bins, "<b>t</b>")
    assert [t.name for t in fig.data] == ["requests/s", "prompt tokens/s", "output tokens/s"]
    assert len(fig.layout.shapes) == 3 and fig.layout.shapes[0].x0 == bins.peak_window[0]
    assert "&lt;b&gt;t&lt;/b&gt;" in fig.layout.title.text and "busiest minute, 3.07 requests/s" in fig.layout.title.text


def test_the_hit_rate_curve_rises_to_the_unbounded_share() -> None:
    prefix = prefix_stats(read_trace(MOONCAKE))
    fig = hit_rate_by_capacity(prefix, "t")
    (line,) = fig.data
    assert list(line.x) == list(CAPACITIES_TOKENS) and fig.layout.xaxis.type == "log"
    assert list(line.y) == sorted(line.y) and line.y[-1] == pytest.approx(100 * prefix.reusable_token_share)
    assert fig.layout.shapes[0].y0 == pytest.approx(100 * prefix.reusable_token_share)


def test_the_report_shows_a_trace_as_a_trace() -> None:
    runs = [load_run(MOONCAKE), load_run(AZURE)]
    assert [r.kind for r in runs] == ["trace", "trace"] and runs[0].trace is not None
    files = build_site(runs, SiteOptions())
    pages = {name: data.decode() for name, data in files.items() if name.endswith(".html")}
    index = pages["index.html"]
    assert "0 record runs, 2 traces" in index and "mooncake_conversation_300.jsonl</a> (300 requests)" in index
    moon = pages["trace-01-mooncake-conversation-300-jsonl.html"]
    assert "Prefix reuse" in moon and "8.102 %" in moon and "busiest 60 s" in moon and moon.count('class="figure-data"') == 2
    azure = pages["trace-02-azure-conv-2023-300-csv.html"]
    assert "names no prefix blocks" in azure and "Prefix reuse" not in azure


def test_report_command_on_a_trace(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "report", str(MOONCAKE), "-o", str(tmp_path / "site"), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["runs"][0]["kind"] == "trace" and (tmp_path / "site" / doc["pages"][1]).exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(MOONCAKE.read_text().splitlines()[0] + '\n{"timestamp": 1, "input_length": -4, '
                   '"output_length": 2}\n')
    code, _, err = run_cli(capsys, "report", str(bad), "-o", str(tmp_path / "bad"))
    assert code == 2 and "bad.jsonl: line 2, field 'input_length'" in err and err.count("\n") == 1
