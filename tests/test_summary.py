"""The spec's summary contract, checked against its fixture and a literal record-by-record oracle."""

from __future__ import annotations

import copy
import math
import random
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench import CONTRACT_FIELDS, SLO, summarize
from servebench.analysis.summary import build_report
from servebench.records.schema import FIELDS, parse_objects
from servebench.records.table import first_violation, validate


def oracle(records, ws, we):
    """The spec's text, written as plainly as possible: an independent reference for summarize."""
    def num(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if not (num(ws) and num(we) and we > ws):
        raise ValueError("Invalid observation window")
    if not isinstance(records, list) or not records:
        raise ValueError("Expected nonempty records")
    for r in records:
        if not isinstance(r, dict):
            raise ValueError("Record must be an object")
        s, e = r.get("start"), r.get("end")
        if not (num(s) and num(e) and ws <= s <= e <= we):
            raise ValueError("Invalid request times")
        if r.get("status") not in ("success", "failed", "timeout", "cancelled", "rejected"):
            raise ValueError("Invalid status")
        if r["status"] == "success":
            f, o = r.get("first_token"), r.get("output_tokens")
            if not (num(f) and s <= f <= e and isinstance(o, int) and not isinstance(o, bool) and o >= 1):
                raise ValueError("Invalid successful output")

    def p95(vals):
        if not vals:
            return None
        return sorted(vals)[max(0, math.ceil(0.95 * len(vals)) - 1)]

    ok = [r for r in records if r["status"] == "success"]
    w = we - ws
    return {
        "requests": len(records),
        "successes": len(ok),
        "non_success_fraction": 1 - len(ok) / len(records),
        "successful_requests_per_second": len(ok) / w,
        "successful_output_tokens_per_second": sum(r["output_tokens"] for r in ok) / w,
        "success_latency_p95_s": p95([r["end"] - r["start"] for r in ok]),
        "success_ttft_p95_s": p95([r["first_token"] - r["start"] for r in ok]),
        "success_request_tpot_p95_s": p95([(r["end"] - r["first_token"]) / (r["output_tokens"] - 1)
                                           for r in ok if r["output_tokens"] > 1]),
    }


def rounded(d):
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


def test_r1_r4_fixture_matches_the_spec(r1_r4):
    result = summarize(r1_r4, 0, 10)
    assert tuple(result) == CONTRACT_FIELDS
    assert rounded(result) == {
        "requests": 4,                                   # R1-R4
        "successes": 2,                                  # R1, R2
        "non_success_fraction": 0.5,                     # R3 timeout, R4 rejected
        "successful_requests_per_second": 0.2,           # 2 successes / 10 s
        "successful_output_tokens_per_second": 1.0,      # (9 + 1) tokens / 10 s
        "success_latency_p95_s": 2.5,                    # R1: 2.5 - 0
        "success_ttft_p95_s": 0.5,                       # R1: 0.5 - 0
        "success_request_tpot_p95_s": 0.25,              # R1 only: (2.5 - 0.5) / 8; R2 has one token
    }


def test_metrics_with_no_values_are_none():
    result = summarize([{"start": 0, "end": 1, "status": "failed"},
                        {"start": 0, "first_token": 0.5, "end": 0.5, "status": "success", "output_tokens": 1}], 0, 1)
    assert result["success_request_tpot_p95_s"] is None
    all_failed = summarize([{"start": 0, "end": 1, "status": "timeout"}], 0, 1)
    assert all_failed["successes"] == 0 and all_failed["non_success_fraction"] == 1
    assert all_failed["success_latency_p95_s"] is None and all_failed["success_ttft_p95_s"] is None
    assert all_failed["successful_output_tokens_per_second"] == 0


OK = {"start": 1, "first_token": 2, "end": 3, "status": "success", "output_tokens": 3}


@pytest.mark.parametrize("records, ws, we, message", [
    ([OK], 0, 0, "Invalid observation window"),
    ([OK], 5, 1, "Invalid observation window"),
    ([OK], 0, math.inf, "Invalid observation window"),
    ([OK], math.nan, 10, "Invalid observation window"),
    ([OK], False, 10, "Invalid observation window"),
    ([OK], "0", 10, "Invalid observation window"),
    ([], 0, 10, "Expected nonempty records"),
    (None, 0, 10, "Expected nonempty records"),
    ({"start": 1}, 0, 10, "Expected nonempty records"),
    ((OK,), 0, 10, "Expected nonempty records"),
    ([OK, 7], 0, 10, "Record must be an object"),
    ([["start", 1]], 0, 10, "Record must be an object"),
    ([{**OK, "start": True}], 0, 10, "Invalid request times"),
    ([{**OK, "start": "1"}], 0, 10, "Invalid request times"),
    ([{**OK, "end": math.nan}], 0, 10, "Invalid request times"),
    ([{**OK, "end": math.inf}], 0, 10, "Invalid request times"),
    ([{"end": 3, "status": "failed"}], 0, 10, "Invalid request times"),
    ([{**OK, "start": -1}], 0, 10, "Invalid request times"),
    ([{**OK, "end": 11}], 0, 10, "Invalid request times"),
    ([{**OK, "start": 4}], 0, 10, "Invalid request times"),
    # times are checked before status, status before the successful output
    ([{"start": 4, "end": 3, "status": "bogus"}], 0, 10, "Invalid request times"),
    ([{"start": 1, "end": 3, "status": "bogus", "first_token": 99}], 0, 10, "Invalid status"),
    ([{"start": 1, "end": 3, "status": "Success"}], 0, 10, "Invalid status"),
    ([{"start": 1, "end": 3}], 0, 10, "Invalid status"),
    ([{**OK, "first_token": None}], 0, 10, "Invalid successful output"),
    ([{**OK, "first_token": 0.5}], 0, 10, "Invalid successful output"),
    ([{**OK, "first_token": 3.5}], 0, 10, "Invalid successful output"),
    ([{**OK, "first_token": True}], 0, 10, "Invalid successful output"),
    ([{**OK, "output_tokens": 9.0}], 0, 10, "Invalid successful output"),
    ([{**OK, "output_tokens": True}], 0, 10, "Invalid successful output"),
    ([{**OK, "output_tokens": 0}], 0, 10, "Invalid successful output"),
    ([{k: v for k, v in OK.items() if k != "output_tokens"}], 0, 10, "Invalid successful output"),
    # record by record: the first record's error wins over a later record's earlier rule
    ([{**OK, "output_tokens": 0}, {"start": 5, "end": 1, "status": "failed"}], 0, 10,
     "Invalid successful output"),
])
def test_validation_order_and_messages(records, ws, we, message):
    with pytest.raises(ValueError) as info:
        summarize(records, ws, we)
    assert str(info.value) == message
    with pytest.raises(ValueError) as ref:
        oracle(records, ws, we)
    assert str(ref.value) == message


def test_non_success_needs_only_start_and_end():
    result = summarize([{"start": 0, "end": 1, "status": "cancelled", "first_token": "junk"}], 0, 1)
    assert result["requests"] == 1


def test_camel_case_keys_and_unknown_keys_are_accepted():
    rec = {"id": "R1", "start": 0, "firstToken": 0.5, "end": 2.5, "status": "success", "outputTokens": 9,
           "note": "ignored by the contract"}
    assert summarize([rec], 0, 10)["success_ttft_p95_s"] == 0.5


# --------------------------------------------------------------------------- properties

finite = st.floats(min_value=0, max_value=10, allow_nan=False)
field_value = st.one_of(finite, st.integers(-2, 12), st.booleans(), st.none(), st.just(math.nan),
                        st.just(math.inf), st.text(max_size=2), st.just(9.0))
status = st.sampled_from(["success", "failed", "timeout", "cancelled", "rejected", "bogus", None])


@st.composite
def valid_record(draw):
    s = draw(finite)
    e = draw(st.floats(min_value=s, max_value=10))
    stat = draw(st.sampled_from(["success", "failed", "timeout", "cancelled", "rejected"]))
    rec = {"start": s, "end": e, "status": stat}
    if stat == "success":
        rec["first_token"] = draw(st.floats(min_value=s, max_value=e))
        rec["output_tokens"] = draw(st.integers(1, 50))
    return rec


@st.composite
def messy_record(draw):
    rec = draw(valid_record())
    for key in ("start", "end", "first_token", "output_tokens"):
        if draw(st.integers(0, 9)) == 0:
            rec[key] = draw(field_value)
    if draw(st.integers(0, 9)) == 0:
        rec["status"] = draw(status)
    if draw(st.integers(0, 29)) == 0:
        return draw(st.sampled_from([None, 3, "record", ["start"]]))
    return rec


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(messy_record(), min_size=1, max_size=8))
def test_summarize_agrees_with_the_literal_oracle(records):
    try:
        expected = oracle(records, 0, 10)
    except ValueError as exc:
        with pytest.raises(ValueError) as info:
            summarize(records, 0, 10)
        assert str(info.value) == str(exc)
    else:
        assert summarize(records, 0, 10) == pytest.approx(expected)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(valid_record(), min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_permutation_invariant_and_input_unchanged(records, rnd):
    before = copy.deepcopy(records)
    ids = [id(r) for r in records]
    first = summarize(records, 0, 10)
    assert records == before and [id(r) for r in records] == ids
    shuffled = list(records)
    rnd.shuffle(shuffled)
    assert summarize(shuffled, 0, 10) == first


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(valid_record(), min_size=1, max_size=40))
def test_report_conserves_counts(records):
    table = validate(parse_objects(records), 0, 10)
    report = build_report(table, 0, 10, SLO(ttft_s=1.0))
    assert sum(report.by_status.values()) == report.offered == len(records)
    assert report.accepted == report.offered - report.rejected
    assert sum(report.by_cause.values()) == report.offered - report.completed
    assert report.total_output_tokens == report.successful_output_tokens + report.wasted_output_tokens
    assert report.slo.good_requests <= report.completed
    assert report.summary == summarize(records, 0, 10)


# --------------------------------------------------------------------------- the full report

def table_of(records, ws=0.0, we=10.0):
    return validate(parse_objects(records), ws, we)


def test_failure_aware_view_never_looks_faster_than_success_only():
    fast_but_rejecting = [{"start": i, "first_token": i + 0.1, "end": i + 0.2, "status": "success",
                           "output_tokens": 2} for i in range(5)]
    fast_but_rejecting += [{"start": 5 + i * 0.1, "end": 5 + i * 0.1, "status": "rejected"} for i in range(5)]
    report = build_report(table_of(fast_but_rejecting), 0, 10)
    assert report.latency_s.at(95) == pytest.approx(0.2)
    assert report.failure_aware_latency_s.at(95) == math.inf
    assert report.failure_aware_latency_s.at(50) == pytest.approx(0.2)
    assert report.failure_aware_latency_s.mean is None  # an infinite mean is not reported as a number


def test_slo_attainment_counts_failures_as_misses():
    recs = [
        {"start": 0, "first_token": 0.2, "end": 1.2, "status": "success", "output_tokens": 11},  # tpot 0.1
        {"start": 1, "first_token": 2.5, "end": 3.0, "status": "success", "output_tokens": 6},   # ttft 1.5
        {"start": 2, "first_token": 2.1, "end": 2.1, "status": "success", "output_tokens": 1},   # tpot n/a
        {"start": 3, "end": 4, "status": "failed", "output_tokens": 7, "error": "500"},
    ]
    report = build_report(table_of(recs), 0, 10, SLO(ttft_s=1.0, tpot_s=0.2))
    assert report.slo.good_requests == 2
    assert report.slo.attainment == 0.5
    assert report.slo.goodput_requests_per_second == pytest.approx(0.2)
    assert report.slo.goodput_output_tokens_per_second == pytest.approx(1.2)
    assert report.wasted_output_tokens == 7
    assert report.by_cause == {"500": 1}


def test_stage_breakdown_and_in_service_from_admission_times():
    recs = [
        {"start": 0, "admitted": 1, "first_token": 1.5, "end": 3, "status": "success", "output_tokens": 4},
        {"start": 0.5, "admitted": 3, "first_token": 4, "end": 5, "status": "success", "output_tokens": 2},
    ]
    report = build_report(table_of(recs, 0, 5), 0, 5)
    assert report.queue_wait_s.at(95) == pytest.approx(2.5)
    assert report.prefill_s.at(50) == pytest.approx(0.5)
    assert report.active_requests.peak == 2
    assert report.in_service.peak == 1
    assert report.in_service.time_at_peak_s == pytest.approx(4.0)


def test_duplicates_slices_and_confidence_intervals():
    rng = np.random.default_rng(7)
    recs = []
    for i in range(300):
        s = float(rng.uniform(0, 50))
        recs.append({"request_id": f"r{i % 299}", "start": s, "first_token": s + 0.1, "end": s + 1,
                     "status": "success", "output_tokens": 10, "slice": "a" if i % 3 else "b"})
    report = build_report(table_of(recs, 0, 60), 0, 60)
    assert report.duplicate_request_ids == 1 and report.duplicate_request_id_examples == ["r0"]
    assert set(report.slices) == {"a", "b"}
    assert report.slices["a"].offered + report.slices["b"].offered == 300
    p95, p99 = report.latency_s.percentiles[2], report.latency_s.percentiles[3]
    assert p95.q == 95 and p95.ci_low is not None and p95.ci_high is not None
    assert p99.q == 99 and p99.ci_low is not None
    assert p99.ci_high is None  # 300 requests cannot bound p99 from above at 95% confidence


def test_report_json_is_strict_json():
    import json
    report = build_report(table_of([{"start": 0, "end": 1, "status": "timeout"}]), 0, 10)
    doc = json.loads(report.model_dump_json())
    assert doc["failure_aware_latency_s"]["percentiles"][0]["value"] == "Infinity"
    assert doc["latency_s"]["percentiles"][0]["value"] is None


def test_random_order_gives_the_same_report():
    rng = random.Random(3)
    recs = [{"start": i * 0.1, "first_token": i * 0.1 + 0.05, "end": i * 0.1 + 0.3 + (i % 7) * 0.01,
             "status": "success", "output_tokens": 5 + i % 4, "slice": "ab"[i % 2]} for i in range(60)]
    a = build_report(table_of(recs), 0, 10)
    rng.shuffle(recs)
    # means are summed over sorted values, so even they are exactly the same in any row order
    assert build_report(table_of(recs), 0, 10) == a


# --------------------------------------------------------------------------- against a per-record loop

def _per_record_loop():
    """The benchmark's straightforward per-record loop: the report must agree with it."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "summary.py"
    spec = importlib.util.spec_from_file_location("bench_summary", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module._loop_report


@st.composite
def rich_record(draw):
    rec = draw(valid_record())
    if draw(st.booleans()):
        upper = rec.get("first_token", rec["end"])
        rec["admitted"] = draw(st.floats(min_value=rec["start"], max_value=upper))
    if rec["status"] != "success" and draw(st.booleans()):
        rec["output_tokens"] = draw(st.integers(0, 20))
        rec["error"] = draw(st.sampled_from(["timeout", "HTTP 500", "", "unspecified"]))
    rec["request_id"] = draw(st.sampled_from(["r1", "r2", "r3", None]) | st.uuids().map(str))
    rec["slice"] = draw(st.sampled_from(["chat", "batch", None]))
    if draw(st.integers(0, 3)):  # absent now and then: the report adds up the counts present
        rec["prompt_tokens"] = draw(st.integers(0, 100))
    return rec


def _same_distribution(ours, loop):
    if loop is None:
        assert ours is None or ours.n == 0
        return
    assert ours.max == loop["max"]
    assert ours.mean == pytest.approx(loop["mean"]) if loop["mean"] is not None else ours.mean is None
    for p in ours.percentiles:
        assert (p.value, p.ci_low, p.ci_high) == loop[int(p.q)]


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(rich_record(), min_size=1, max_size=40))
def test_report_and_every_slice_agree_with_a_per_record_loop(records):
    loop_report = _per_record_loop()
    table = table_of(records)
    report = build_report(table, 0, 10, SLO(ttft_s=1.0, tpot_s=0.05))
    rows = [{name: rec.get(name) for name in FIELDS} for rec in table.to_dicts()]
    views = [(report, rows, True)] + [(report.slices[name], [r for r in rows if r["slice"] == name], False)
                                      for name in report.slices]
    assert set(report.slices) == {r["slice"] for r in rows} - {None}
    for ours, subset, whole in views:
        ref = loop_report(subset, 0, 10, with_duplicates=whole)
        assert {k: v for k, v in ours.by_status.items() if v} == ref["by_status"]
        assert ours.by_cause == ref["by_cause"]
        if whole:
            assert ours.duplicate_request_ids == ref["duplicates"]
        assert (ours.total_output_tokens, ours.successful_output_tokens) == ref["tokens"]
        prompts = [r["prompt_tokens"] for r in subset if r["prompt_tokens"] is not None]
        assert ours.total_prompt_tokens == (sum(prompts) if prompts else None)
        assert (ours.slo.good_requests, round(ours.slo.goodput_output_tokens_per_second * 10)) == ref["slo"]
        assert ours.active_requests.peak == ref["active"][0]
        assert ours.active_requests.time_at_peak_s == pytest.approx(ref["active"][1])
        if ours.in_service is not None:
            assert ours.in_service.peak == ref["in_service"][0]
            assert ours.in_service.time_at_peak_s == pytest.approx(ref["in_service"][1])
        for name, key in (("latency_s", "latency"), ("ttft_s", "ttft"), ("request_tpot_s", "tpot"),
                          ("queue_wait_s", "wait"), ("prefill_s", "prefill"),
                          ("failure_aware_latency_s", "fa_latency"), ("failure_aware_ttft_s", "fa_ttft")):
            _same_distribution(getattr(ours, name), ref[key])


def test_threaded_report_equals_the_inline_one(monkeypatch):
    rng = np.random.default_rng(11)
    recs = []
    for i in range(2000):
        s = float(rng.uniform(0, 50))
        ok = rng.random() < 0.8
        rec = {"request_id": f"r{i % 1990}", "start": s, "end": s + 2, "status": "success" if ok else "timeout",
               "slice": ["chat", "batch", "eval"][i % 3], "admitted": s + 0.5, "error": None if ok else "deadline"}
        if ok:
            rec.update(first_token=s + 1, output_tokens=int(rng.integers(1, 20)))
        recs.append(rec)
    table = table_of(recs, 0, 60)
    monkeypatch.setattr("servebench.analysis.summary._PARALLEL_MIN_ROWS", 10**9)
    inline = build_report(table, 0, 60, SLO(ttft_s=0.9))
    monkeypatch.setattr("servebench.analysis.summary._PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr("servebench.analysis.summary.os.cpu_count", lambda: 4)
    assert build_report(table, 0, 60, SLO(ttft_s=0.9)) == inline
    monkeypatch.setattr("servebench.analysis.summary._VIEWS_AT_ONCE_MAX_ROWS", 0)  # views one at a time
    assert build_report(table, 0, 60, SLO(ttft_s=0.9)) == inline
    assert inline.duplicate_request_ids == 10 and set(inline.slices) == {"batch", "chat", "eval"}


@pytest.mark.parametrize("n_slices", [3, 12])  # a pass per slice, or one sort for many slices
def test_each_slice_report_is_the_report_of_its_rows_alone(n_slices):
    rng = np.random.default_rng(n_slices)
    recs = []
    for i in range(400):
        s = float(rng.uniform(0, 50))
        rec = {"start": s, "first_token": s + 0.2, "end": s + float(rng.uniform(0.3, 5)), "status": "success",
               "output_tokens": int(rng.integers(1, 30)), "admitted": s + 0.1}
        if i % 7:
            rec["slice"] = f"tenant-{int(rng.integers(n_slices)):02d}"
        recs.append(rec)
    table = table_of(recs, 0, 60)
    report = build_report(table, 0, 60)
    names = sorted({r["slice"] for r in recs if "slice" in r})
    assert list(report.slices) == names
    for name in names:
        alone = build_report(table.take(table.slice == name), 0, 60, by_slice=False)
        assert report.slices[name] == alone


# --------------------------------------------------------------------------- issue 14: unrepresentable values


@pytest.mark.parametrize("records, window, message", [
    ([{"start": 10**400, "end": 1, "status": "failed"}], (0, 10), "Invalid request times"),
    ([{"start": 0, "end": -10**400, "status": "failed"}], (0, 10), "Invalid request times"),
    ([{"start": 0, "end": 1, "status": "failed"}], (0, 10**400), "Invalid observation window"),
    ([{"start": 0, "end": 1, "status": "failed"}], (-10**400, 10), "Invalid observation window"),
    ([{"start": 0, "first_token": 10**400, "end": 1, "status": "success", "output_tokens": 2}], (0, 10),
     "Invalid successful output"),
    ([{"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 10**400}], (0, 10),
     "Invalid successful output"),
])
def test_unrepresentable_values_raise_the_spec_message_not_overflow(records, window, message):
    with pytest.raises(ValueError) as info:
        summarize(records, *window)
    assert str(info.value) == message and type(info.value) is not OverflowError


def test_fields_the_contract_does_not_read_cannot_break_it():
    records = [{"start": 0, "end": 1, "status": "timeout", "request_id": "\ud800", "error": "\udfff",
                "first_token": "abc", "slice": ["x"]}]
    assert summarize(records, 0, 10)["requests"] == 1


def test_token_sums_past_int64_stay_exact():
    big = 10**18 - 1
    records = [{"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": big}] * 20
    assert summarize(records, 0, 10)["successful_output_tokens_per_second"] == 20 * big / 10


# --------------------------------------------------------------------------- the whole file merged from its slices

def _whole_only(report):
    """The whole file's own fields: what a report measured without slices must equal."""
    return report.model_dump(exclude={"slices", "fairness", "duplicate_request_ids", "duplicate_request_id_examples"})


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.lists(rich_record(), min_size=1, max_size=40), st.booleans())
def test_whole_file_merged_from_its_slices_equals_it_measured_directly(records, reversed_order):
    """With slices, the whole file's report is merged from theirs (and the rows in no slice): exactly the same."""
    # in start order the file's own starts are used; out of order they are merged from the slices' sorted runs
    records.sort(key=lambda r: r["start"], reverse=reversed_order)
    table = table_of(records)
    slo = SLO(ttft_s=1.0, tpot_s=0.05)
    merged, measured = build_report(table, 0, 10, slo), build_report(table, 0, 10, slo, by_slice=False)
    assert _whole_only(merged) == _whole_only(measured)


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(rich_record(), min_size=8, max_size=40, unique_by=lambda r: r["end"] - r["start"]), st.booleans())
def test_sorting_or_partitioning_the_distributions_gives_the_same_report(records, reversed_order):
    """Which of the two a CPU does faster (percentiles.sort_is_cheaper) changes no field, with or without slices."""
    records.sort(key=lambda r: r["start"], reverse=reversed_order)
    table = table_of(records)
    slo = SLO(ttft_s=1.0, tpot_s=0.05)
    reports = []
    for sort in (True, False):
        with mock.patch("servebench.analysis.percentiles.sort_is_cheaper", lambda sort=sort: sort), \
                mock.patch("servebench.analysis.summary.sort_is_cheaper", lambda sort=sort: sort):
            reports.append([build_report(table, 0, 10, slo), build_report(table, 0, 10, slo, by_slice=False)])
    assert reports[0] == reports[1]


def test_merged_whole_file_keeps_token_fields_and_the_itl_slo():
    rng = np.random.default_rng(5)
    recs = []
    for i in range(300):
        s = float(rng.uniform(0, 8))
        ok = rng.random() < 0.85
        rec = {"start": s, "end": s + 1.5, "status": "success" if ok else "failed",
               "slice": [None, "chat", "batch"][i % 3], "admitted": s + 0.1 if i % 4 else None}
        if ok:
            times = np.sort(s + 0.2 + rng.uniform(0, 1.3, 6)).tolist()
            rec.update(first_token=times[0], end=times[-1], output_tokens=6, token_times=times)
        recs.append(rec)
    table = table_of(recs)
    slo = SLO(ttft_s=0.5, tpot_s=0.5, itl_p99_s=0.4)
    merged, measured = build_report(table, 0, 10, slo), build_report(table, 0, 10, slo, by_slice=False)
    assert merged.itl_s is not None and merged.stalls is not None and merged.slo.good_requests > 0
    assert merged.in_service is not None and merged.queue_wait_s.n < merged.completed  # some lack admitted
    assert _whole_only(merged) == _whole_only(measured)


@st.composite
def messy_record_with_optional_fields(draw):
    rec = draw(messy_record())
    if isinstance(rec, dict):
        for key in ("admitted", "prompt_tokens", "request_id"):
            if draw(st.integers(0, 3)) == 0:
                rec[key] = draw(field_value)
    return rec


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(messy_record_with_optional_fields(), min_size=1, max_size=12), st.integers(1, 5))
def test_rules_checked_in_blocks_report_the_same_first_violation(records, block):
    """Validation runs over blocks of rows; the first bad row, field and words do not depend on the block."""
    from servebench.records import table as records_table
    found = []
    for size in (block, records_table._RULE_BLOCK):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(records_table, "_RULE_BLOCK", size)
            for optional in (False, True):
                v, _ = first_violation(parse_objects(copy.deepcopy(records)), 0.0, 10.0, optional_rules=optional)
                found.append(None if v is None else (v.row, v.field, v.message, v.detail))
    assert found[:2] == found[2:]
