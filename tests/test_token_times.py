"""Token-level timing: the token_times field, its rules, the gaps between tokens and what reports make of them."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner
from vega_charts import drawn_charts, drawn_list

from servebench import summarize
from servebench.analysis.percentiles import estimate, percentile
from servebench.analysis.summary import SLO, build_report
from servebench.cli.core import app
from servebench.errors import ConfigError, RecordValidationError
from servebench.formatting import fmt
from servebench.output.figures import vegalite, vegalite_tokens
from servebench.output.figures.tokens import (
    itl_cdf,
    itl_series,
    stall_bins,
    stall_histogram,
    token_ticks,
    token_timeline,
)
from servebench.records.importers import import_bytes
from servebench.records.loaders import encode_records, read_bytes, to_table
from servebench.records.schema import TimingRecord
from servebench.records.token_times import flat, gaps
from servebench.serving.experiments import compare_prefill
from servebench.serving.scenario import Scenario, load_scenario, parse_scenario
from servebench.serving.simulate import simulate


def streamed(start: float, first: float, steps: list[float], **extra: Any) -> dict[str, Any]:
    """A success whose tokens arrive at ``first`` and then after each gap in ``steps``."""
    times = [first]
    for gap in steps:
        times.append(times[-1] + gap)
    return {"start": start, "first_token": first, "end": times[-1], "status": "success",
            "output_tokens": len(times), "token_times": times, **extra}


# One request streams steadily, one has a single 2 s stall, one is a one-token answer, one times out.
# Times are binary fractions, so every gap is exact.
STEADY_GAP_S = 0.0625
STALL_FIXTURE = [
    streamed(0.0, 0.5, [STEADY_GAP_S] * 9),
    streamed(1.0, 1.25, [STEADY_GAP_S, STEADY_GAP_S, 2.0, STEADY_GAP_S, STEADY_GAP_S]),
    streamed(2.0, 2.125, []),
    {"start": 3.0, "end": 7.0, "status": "timeout"},
]


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def load(records: list[dict[str, Any]], name: str = "t.jsonl"):
    return to_table(read_bytes(jsonl(records), name))[0]


def error_of(records: list[dict[str, Any]]) -> str:
    with pytest.raises(RecordValidationError) as info:
        load(records)
    return str(info.value)


# --------------------------------------------------------------------------- records and validation


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet"])
def test_token_times_survive_every_format(fmt):
    table = load(STALL_FIXTURE)
    again = to_table(read_bytes(encode_records(table, fmt), f"x.{fmt}"))[0]
    assert again.token_times.to_pylist() == [r.get("token_times") for r in STALL_FIXTURE]
    assert again.token_counts is None


def test_csv_cell_holds_a_json_list():
    data = b'start,first_token,end,status,output_tokens,token_times\n0,0.5,1,success,2,"[0.5, 1]"\n2,,3,timeout,,\n'
    table = to_table(read_bytes(data, "t.csv"))[0]
    assert table.token_times.to_pylist() == [[0.5, 1.0], None]


def test_parquet_list_column_is_kept_as_arrow_lists_not_python_lists(tmp_path):
    arrow = pa.table({"start": [0.0, 1.0], "first_token": [0.5, 1.5], "end": [1.0, 2.0],
                      "status": ["success", "success"], "output_tokens": [2, 2],
                      "token_times": pa.array([[0.5, 1.0], [1.5, 2.0]], pa.list_(pa.float32()))})
    path = tmp_path / "r.parquet"
    pq.write_table(arrow, path)
    table = to_table(read_bytes(path.read_bytes(), "r.parquet"))[0]
    assert isinstance(table.token_times, pa.ListArray) and table.token_times.type == pa.list_(pa.float64())
    f = flat(table.token_times)
    assert f.offsets.tolist() == [0, 2, 4] and f.values.dtype == np.float64


def test_files_without_token_times_load_none():
    assert load([STALL_FIXTURE[3]]).token_times is None


def test_camel_case_alias_and_taking_rows():
    rec = dict(STALL_FIXTURE[0])
    rec["tokenTimes"] = rec.pop("token_times")
    table = load([rec, STALL_FIXTURE[3], STALL_FIXTURE[1]])
    assert table.take(np.array([2, 1])).token_times.to_pylist() == [STALL_FIXTURE[1]["token_times"], None]


@pytest.mark.parametrize("change, message", [
    ({"token_times": [0.5, 0.7, 0.6, 0.8]},
     "row 2, field 'token_times': Invalid token times: token 3 (0.6) comes before token 2 (0.7); "
     "times must not decrease"),
    ({"token_times": [0.4, 0.6, 0.7, 0.8]},
     "row 2, field 'token_times': Invalid token times: the first token time 0.4 must equal first_token 0.5"),
    ({"token_times": [0.5, 0.6, 0.7, 0.9]},
     "row 2, field 'token_times': Invalid token times: the last token time 0.9 is after end 0.8"),
    ({"token_times": [0.5, 0.6, 0.8]},
     "row 2, field 'token_times': Invalid token times: 3 token times for output_tokens 4; a success has one time "
     "per output token, or token_counts summing to output_tokens"),
    ({"token_times": [0.5, True, 0.7, 0.8]},
     "row 2, field 'token_times': Invalid token times: element 2 (True) is not a number; expected a list of numbers"),
    ({"token_times": "0.5 0.6"},
     "row 2, field 'token_times': Invalid token times: '0.5 0.6' is not a list of numbers"),
    ({"token_times": [0.5, 0.8], "token_counts": [1, 2]},
     "row 2, field 'token_times': Invalid token times: token_counts summing to 3 for output_tokens 4"),
    ({"token_times": [0.5, 0.8], "token_counts": [4]},
     "row 2, field 'token_counts': Invalid token counts: 1 counts for 2 token times; give one count per arrival"),
    ({"token_times": [0.5, 0.8], "token_counts": [4, 0]},
     "row 2, field 'token_counts': Invalid token counts: count 2 is 0; each arrival carries at least 1 token"),
    ({"token_times": None, "token_counts": [4]},
     "row 2, field 'token_counts': Invalid token counts: given without token_times"),
    ({"token_times": [0.5, 0.6, 0.7, 0.8], "token_counts": [1, 1, 1.0, 1]},
     "row 2, field 'token_counts': Invalid token counts: element 3 (1.0) is not an integer below 10**18"),
])
def test_each_rule_names_file_row_field_and_value(change, message):
    good = {"start": 0.0, "first_token": 0.5, "end": 0.8, "status": "success", "output_tokens": 4,
            "token_times": [0.5, 0.6, 0.7, 0.8]}
    text = error_of([good, {k: v for k, v in {**good, **change}.items() if v is not None}])
    assert text.startswith("t.jsonl, " + message)


def test_a_non_success_may_carry_the_tokens_it_streamed_but_not_more():
    partial = {"start": 0.0, "first_token": 0.5, "end": 3.0, "status": "timeout", "output_tokens": 2,
               "token_times": [0.5, 0.6]}
    assert load([partial]).token_times.to_pylist() == [[0.5, 0.6]]
    text = error_of([{**partial, "output_tokens": 1}])
    assert "2 token times, more than output_tokens 1 says it generated" in text
    text = error_of([{k: v for k, v in partial.items() if k != "first_token"}])
    assert "token times but no first_token" in text


def test_a_chunk_may_carry_several_tokens():
    rec = {"start": 0.0, "first_token": 0.5, "end": 0.8, "status": "success", "output_tokens": 5,
           "token_times": [0.5, 0.8], "token_counts": [2, 3]}
    table = load([rec])
    assert table.token_counts.to_pylist() == [[2, 3]]
    again = to_table(read_bytes(encode_records(table, "csv"), "x.csv"))[0]
    assert again.token_counts.to_pylist() == [[2, 3]]


def test_csv_cell_that_is_not_json_is_named():
    data = b'start,first_token,end,status,output_tokens,token_times\n0,0.5,1,success,2,"0.5;1"\n'
    with pytest.raises(RecordValidationError, match=r"t.csv, row 1, field 'token_times': Invalid token times: "
                                                    r"'0.5;1' is not a JSON list"):
        to_table(read_bytes(data, "t.csv"))


def test_the_model_applies_the_same_rules():
    TimingRecord(**STALL_FIXTURE[1])
    with pytest.raises(ValueError, match=r"token 2 \(0.4\) comes before token 1"):
        TimingRecord(**{**STALL_FIXTURE[0], "token_times": [0.5, 0.4] + STALL_FIXTURE[0]["token_times"][2:]})


def test_the_spec_summarize_ignores_token_times_and_keeps_its_messages(r1_r4):
    with_times = [dict(r) for r in r1_r4]
    with_times[0]["token_times"] = "not even a list"
    assert summarize(with_times, 0, 10) == summarize(r1_r4, 0, 10)
    bad = [dict(r) for r in r1_r4]
    bad[2]["status"] = "lost"
    with pytest.raises(ValueError) as info:
        summarize(bad, 0, 10)
    assert str(info.value) == "Invalid status"


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0, 5, allow_nan=False), min_size=1, max_size=6), min_size=1, max_size=6))
def test_gaps_equal_per_row_differences(rows):
    times = [list(np.cumsum(r)) for r in rows]
    g = gaps(pa.array(times, pa.list_(pa.float64())))
    expected = [b - a for t in times for a, b in zip(t, t[1:])]
    assert g.values.tolist() == pytest.approx(expected)
    assert g.max_gap.tolist() == pytest.approx([max(np.diff(t)) if len(t) > 1 else np.nan for t in times],
                                               nan_ok=True)


# --------------------------------------------------------------------------- the report


def report_of(records: list[dict[str, Any]], slo: SLO | None = None):
    table, ws, we = to_table(read_bytes(jsonl(records), "t.jsonl"))
    return build_report(table, ws, we, slo)


def test_itl_is_every_gap_between_consecutive_tokens_of_successes():
    report = report_of(STALL_FIXTURE)
    hand = sorted([STEADY_GAP_S] * 9 + [STEADY_GAP_S, STEADY_GAP_S, 2.0, STEADY_GAP_S, STEADY_GAP_S])
    assert report.itl_s.n == len(hand) == 14
    for q in (50, 90, 95, 99):
        assert report.itl_s.at(q) == percentile(hand, q)
    assert report.itl_s.max == 2.0 and report.itl_s.mean == pytest.approx(sum(hand) / len(hand))
    assert report.itl_s.percentiles[0].ci_low is not None  # intervals as for TTFT
    assert report.max_stall_s.n == 2 and report.max_stall_s.max == 2.0 and report.max_stall_s.at(50) == STEADY_GAP_S


def test_one_2s_stall_moves_itl_p99_while_request_tpot_stays_modest():
    report = report_of(STALL_FIXTURE)
    stalled_tpot = (STALL_FIXTURE[1]["end"] - STALL_FIXTURE[1]["first_token"]) / 5
    assert report.request_tpot_s.max == pytest.approx(stalled_tpot) == pytest.approx(0.45)
    assert report.itl_s.at(99) == 2.0  # the stall itself, which no per-request average shows
    assert report.stalls.threshold_s == 4 * STEADY_GAP_S and report.stalls.threshold_rule == "4x median ITL"
    assert (report.stalls.requests, report.stalls.stalled, report.stalls.share) == (2, 1, 0.5)


def test_stall_threshold_given_and_itl_slo_joins_goodput():
    report = report_of(STALL_FIXTURE, SLO(itl_p99_s=1.0, stall_s=3.0))
    assert report.stalls.stalled == 0 and report.stalls.threshold_rule == "--stall-s"
    # the steady stream and the one-token answer meet it; the stalled one and the timeout miss
    assert report.slo.good_requests == 2 and report.slo.attainment == 0.5
    lenient = report_of(STALL_FIXTURE, SLO(itl_p99_s=2.0))
    assert lenient.slo.good_requests == 3


def test_a_success_without_token_times_misses_an_itl_slo():
    records = [STALL_FIXTURE[0], {k: v for k, v in STALL_FIXTURE[0].items() if k != "token_times"}]
    assert report_of(records, SLO(itl_p99_s=1.0)).slo.good_requests == 1


def test_no_token_times_no_itl_and_an_itl_slo_is_refused(r1_r4):
    table, ws, we = to_table(read_bytes(jsonl(r1_r4), "r.jsonl"))
    report = build_report(table, 0, 10)
    assert report.itl_s is None and report.max_stall_s is None and report.stalls is None
    with pytest.raises(ConfigError, match="needs token_times"):
        build_report(table, 0, 10, SLO(itl_p99_s=0.1))


def test_slices_count_their_own_gaps():
    records = [dict(r, slice="a" if i == 1 else "b") for i, r in enumerate(STALL_FIXTURE)]
    report = report_of(records)
    assert report.slices["a"].itl_s.n == 5 and report.slices["a"].itl_s.max == 2.0
    assert report.slices["b"].itl_s.n == 9 and report.slices["b"].itl_s.max == STEADY_GAP_S
    assert report.slices["b"].stalls.stalled == 0  # the whole file's threshold applies to every slice


def test_itl_percentiles_match_a_full_sort_on_many_values():
    rng = np.random.default_rng(7)
    records = []
    for i in range(300):
        gaps_s = rng.exponential(0.03, size=int(rng.integers(1, 40))).tolist()
        records.append(streamed(float(i), float(i) + 0.25, gaps_s))
    report = report_of(records)
    every = np.concatenate([np.diff(r["token_times"]) for r in records])
    expected = estimate(every, [50, 90, 95, 99])
    assert [(p.value, p.ci_low, p.ci_high) for p in report.itl_s.percentiles] == \
        [(e.value, e.ci_low, e.ci_high) for e in expected]


def test_summarize_json_has_itl_at_top_level_like_ttft(tmp_path):
    path = tmp_path / "stall.jsonl"
    path.write_bytes(jsonl(STALL_FIXTURE))
    result = CliRunner().invoke(app, ["summarize", str(path), "--json", "--slo-itl", "1"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["itl_s"].keys() == out["ttft_s"].keys()
    assert out["itl_s"]["percentiles"][3]["value"] == 2.0
    assert out["stalls"]["stalled"] == 1 and out["slo"]["good_requests"] == 2
    bad = CliRunner().invoke(app, ["summarize", str(path), "--stall-s", "-1"])
    assert bad.exit_code == 2 and "--stall-s" in bad.output


# --------------------------------------------------------------------------- writers: simulator and engine


def small_scenario(policy: str = "reserve", **server: Any) -> Scenario:
    return parse_scenario({
        "name": "tokens", "seed": 5,
        "server": {"policy": policy, "kv_budget_tokens": 4000, "max_num_batched_tokens": 256,
                   "chunked_prefill": True, **server},
        "step_model": {"base_s": 0.01, "per_prefill_token_s": 2e-5, "per_decode_seq_s": 1e-4},
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 8.0}, "num_requests": 60,
                     "classes": [{"prompt": {"kind": "uniform", "low": 50, "high": 600},
                                  "output": {"kind": "uniform", "low": 1, "high": 60}}]}})


def test_simulator_token_times_are_its_step_ends():
    sc = small_scenario()
    slow = simulate(sc, decode_runs=False)  # one trace row per engine step
    step_ends = set((slow.trace.start_s + slow.trace.duration_s).tolist())
    table = slow.records
    f = flat(table.token_times)
    assert set(f.values.tolist()) <= step_ends
    ok = table.is_success
    assert (f.lengths[ok] == table.output_tokens[ok]).all()
    # the fast path (decode runs committed at once) stamps the same tokens at the same times
    assert simulate(sc).records.token_times.to_pylist() == table.token_times.to_pylist()
    again = to_table(read_bytes(encode_records(table, "jsonl"), "sim.jsonl"))[0]  # and they pass validation
    assert again.token_times.to_pylist() == table.token_times.to_pylist()


def test_simulator_preemption_shows_as_a_stall_in_the_preempted_stream():
    tight = dict(kv_budget_tokens=1024, max_num_batched_tokens=512)
    doc = {"classes": [{"prompt": {"value": 100}, "output": {"value": 300}}],
           "arrival": {"kind": "constant", "rate_rps": 20}, "num_requests": 40}

    def run(policy: str):
        sc = parse_scenario({"name": "p", "seed": 3, "server": {"policy": policy, **tight},
                             "step_model": {"base_s": 0.01, "per_prefill_token_s": 1e-5}, "workload": doc})
        result = simulate(sc)
        return result, build_report(result.records, result.window_start_s, result.window_end_s)

    paged, paged_report = run("paged")
    reserve, reserve_report = run("reserve")
    assert paged.preemptions > 0 and reserve.preemptions == 0
    step_s = reserve_report.itl_s.at(50)
    assert reserve_report.max_stall_s.max < 3 * step_s  # no preemption: no stream waits more than a step or two
    assert paged_report.max_stall_s.max > 10 * step_s  # a preempted stream waits for its recompute


def test_engine_token_times_are_its_step_ends_and_preemption_stalls():
    torch = pytest.importorskip("torch")
    from servebench.serving.engine.model import Decoder, preset
    from servebench.serving.engine.runner import run_workload
    from servebench.serving.scheduler import SchedulerConfig
    from servebench.serving.workload import ArrivalSpec, ClassSpec, LengthSpec, WorkloadSpec
    torch.manual_seed(0)
    model = Decoder(preset("tiny"), seed=7)
    cfg = SchedulerConfig(kv_budget_tokens=128, policy="paged", max_num_seqs=4)
    wl = WorkloadSpec(arrival=ArrivalSpec(kind="constant", rate_rps=1e6), num_requests=4, classes=[
        ClassSpec(prompt=LengthSpec(kind="fixed", value=20), output=LengthSpec(kind="fixed", value=40))])
    run = run_workload(model, cfg, wl, seed=6, warmup_steps=0)
    emitted_at = {s.compute_start_s + s.compute_s for s in run.steps if s.compute_start_s is not None}
    for rec in run.records:
        assert rec["status"] == "success" and len(rec["token_times"]) == rec["output_tokens"] == 40
        assert set(rec["token_times"]) <= emitted_at
    assert sum(s.preempted for s in run.steps) >= 1
    stalls = sorted(float(np.diff(r["token_times"]).max()) for r in run.records)
    steps = sorted(float(np.diff(r["token_times"]).min()) for r in run.records)
    assert stalls[-1] > 3 * max(steps)  # the preempted stream waited out its recompute


# --------------------------------------------------------------------------- writers: the load generator


def test_load_generator_token_times_against_the_local_server_count_the_streamed_tokens():
    pytest.importorskip("torch")
    from asgi_server import serve_in_background

    from servebench.load.generator import LoadConfig, plan_requests, records_table, run_load_sync, to_record
    from servebench.serving.engine.http_api import create_app
    from servebench.serving.engine.service import EngineService
    from servebench.serving.scheduler import SchedulerConfig
    service = EngineService("tiny", scheduler=SchedulerConfig(kv_budget_tokens=8192, max_num_seqs=8),
                            device="cpu", threads=1, warmup_steps=1)
    plan = plan_requests(np.arange(6) / 50.0, [6] * 6, [7] * 6, np.random.default_rng(0))
    with serve_in_background(create_app(service)) as url:
        result = run_load_sync(LoadConfig(url=url, deadline_s=30), plan)
    for o in result.outcomes:
        rec = to_record(o)
        times = rec["token_times"]
        assert rec["status"] == "success" and len(times) == len(o.chunk_times_s) == rec["output_tokens"] == 7
        assert times == o.chunk_times_s and times[0] == rec["first_token"] and times[-1] <= rec["end"]
        assert all(b >= a for a, b in zip(times, times[1:]))
    table, ws, we = records_table(result.outcomes)
    assert build_report(table, ws, we).itl_s.n == 6 * 6


def chunky_app(running_usage: bool):
    """A server streaming 2 tokens per chunk; with ``running_usage`` every chunk reports usage so far."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "chunky", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> object:
        out = int((await request.json())["max_tokens"])

        async def events():
            for sent in range(2, out + 1, 2):
                doc: dict[str, Any] = {"choices": [{"index": 0, "text": " x x"}]}
                if running_usage or sent == out:
                    doc["usage"] = {"prompt_tokens": 5, "completion_tokens": sent, "total_tokens": 5 + sent}
                yield f"data: {json.dumps(doc)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


@pytest.mark.parametrize("running_usage", [True, False])
def test_chunks_of_several_tokens_get_counts_only_when_the_server_says_them(running_usage):
    from asgi_server import serve_in_background

    from servebench.load.generator import LoadConfig, plan_requests, records_table, run_load_sync, to_record
    plan = plan_requests(np.arange(3) / 50.0, [5] * 3, [6] * 3, np.random.default_rng(0))
    with serve_in_background(chunky_app(running_usage)) as url:
        result = run_load_sync(LoadConfig(url=url), plan)
    for o in result.outcomes:
        rec = to_record(o)
        assert rec["output_tokens"] == 6 and len(o.chunk_times_s) == 3
        if running_usage:
            assert rec["token_times"] == o.chunk_times_s and rec["token_counts"] == [2, 2, 2]
        else:  # the chunk sizes are unknown: no token times rather than a guess
            assert "token_times" not in rec and "token_counts" not in rec
    records_table(result.outcomes)  # and they pass validation


# --------------------------------------------------------------------------- importers

IMPORTERS_DATA = Path(__file__).resolve().parent / "data" / "importers"


def imported(name: str, fmt: str):
    loaded = import_bytes((IMPORTERS_DATA / name).read_bytes(), name, fmt)
    table, ws, we = to_table(loaded)
    return loaded, build_report(table, ws, we)


def test_vllm_itls_become_token_times_and_agree_with_its_mean_itl():
    doc = json.loads((IMPORTERS_DATA / "vllm-serve-detailed.json").read_text())
    loaded, report = imported("vllm-serve-detailed.json", "vllm")
    ok = [i for i, e in enumerate(doc["errors"]) if not e]
    carried = sum(len(doc["itls"][i]) for i in ok)
    assert report.itl_s.n == carried
    assert report.itl_s.mean * 1000 == pytest.approx(doc["mean_itl_ms"], abs=1e-6)


def test_aiperf_inter_chunk_latency_agrees_with_its_own_summary_up_to_the_percentile_definition():
    # aiperf-0.13.0-clean-icl.jsonl: the real export's 40 records, keeping metadata and the metrics read
    # (inter_chunk_latency included); its aggregate is aiperf-0.13.0-clean-profile_export_aiperf.json.
    agg = json.loads((IMPORTERS_DATA / "aiperf-0.13.0-clean-profile_export_aiperf.json").read_text())
    icl = agg["inter_chunk_latency"]
    raw_ms = np.concatenate([json.loads(line)["metrics"]["inter_chunk_latency"]["value"]
                             for line in (IMPORTERS_DATA / "aiperf-0.13.0-clean-icl.jsonl").read_text().splitlines()])
    loaded, report = imported("aiperf-0.13.0-clean-icl.jsonl", "aiperf:tokens=server")
    assert report.itl_s.n == icl["count"] == raw_ms.size == 2498
    assert report.itl_s.mean * 1000 == pytest.approx(icl["avg"], abs=1e-3)
    for q in (50, 90, 95, 99):
        ours_ms = report.itl_s.at(q) * 1000
        # servebench: nearest rank; AIPerf: linear interpolation between the two order statistics around it
        assert ours_ms == pytest.approx(np.percentile(raw_ms, q, method="inverted_cdf"), abs=1e-3)
        assert icl[f"p{q}"] == pytest.approx(np.percentile(raw_ms, q, method="linear"), abs=1e-9)
        ordered = np.sort(raw_ms)
        k = (q / 100) * (raw_ms.size - 1)
        assert ordered[int(np.floor(k))] - 1e-3 <= ours_ms <= ordered[int(np.ceil(k)) + 1] + 1e-3
    # AIPerf counts output tokens with its client tokenizer: by default the chunks do not fit them
    default, default_report = imported("aiperf-0.13.0-clean-icl.jsonl", "aiperf")
    assert default_report.itl_s is None and any("tokens=server" in w for w in default.warnings)


def test_guidellm_0_8_1_has_no_per_token_times_to_carry():
    _, report = imported("guidellm-0.8.1-clean.json", "guidellm")
    assert report.itl_s is None


# --------------------------------------------------------------------------- chunked vs whole-prompt prefill

SCENARIOS = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios"


def test_chunked_prefill_lowers_stalls_and_whole_prompts_lower_ttft_on_the_same_seed():
    scenario = load_scenario(SCENARIOS / "prefill_interference.yaml")
    chunked, whole = compare_prefill(scenario)
    assert chunked.scenario.seed == whole.scenario.seed and chunked.scenario.workload == whole.scenario.workload
    assert not whole.scenario.server.chunked_prefill and whole.scenario.server.max_num_batched_tokens is None
    c, w = chunked.report, whole.report
    assert c.offered == w.offered == 600 and c.completed == w.completed
    assert c.max_stall_s.at(95) < 0.25 * w.max_stall_s.at(95)  # running streams barely notice a chunked prompt
    assert c.stalls.share < w.stalls.share
    assert c.slices["document"].ttft_s.at(95) > w.slices["document"].ttft_s.at(95)  # ...which waits longer
    # request TPOT, an average over each stream, hides the stalls that max_stall_s shows
    assert w.request_tpot_s.at(95) < 1.1 * c.request_tpot_s.at(95)


def test_engine_whole_prompt_prefill_stalls_running_streams_more_than_chunked():
    pytest.importorskip("torch")
    from servebench.serving.engine.model import Decoder, preset
    from servebench.serving.engine.runner import run_workload
    from servebench.serving.scheduler import SchedulerConfig
    from servebench.serving.workload import ArrivalSpec, ClassSpec, LengthSpec, WorkloadSpec
    model = Decoder(preset("tiny"), seed=7)
    # seed 6 draws chat, chat, chat, chat, document, chat, chat, chat: four streams run when the document arrives
    # arrivals 50 ms apart and 400-token answers: the chats have their first tokens and still stream when the
    # document arrives at 200 ms, on any machine that decodes a step in 0.3 ms or more
    wl = WorkloadSpec(arrival=ArrivalSpec(kind="constant", rate_rps=20), num_requests=8, classes=[
        ClassSpec(name="chat", weight=3, prompt=LengthSpec(kind="fixed", value=16),
                  output=LengthSpec(kind="fixed", value=400)),
        ClassSpec(name="document", weight=1, prompt=LengthSpec(kind="fixed", value=1500),
                  output=LengthSpec(kind="fixed", value=4))])

    def largest_prefill_in_a_chat_gap(chunked: bool) -> int:
        """The most prompt tokens one step prefilled between two consecutive tokens of a running chat stream.

        The tiny model prefills 1,500 tokens in about a millisecond, so the stall's wall-clock size drowns in
        a busy machine's noise; what the streams waited through is exact: the step trace says which steps ran
        inside each chat's gaps and how many prompt tokens each prefilled.
        """
        cfg = SchedulerConfig(kv_budget_tokens=8192, policy="reserve", max_num_seqs=8, chunked_prefill=chunked,
                              max_num_batched_tokens=64 if chunked else None)
        run = run_workload(model, cfg, wl, seed=6, warmup_steps=2)
        chats = [r for r in run.records if r.get("slice") == "chat" and r["status"] == "success"]
        assert any(r.get("slice") == "document" for r in run.records)
        worst = 0
        for r in chats:
            times = np.asarray(r["token_times"])
            assert np.all(np.diff(times) >= 0)
            for before, after in zip(times[:-1], times[1:]):  # a step emits its tokens when its compute ends
                inside = [s.prefill_tokens for s in run.steps
                          if before < s.compute_start_s + s.compute_s <= after]
                worst = max([worst, *inside])
        return worst

    whole, chunked = largest_prefill_in_a_chat_gap(chunked=False), largest_prefill_in_a_chat_gap(chunked=True)
    assert chunked <= 64 < whole  # whole prompts put the 1,500-token prefill inside running streams' gaps


# --------------------------------------------------------------------------- figures, report site, dashboard


def test_figures_show_itl_stalls_and_the_slowest_requests_ticks():
    table = load(STALL_FIXTURE)
    cdf = itl_cdf(table)
    assert cdf.data[0].x.max() == 2.0 and "p99 2 s" in cdf.layout.title.text
    bins = stall_bins(table)  # the threshold by default: 4x the median gap
    assert bins.threshold_s == 4 * STEADY_GAP_S and bins.n == 2 and bins.over == 1
    assert bins.edges_s[0] == STEADY_GAP_S and bins.edges_s[-1] == 2.0  # the two successes' longest gaps
    assert bins.counts[0] == 1 and bins.counts[-1] == 1 and bins.counts.sum() == 2
    hist = stall_histogram(table, threshold_s=0.25)
    assert list(hist.data[0].y) == bins.counts.tolist() and "1 (50%) stalled over 0.25 s" in hist.layout.title.text
    ticks = token_timeline(table, count=2)
    rows = {trace.y[0] for trace in ticks.data}
    assert len(rows) == 2 and max(len(t.x) for t in ticks.data) == 10  # the slowest has 10 tokens
    assert itl_cdf(load([STALL_FIXTURE[3]])) is None
    assert stall_bins(load([STALL_FIXTURE[3]])) is None and token_ticks(load([STALL_FIXTURE[3]])) is None


def test_dashboard_charts_draw_the_numbers_of_the_report_site_figures():
    """Token timing's Vega-Lite charts and the site's plotly figures come from the same series, bins and ticks."""
    table = load([*STALL_FIXTURE, streamed(4.0, 4.5, [STEADY_GAP_S], request_id="\x1b[31m<b>x</b>")])
    itl = vegalite.cdf_chart(itl_series(table), y_title="share of gaps")
    curve = itl["datasets"]["cdf"]
    assert curve["x"].max() == 2.0 and curve["share"].iloc[-1] == 1.0 and curve["share"].iloc[0] == 0.0
    assert list(itl_cdf(table).data[0].x) == curve["x"].tolist()
    assert itl["layer"][0]["encoding"]["y"]["title"] == "share of gaps"
    bins = stall_bins(table, 0.25)
    stall = vegalite_tokens.stall_chart(bins)
    assert stall["datasets"]["bins"]["requests"].tolist() == bins.counts.tolist() == list(stall_histogram(table, 0.25).data[0].y)
    assert stall["layer"][1]["data"]["values"][0]["lo"] == 0.25 and "1 (33.3%) stalled over 0.25 s" in stall["title"]["subtitle"]
    ticks = vegalite_tokens.ticks_chart(token_ticks(table, count=3))
    rows = ticks["datasets"]["ticks"].groupby("request", sort=False)["t"]
    assert list(rows.size()) == [6, 10, 2]  # the slowest first: 2.5 s, 1.0625 s, then the new one's 0.5625 s
    assert rows.min().tolist() == [0.25, 0.5, 0.5]  # each row's first tick is its TTFT
    assert ticks["layer"][0]["encoding"]["y"]["sort"][2] == "3. \\x1b[31m<b>x</b>"  # as typed, the escape shown
    gaps = ticks["datasets"]["gaps"]
    assert gaps.iloc[0][["from", "to"]].tolist() == [0.375, 2.375] and gaps.iloc[0]["about"] == "longest gap 2 s"


def test_token_ticks_the_stall_line_and_the_prefill_bars_read_in_ms_when_asked():
    """The ticks, the stall threshold under the histogram and the prefill bars take the page's unit (issue 36)."""
    table = load(STALL_FIXTURE)
    rows = token_ticks(table, count=2)
    in_s, in_ms = vegalite_tokens.ticks_chart(rows), vegalite_tokens.ticks_chart(rows, "ms")
    for name in ("ticks", "spans", "gaps"):
        for column in ({"t"} if name == "ticks" else {"from", "to"}):
            assert (in_ms["datasets"][name][column] == in_s["datasets"][name][column] * 1000).all()
    assert in_ms["layer"][0]["encoding"]["x"]["title"].startswith("milliseconds since the request started")
    assert in_ms["datasets"]["gaps"].iloc[0]["about"] == "longest gap 2,000 ms"
    stall = vegalite_tokens.stall_chart(stall_bins(table, 0.25), "ms")
    assert "1 (50%) stalled over 250 ms" in stall["title"]["subtitle"]
    values = {"chunked prefill": {"TTFT p95": 1.5, "ITL p99": 0.02, "longest stall p95": None},
              "whole-prompt prefill": {"TTFT p95": 0.75, "ITL p99": 0.25, "longest stall p95": 0.3}}
    bars = vegalite_tokens.prefill_chart(values, "ms")
    assert bars["datasets"]["bars"]["label"].tolist() == ["1,500 ms", "20 ms", "750 ms", "250 ms", "300 ms"]
    assert bars["encoding"]["y"]["title"] == "milliseconds"


def test_report_site_has_a_token_timing_section(tmp_path):
    path = tmp_path / "stall.jsonl"
    path.write_bytes(jsonl(STALL_FIXTURE))
    result = CliRunner().invoke(app, ["report", str(path), "-o", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    page = next((tmp_path / "site").glob("run-*.html")).read_text()
    assert 'id="tokens"' in page and "Token timing" in page and "requests stalled over" in page


def test_dashboard_token_timing_page_and_percentile_explorer_offer_itl():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/token_timing.py").run()
    assert not at.exception
    assert any("no `token_times`" in i.value for i in at.info)  # the sample records have none
    at.radio(key="tok_q1").set_value("chunked")
    at.radio(key="tok_q2").set_value("chunked").run()
    at.button(key="tok_reveal").click().run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown)
    assert "Stalls: **chunked** (right)" in text and "**whole-prompt** (not what you predicted)" in text
    charts = drawn_list(at)
    assert not at.get("plotly_chart") and len(charts) == 3  # the bars and each policy's stall histogram
    bars = charts[0][1]["bars"].set_index(["metric", "policy"])["value"]
    stall = bars.loc["longest stall p95"]
    assert stall["chunked prefill"] < stall["whole-prompt prefill"]
    # the bars are the numbers in the sentence, both in ms (the page's unit), as the ITL numbers above them
    assert f"vs {fmt(stall['whole-prompt prefill'])} ms" in text and not re.search(r"\d s\b", text)
    assert 1 < stall["whole-prompt prefill"] < 10_000  # a stall of tens to thousands of ms, not 0.x (seconds)
    assert charts[0][0]["encoding"]["y"]["title"] == "milliseconds"
    hists = [frames["bins"] for spec, frames in charts[1:]]
    assert all(spec["title"]["text"] == "Longest stall per request" for spec, _ in charts[1:])
    assert all(spec["layer"][0]["encoding"]["x"]["title"] == "longest gap between tokens, ms" for spec, _ in charts[1:])
    assert hists[0]["requests"].sum() > 0 and hists[0]["hi"].max() < hists[1]["hi"].max()  # whole prompts stall longer


def test_dashboard_shows_uploaded_token_times_and_the_percentile_explorer_offers_itl():
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(str(Path(__file__).resolve().parent.parent / "app.py"), default_timeout=120)
    at.run()
    at.file_uploader(key="records_upload").set_value(("stall.jsonl", jsonl(STALL_FIXTURE), "application/jsonl")).run()
    at.switch_page("pages/token_timing.py").run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    # times in ms by default, the unit in each label (the ITL read '2' with no unit), shares through fmt_share
    assert metrics["ITL p99 (ms)"] == "2,000" and metrics["Requests stalled"] == "50%"
    assert all(m.help for m in at.metric[:5])  # every number says what it means
    charts = drawn_charts(at)
    assert not at.get("plotly_chart")
    itl = charts["ITL: every gap between tokens"][1]["cdf"]
    assert itl["x"].max() == 2000.0 and itl["share"].iloc[-1] == 1.0
    assert charts["TTFT"][1]["marks"]["x"].tolist() == [250, 500, 500]  # p50, p95, p99 of TTFTs 0.5, 0.25, 0.125 s
    assert charts["Longest stall per request"][1]["bins"]["requests"].sum() == 2
    tick_spec, tick_data = charts["Token ticks of the 3 slowest successes"]
    ticks = tick_data["ticks"]
    assert ticks.groupby("request", sort=False).size().tolist() == [6, 10, 1]
    # in ms, as the ITL numbers and CDFs beside it: each row's first tick is its TTFT (0.25 s, 0.5 s, 0.125 s)
    assert ticks.groupby("request", sort=False)["t"].min().tolist() == [250.0, 500.0, 125.0]
    assert tick_spec["layer"][0]["encoding"]["x"]["title"].startswith("milliseconds since the request started")
    stall_spec, _ = charts["Longest stall per request"]
    assert stall_spec["layer"][0]["encoding"]["x"]["title"] == "longest gap between tokens, ms"
    assert not [line for line in stall_spec["title"]["subtitle"] if re.search(r"\d s\b", line)]
    at.switch_page("pages/percentiles.py").run()
    at.selectbox(key="metric").select("itl").run()
    at.number_input(key="q_input").set_value(99.0).run()
    assert not at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Gaps counted"] == "14" and metrics["p99 (success-only, ms)"] == "2,000"


def test_token_times_given_under_both_names_with_different_values_is_refused():
    rec = {**STALL_FIXTURE[2], "tokenTimes": [2.0]}
    assert "given twice, as 'token_times' ([2.125]) and as 'tokenTimes' ([2.0])" in error_of([rec])


def test_simulate_both_prefill_policies_and_report_them_side_by_side(tmp_path):
    scenario = str(SCENARIOS / "prefill_interference.yaml")
    runner = CliRunner()
    for policy in ("chunked", "whole"):
        result = runner.invoke(app, ["simulate", scenario, "--prefill", policy, "--requests", "150",
                                     "-o", str(tmp_path / policy)])
        assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["report", str(tmp_path / "chunked"), str(tmp_path / "whole"), "-o", str(tmp_path / "site")])
    assert result.exit_code == 0, result.output
    index = (tmp_path / "site" / "index.html").read_text()
    row = re.search(r"longest stall p95, s</td><td>([\d.]+)</td><td>([\d.]+)</td>", index)
    assert row is not None and float(row.group(1)) < float(row.group(2))
    bad = subprocess.run([sys.executable, "-m", "servebench", "simulate", scenario, "--prefill", "halfway",
                          "-o", str(tmp_path / "x")], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --prefill 'halfway': expected chunked or whole"


def test_a_record_set_of_parts_keeps_every_parts_token_times(tmp_path):
    (tmp_path / "a.jsonl").write_bytes(jsonl(STALL_FIXTURE[:2]))
    (tmp_path / "b.jsonl").write_bytes(jsonl(STALL_FIXTURE[2:]))
    result = CliRunner().invoke(app, ["summarize", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["itl_s"]["n"] == 14
