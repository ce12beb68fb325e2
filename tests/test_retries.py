"""Tests for retrying clients, shedding and tenants in the simulator (servebench.serving.retry, simulate)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.percentiles import percentile
from servebench.records.schema import parse_objects
from servebench.records.table import RecordTable, validate
from servebench.serving.retry import ERR_CLIENT_DEADLINE, BackoffSpec, ClientSpec
from servebench.serving.scenario import CancelSpec, Scenario, load_scenario, parse_scenario
from servebench.serving.scheduler import ERR_QUEUE_WAIT, AdmissionSpec
from servebench.serving.simulate import simulate
from servebench.serving.workload import generate_workload

STORM = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios" / "retry_storm.yaml"


@pytest.fixture(scope="module")
def storm() -> Scenario:
    """The shipped retry storm, shortened to 40 s of arrivals so each run takes well under a second."""
    sc = load_scenario(STORM)
    return sc.model_copy(update={"workload": sc.workload.model_copy(update={"duration_s": 40.0})})


def with_policy(sc: Scenario, client: ClientSpec | None, wait_s: float | None = None) -> Scenario:
    server = sc.server.model_copy(update={"admission": None if wait_s is None else AdmissionSpec(max_queue_wait_s=wait_s)})
    return sc.model_copy(update={"client": client, "server": server})


def attempts_by_logical(t: RecordTable) -> dict[str, list[int]]:
    by: dict[str, list[int]] = defaultdict(list)
    for row, lg in enumerate(t.logical_id):
        by[lg].append(row)
    return {k: sorted(v, key=lambda r: int(t.attempt[r])) for k, v in by.items()}


def check_attempts(sc: Scenario, t: RecordTable) -> None:
    """Every property the issue asks of attempts, on one simulated run."""
    client = sc.client
    assert client is not None
    n = len(generate_workload(sc.workload, sc.rng()))
    by = attempts_by_logical(t)
    assert len(by) == n  # conservation per logical request: each one drawn is there
    assert len(set(t.request_id)) == len(t)  # one record per attempt, each its own request_id
    drawn = generate_workload(sc.workload, sc.rng()).output_tokens
    for lg, rows in by.items():
        assert [int(t.attempt[r]) for r in rows] == list(range(1, len(rows) + 1))
        assert len(rows) <= client.max_attempts
        first = float(t.start[rows[0]])
        deadline = first + (client.deadline_s or np.inf)
        for a, b in zip(rows, rows[1:]):
            assert t.start[b] >= t.end[a]  # never overlapping
            assert t.status[a] != 0  # only failures are retried
        for r in rows:
            assert t.start[r] < deadline  # no attempt starts at or after the deadline
            assert t.end[r] <= deadline + 1e-9
            if t.status[r] == 0:  # the answer is the retry's own, never joined to an earlier partial one
                assert t.output_tokens[r] == drawn[int(lg)]
        assert sum(t.status[r] == 0 for r in rows) <= 1


def test_immediate_retries_amplify_and_keep_every_attempt(storm: Scenario) -> None:
    sc = with_policy(storm, ClientSpec(max_attempts=4, deadline_s=60))
    t = simulate(sc, token_times=False).records
    check_attempts(sc, t)
    amplification = len(t) / len(set(t.logical_id))
    assert amplification > 1.5
    partial = (t.status != 0) & (t.output_tokens > 0)
    assert partial.any()  # timed out mid-answer: wasted tokens, kept in the failed attempt's record


def test_one_attempt_has_amplification_exactly_one(storm: Scenario) -> None:
    t = simulate(with_policy(storm, ClientSpec(max_attempts=1)), token_times=False).records
    assert len(t) == len(set(t.logical_id)) and set(t.attempt.tolist()) == {1}


def test_shedding_lowers_timeouts_at_the_same_offered_load(storm: Scenario) -> None:
    plain = simulate(with_policy(storm, None), token_times=False).records
    shed = simulate(with_policy(storm, None, wait_s=2.0), token_times=False).records
    assert len(plain) == len(shed)  # same arrivals
    timeouts = [int(np.sum(t.status == 2)) for t in (plain, shed)]
    assert timeouts[1] < timeouts[0] / 4
    assert set(shed.error[shed.status == 4]) == {ERR_QUEUE_WAIT}
    assert int(np.sum(shed.status == 0)) > int(np.sum(plain.status == 0))


def test_backoff_with_shedding_keeps_goodput_that_immediate_retries_lose(storm: Scenario) -> None:
    immediate = simulate(with_policy(storm, ClientSpec(max_attempts=4, deadline_s=60)), token_times=False).records
    calm = ClientSpec(max_attempts=3, deadline_s=60, backoff=BackoffSpec(base_s=1, multiplier=2, max_s=8))
    kept = simulate(with_policy(storm, calm, wait_s=2.0), token_times=False).records
    assert int(np.sum(kept.status == 0)) > 1.5 * int(np.sum(immediate.status == 0))


def test_client_deadline_cuts_an_attempt_and_says_so(storm: Scenario) -> None:
    sc = with_policy(storm, ClientSpec(max_attempts=2, deadline_s=8))
    t = simulate(sc, token_times=False).records
    check_attempts(sc, t)
    assert ERR_CLIENT_DEADLINE in set(t.error)


def test_simulated_attempts_are_valid_records(storm: Scenario) -> None:
    sc = with_policy(storm, ClientSpec(max_attempts=3, deadline_s=30, backoff=BackoffSpec(base_s=0.5)))
    t = simulate(sc).records
    dicts = t.to_dicts()
    assert {"logical_id", "attempt"} <= set(dicts[0])
    again = validate(parse_objects(dicts, strict_keys=True), float(t.start.min()), float(t.end.max()))
    assert again.attempt.tolist() == t.attempt.tolist() and again.logical_id.tolist() == t.logical_id.tolist()


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.integers(1, 4), st.sampled_from([0.0, 0.3, 2.0]), st.sampled_from(["full", "none"]),
       st.sampled_from([None, 5.0, 20.0]), st.sampled_from([None, 1.0]), st.sampled_from([None, 0.3]))
def test_attempt_properties_hold_for_any_policy(max_attempts: int, base_s: float, jitter: str,
                                                deadline_s: float | None, wait_s: float | None,
                                                cancel_p: float | None) -> None:
    sc = load_scenario(STORM)
    cancel = None if cancel_p is None else CancelSpec(probability=cancel_p, after_s=4.0)
    sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"duration_s": 12.0}), "cancel": cancel})
    client = ClientSpec(max_attempts=max_attempts, deadline_s=deadline_s,
                        backoff=BackoffSpec(base_s=base_s, max_s=4, jitter=jitter))  # type: ignore[arg-type]
    sc = with_policy(sc, client, wait_s)
    check_attempts(sc, simulate(sc, token_times=False).records)


def test_backoff_is_bounded_and_fits_the_deadline() -> None:
    b = BackoffSpec(base_s=1, multiplier=3, max_s=5, jitter="none")
    assert [b.delay_s(k, None) for k in (1, 2, 3, 4)] == [1, 3, 5, 5]
    rng = np.random.default_rng(3)
    full = BackoffSpec(base_s=1, multiplier=3, max_s=5)
    assert all(0 <= full.delay_s(4, rng) <= 5 for _ in range(50))
    c = ClientSpec(max_attempts=5, deadline_s=10, backoff=b)
    assert c.next_start(1, "timeout", None, end_s=8.0, first_start_s=0.0, rng=None) == 9.0
    assert c.next_start(2, "timeout", None, end_s=8.0, first_start_s=0.0, rng=None) is None  # 8 + 3 > 10
    assert c.next_start(1, "success", None, end_s=1.0, first_start_s=0.0, rng=None) is None
    assert c.next_start(5, "timeout", None, end_s=1.0, first_start_s=0.0, rng=None) is None  # out of attempts
    assert c.next_start(1, "rejected", None, 1.0, 0.0, None, retry_after_s=4.0) == 5.0  # Retry-After wins


TWO_TENANTS = {
    "name": "two_tenants", "seed": 5,
    "server": {"kv_budget_tokens": 200_000, "max_num_seqs": 8, "timeout_s": 600,
               "tenants": {"batch": {"weight": 1}, "chat": {"max_running": 1, "weight": 1}}},
    "step_model": {"base_s": 0.02, "per_decode_seq_s": 0.002, "per_prefill_token_s": 0.00002},
    "workload": {"arrival": {"kind": "poisson", "rate_rps": 1.6}, "duration_s": 60,
                 "classes": [{"tenant": "batch", "weight": 4, "prompt": {"kind": "fixed", "value": 800},
                              "output": {"kind": "fixed", "value": 200}},
                             {"tenant": "chat", "weight": 1, "prompt": {"kind": "fixed", "value": 200},
                              "output": {"kind": "fixed", "value": 50}}]},
}


def ttft_p95(t: RecordTable, slice_name: str) -> float:
    sel = (t.slice == slice_name) & (t.status == 0)
    value = percentile((t.first_token[sel] - t.start[sel]).tolist(), 95)
    assert value is not None
    return value


def max_concurrent(t: RecordTable, slice_name: str) -> int:
    sel = (t.slice == slice_name) & np.isfinite(t.admitted)
    events = sorted([(a, 1) for a in t.admitted[sel]] + [(e, -1) for e in t.end[sel]], key=lambda x: (x[0], x[1]))
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    return peak


def test_fair_gives_the_light_tenant_a_lower_ttft_tail_than_fcfs() -> None:
    fcfs = simulate(parse_scenario(TWO_TENANTS), token_times=False).records
    fair_spec = {**TWO_TENANTS, "server": {**TWO_TENANTS["server"], "scheduling": "fair"}}
    fair = simulate(parse_scenario(fair_spec), token_times=False).records
    assert set(fcfs.slice) == {"batch", "chat"}  # the tenant is the slice when the class names none
    assert ttft_p95(fair, "chat") < ttft_p95(fcfs, "chat") / 2
    for t in (fcfs, fair):
        assert max_concurrent(t, "chat") <= 1  # the tenant's cap holds, even when fair puts it first
    assert max_concurrent(fair, "batch") > 1


def test_a_named_class_keeps_its_own_slice() -> None:
    spec = {**TWO_TENANTS, "workload": {**TWO_TENANTS["workload"], "duration_s": 5}}
    spec["workload"]["classes"] = [{**spec["workload"]["classes"][0], "name": "nightly"},
                                   spec["workload"]["classes"][1]]
    t = simulate(parse_scenario(spec), token_times=False).records
    assert set(t.slice) <= {"nightly", "chat"}


def test_attempt_and_logical_id_are_validated_with_file_row_and_field() -> None:
    from servebench.errors import RecordValidationError
    from servebench.records.loaders import read_bytes as read

    def read_bytes(data: bytes, name: str) -> RecordTable:
        return validate(read(data, name).rows, -1e9, 1e9)

    ok = b'{"start": 0, "end": 1, "status": "timeout", "logical_id": "u1", "attempt": 1}\n'
    loaded = read_bytes(ok + b'{"start": 1, "end": 2, "status": "success", "first_token": 1.5, "output_tokens": 3, '
                        b'"logicalId": "u1", "attempt": 2}\n', "runs.jsonl")
    assert loaded.attempt.tolist() == [1, 2] and loaded.logical_id.tolist() == ["u1", "u1"]
    with pytest.raises(RecordValidationError) as err:
        read_bytes(ok + b'{"start": 1, "end": 2, "status": "timeout", "attempt": 0}\n', "runs.jsonl")
    assert str(err.value) == "runs.jsonl, row 2, field 'attempt': Invalid attempt: 0 must be at least 1"
    with pytest.raises(RecordValidationError, match="row 1, field 'attempt'.*not an integer"):
        read_bytes(b'{"start": 0, "end": 1, "status": "timeout", "attempt": 1.0}\n', "runs.jsonl")
    with pytest.raises(RecordValidationError, match="row 1, field 'logical_id'"):
        read_bytes(b'{"start": 0, "end": 1, "status": "timeout", "logical_id": 7.5}\n', "runs.jsonl")
    # an integer logical_id is read as text with a note, as an integer request_id is
    assert read_bytes(b'{"start": 0, "end": 1, "status": "timeout", "logical_id": 7}\n',
                      "runs.jsonl").logical_id.tolist() == ["7"]


def test_retry_policy_experiment_ranks_the_three_policies(storm: Scenario) -> None:
    from servebench.analysis.summary import SLO
    from servebench.serving.retry_experiment import BACKOFF_SHED, IMMEDIATE, NO_RETRY, retry_policies, run_variants
    rows = {run.label: run.row() for run in run_variants(retry_policies(storm), SLO(ttft_s=5))}
    assert rows[NO_RETRY]["amplification"] == 1.0 and rows[IMMEDIATE]["amplification"] > 1.5  # type: ignore[operator]
    assert rows[BACKOFF_SHED]["goodput, req/s"] > rows[NO_RETRY]["goodput, req/s"]  # type: ignore[operator]
    assert rows[BACKOFF_SHED]["goodput, req/s"] > rows[IMMEDIATE]["goodput, req/s"]  # type: ignore[operator]
    assert rows[IMMEDIATE]["logical requests"] == rows[NO_RETRY]["logical requests"]  # same arrivals


def test_shipped_two_tenant_scenario_is_fairer_under_fair() -> None:
    from servebench.analysis.summary import SLO
    from servebench.serving.retry_experiment import run_variants, scheduling_variants
    sc = load_scenario(STORM.parent / "two_tenants.yaml")
    runs = {run.label: run.report.fairness for run in run_variants(scheduling_variants(sc), SLO(ttft_s=5))}
    fcfs, fair = runs["fcfs"], runs["fair"]
    assert fcfs is not None and fair is not None
    assert fair.slices["chat"].ttft_p95_s < fcfs.slices["chat"].ttft_p95_s / 2  # type: ignore[operator]
    assert fair.jain_index > fcfs.jain_index  # type: ignore[operator]
