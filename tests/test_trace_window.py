"""Planning for a trace: its busiest minute, replayed at speedups, sized with the SLOs (``plan --trace``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import SAMPLE_DATA, run_cli

from servebench.analysis.prefix_reuse import hit_tokens
from servebench.analysis.summary import SLO
from servebench.analysis.trace_stats import busiest_window, peak_rate_rps
from servebench.capacity.model_presets import get_preset
from servebench.capacity.stepmodel import StepModel
from servebench.errors import ConfigError
from servebench.planning import PlanRequest, Workload, plan, planned_point
from servebench.planning.planner import _evaluate, _scenario
from servebench.planning.trace_window import busiest_minute, computed_prompt_tokens, window_requests
from servebench.records.traces import read_trace

MOONCAKE = SAMPLE_DATA / "traces" / "mooncake_conversation_300.jsonl"
AZURE = SAMPLE_DATA / "traces" / "azure_conv_2023_300.csv"


def test_the_busiest_minute_is_the_window_of_the_traces_peak_rate() -> None:
    trace = read_trace(AZURE)
    workload = Workload.from_trace(str(AZURE))
    start, count = busiest_window(trace.arrival_s)
    assert (workload.trace.start_s, workload.trace.duration_s) == (start, 60.0)
    assert workload.trace_rate_rps == peak_rate_rps(trace.arrival_s) == count / 60
    requests = window_requests(workload.trace)
    inside = (trace.arrival_s >= start) & (trace.arrival_s < start + 60)
    assert len(requests) == count and requests.trace_row.tolist() == trace.row[inside].tolist()
    assert not workload.prefix_caching  # no block IDs: nothing to cache
    assert Workload.from_trace(str(MOONCAKE)).prefix_caching
    assert not Workload.from_trace(str(MOONCAKE), prefix_caching=False).prefix_caching


def test_a_trace_shorter_than_a_minute_is_replayed_whole(tmp_path: Path) -> None:
    short = tmp_path / "short.jsonl"
    short.write_text("".join(line + "\n" for line in MOONCAKE.read_text().splitlines()[:40]))
    workload = Workload.from_trace(str(short))
    span = float(read_trace(short).arrival_s[-1])
    assert workload.trace.duration_s is None and workload.trace_rate_rps == pytest.approx(39 / span)


def test_computed_prompts_leave_out_what_an_unbounded_cache_serves_in_the_window() -> None:
    requests = window_requests(busiest_minute(str(MOONCAKE)))
    blocks = requests.trace_blocks
    computed = computed_prompt_tokens(requests)
    reusable, _ = hit_tokens(blocks.offsets, blocks.values, requests.prompt_tokens, blocks.block_tokens, [])
    assert int((requests.prompt_tokens - computed).sum()) == reusable > 0
    assert np.all((computed >= 0) & (computed <= requests.prompt_tokens))
    assert computed[0] == requests.prompt_tokens[0]  # the window's first request finds a cold cache


def _request(workload: Workload, slo: SLO, seqs: tuple[int, ...] = (64,), **kw) -> PlanRequest:
    return PlanRequest(model=get_preset("llama-3.1-8b"), workload=workload, slo=slo, gpus=["H100"],
                       tensor_parallel=[2], max_num_seqs=list(seqs), requests_per_simulation=200, **kw)


def test_a_load_is_the_window_replayed_at_the_speedup_that_offers_it() -> None:
    workload = Workload.from_trace(str(MOONCAKE))
    req = _request(workload, SLO(ttft_s=5.0))
    scenario = _scenario(req, 400_000, 64, StepModel(base_s=0.01, per_prefill_token_s=1e-5))
    assert scenario.server.prefix_caching and scenario.workload.trace == workload.trace
    point, sim = _evaluate(req, scenario, 2 * workload.trace_rate_rps, "grid")
    window = window_requests(workload.trace)
    assert point.load == 2 * workload.trace_rate_rps
    assert sim.records.start.tolist() == (window.arrival_s / 2.0).tolist()  # the same requests, twice as fast
    assert sim.records.prompt_tokens.tolist() == window.prompt_tokens.tolist()


def test_plan_sizes_for_the_peak_and_its_replicas_meet_the_slos_there() -> None:
    workload = Workload.from_trace(str(MOONCAKE))
    req = _request(workload, SLO(ttft_s=8.0))
    evaluation, result = plan(req, workload.trace_rate_rps)
    best = result.best
    assert best is not None and best.replicas >= 1 and evaluation.simulations > 0
    # the prefix cache's reuse lowers the prefill work the analytic estimate and the throughput bound count
    _, uncached = plan(_request(Workload.from_trace(str(MOONCAKE), prefix_caching=False), SLO(ttft_s=8.0)),
                       workload.trace_rate_rps)
    assert result.details[0].estimate_rps > uncached.details[0].estimate_rps
    point = planned_point(evaluation, best, result.rate_rps)
    assert point.meets_slo and point.load == pytest.approx(result.rate_rps / best.replicas)
    with pytest.raises(ConfigError, match="a trace cannot be scaled"):
        workload.with_prompt_scale(0.5)


def test_workload_takes_classes_or_a_trace_not_both() -> None:
    trace = busiest_minute(str(MOONCAKE))
    with pytest.raises(ValueError, match="give the requests one way"):
        Workload(trace=trace, classes=Workload.fixed(10, 10).classes)
    with pytest.raises(ValueError, match="give the requests one way"):
        Workload()


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code, out, err = run_cli(capsys, *args)
    return code, out + err


def test_plan_command_with_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("plan", "--model", "llama-3.1-8b", "--gpus", "H100", "--tp", "2", "--max-num-seqs", "64",
            "--slo-ttft", "8")
    code, out = _cli(capsys, *base, "--trace", str(MOONCAKE), "--json")
    assert code == 0, out
    doc = json.loads(out)
    trace = doc["workload"]["trace"]
    requests = len(window_requests(busiest_minute(str(MOONCAKE))))
    assert trace["window_s"] == 60.0 and trace["requests"] == requests and trace["prefix_caching"] is True
    assert doc["workload"]["rate_rps"] == trace["window_rate_rps"] == requests / 60
    assert doc["search"]["requests_per_simulation"] == requests and doc["workload"]["classes"] == []
    code, out = _cli(capsys, *base, "--trace", str(MOONCAKE), "--rate", "9", "--no-prefix-caching")
    assert code == 0, out
    assert "busiest minute" in out and "prefix caching off" in out and "at 9 requests/s" in out


@pytest.mark.parametrize("args, words", [
    (("--trace", str(MOONCAKE), "--prompt-tokens", "5", "--output-tokens", "5"), "give the request lengths one way"),
    (("--prompt-tokens", "5", "--output-tokens", "5"), "give the traffic to serve with --rate"),
    (("--rate", "1", "--prompt-tokens", "5", "--output-tokens", "5", "--prefix-caching"), "go with --trace"),
    (("--trace", "nowhere.jsonl"), "nowhere.jsonl: cannot read the trace"),
    (("--trace", str(MOONCAKE), "--trace-format", "azure"), "mooncake_conversation_300.jsonl"),
])
def test_plan_command_trace_errors_are_one_line(capsys: pytest.CaptureFixture[str], args: tuple[str, ...],
                                                words: str) -> None:
    code, out = _cli(capsys, "plan", "--model", "llama-3.1-8b", "--slo-ttft", "8", *args)
    assert code == 2 and words in out and out.strip().count("\n") == 0, out
