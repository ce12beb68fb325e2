"""Tests for the discrete-event simulator: conservation, determinism, KV bound, the spec's profiles."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import build_report
from servebench.errors import ConfigError
from servebench.records.schema import parse_objects
from servebench.records.table import STATUSES, validate
from servebench.serving.scenario import Scenario, load_scenario, parse_scenario
from servebench.serving.simulate import SimResult, simulate

SCENARIOS = Path(__file__).resolve().parent.parent / "sample_data" / "scenarios"


def scenario(server: dict[str, Any] | None = None, workload: dict[str, Any] | None = None,
             step: dict[str, Any] | None = None, **kw: Any) -> Scenario:
    """Return a small scenario: one class of 100-token prompts and 20-token outputs."""
    doc: dict[str, Any] = {
        "name": "t", "seed": 3,
        "server": {"kv_budget_tokens": 2000, **(server or {})},
        "step_model": step or {"base_s": 0.01, "per_prefill_token_s": 1e-4},
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 5.0}, "num_requests": 200,
                     "classes": [{"prompt": {"value": 100}, "output": {"value": 20}}], **(workload or {})},
        **kw,
    }
    return parse_scenario(doc)


def assert_valid(result: SimResult) -> None:
    """Every arrival has one terminal record, and the records pass validation."""
    table = result.records
    rows = parse_objects(table.to_dicts(), strict_keys=True)
    validate(rows, result.window_start_s, result.window_end_s)
    assert sum(result.status_counts().values()) == len(table)
    assert len(set(table.request_id.tolist())) == len(table)


def kv_within_budget(result: SimResult) -> bool:
    return len(result.trace) == 0 or int(result.trace.kv_tokens_used.max()) <= result.kv_budget_tokens


# --------------------------------------------------------------------------- properties

length = st.one_of(
    st.builds(lambda v: {"kind": "fixed", "value": v}, st.integers(1, 400)),
    st.builds(lambda lo, span: {"kind": "uniform", "low": lo, "high": lo + span}, st.integers(1, 200), st.integers(0, 300)),
    st.builds(lambda m, s: {"kind": "lognormal", "median": m, "sigma": s, "max_tokens": 600},
              st.integers(5, 300), st.floats(0.0, 1.2)),
)
arrival = st.one_of(
    st.builds(lambda r: {"kind": "poisson", "rate_rps": r}, st.floats(0.5, 60)),
    st.builds(lambda r, cv: {"kind": "gamma", "rate_rps": r, "cv": cv}, st.floats(0.5, 60), st.floats(0.3, 4)),
    st.builds(lambda r: {"kind": "constant", "rate_rps": r}, st.floats(0.5, 60)),
)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    policy = draw(st.sampled_from(["reserve", "paged"]))
    classes = [{"name": f"c{i}", "weight": draw(st.floats(0.1, 5)), "prompt": draw(length), "output": draw(length)}
               for i in range(draw(st.integers(1, 3)))]
    server = {
        "policy": policy, "kv_budget_tokens": draw(st.integers(1400, 6000)),
        "max_num_seqs": draw(st.integers(1, 64)),
        "max_num_batched_tokens": draw(st.sampled_from([None, 64, 512, 4096])),
        "chunked_prefill": draw(st.booleans()),
        "max_waiting": draw(st.sampled_from([None, 1, 3, 50])),
        "timeout_s": draw(st.sampled_from([None, 0.5, 5.0])),
        "prefill_lane": draw(st.sampled_from(["shared", "separate"])),
    }
    if draw(st.booleans()):
        wl: dict[str, Any] = {"arrival": draw(arrival), "num_requests": draw(st.integers(1, 120))}
    else:
        wl = {"closed_loop": {"users": draw(st.integers(1, 12)), "think_s": draw(st.floats(0, 1)),
                              "think": draw(st.sampled_from(["fixed", "exponential"]))},
              "num_requests": draw(st.integers(1, 120))}
    step = {"base_s": draw(st.floats(0.001, 0.05)), "per_prefill_token_s": draw(st.floats(0, 1e-3)),
            "per_decode_seq_s": draw(st.floats(0, 1e-3)), "per_kv_token_s": draw(st.floats(0, 1e-6))}
    cancel = draw(st.sampled_from([None, {"probability": 0.3, "after_s": 0.5}]))
    doc = {"name": "prop", "seed": draw(st.integers(0, 2**32 - 1)), "server": server, "step_model": step,
           "workload": {**wl, "classes": classes}, "cancel": cancel}
    return parse_scenario(doc)


@settings(max_examples=120, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_conservation_validity_and_kv_bound(sc: Scenario) -> None:
    result = simulate(sc)
    n = sc.workload.num_requests
    counts = result.status_counts()
    assert len(result.records) == n
    assert sum(counts.values()) == n  # offered = success + failed + timeout + cancelled + rejected
    assert_valid(result)
    assert kv_within_budget(result)
    assert np.all(result.trace.kv_tokens_held <= result.trace.kv_tokens_used)
    assert np.all(result.trace.kv_tokens_held >= 0)
    t = result.records
    ok = t.is_success
    assert np.all(t.output_tokens[ok] >= 1)
    # admitted requests have admission times; rejected ones never do
    rejected = t.status == STATUSES.index("rejected")
    assert np.all(np.isnan(t.admitted[rejected]))
    assert np.all(np.isfinite(t.admitted[ok]))
    if sc.server.timeout_s is not None:
        assert np.all(t.end - t.start <= sc.server.timeout_s + 1e-9)
    if sc.server.max_waiting is not None:
        assert np.all(result.trace.waiting <= sc.server.max_waiting)


@st.composite
def preempting_scenarios(draw: st.DrawFn) -> Scenario:
    """Paged KV a few requests outgrow, a short queue, arrivals faster than service: preemption into a full queue."""
    server = {"policy": "paged", "kv_budget_tokens": 16 * draw(st.integers(6, 30)),
              "max_num_seqs": draw(st.integers(2, 16)), "max_waiting": draw(st.integers(1, 5)),
              "max_num_batched_tokens": draw(st.sampled_from([None, 32, 128])), "chunked_prefill": draw(st.booleans()),
              "timeout_s": draw(st.sampled_from([None, 2.0])), "prefill_lane": draw(st.sampled_from(["shared", "separate"]))}
    out_high = draw(st.integers(20, 80))
    wl = {"arrival": {"kind": draw(st.sampled_from(["poisson", "constant"])), "rate_rps": draw(st.floats(5, 80))},
          "num_requests": draw(st.integers(5, 60)),
          "classes": [{"prompt": {"kind": "uniform", "low": 1, "high": draw(st.integers(1, 40))},
                       "output": {"kind": "uniform", "low": draw(st.integers(1, out_high)), "high": out_high}}]}
    doc = {"name": "preempt", "seed": draw(st.integers(0, 2**32 - 1)), "server": server,
           "step_model": {"base_s": 0.01, "per_prefill_token_s": 1e-4}, "workload": wl,
           "cancel": draw(st.sampled_from([None, {"probability": 0.2, "after_s": 0.3}]))}
    return parse_scenario(doc)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(preempting_scenarios())
def test_preemption_never_overfills_the_queue_and_conserves_requests(sc: Scenario) -> None:
    result = simulate(sc)
    n = sc.workload.num_requests
    assert len(result.records) == n and sum(result.status_counts().values()) == n
    assert_valid(result)
    assert kv_within_budget(result)
    assert sc.server.max_waiting is not None and np.all(result.trace.waiting <= sc.server.max_waiting)
    t = result.records
    dropped = t.error == "preempted_queue_full"
    assert np.all(t.status[dropped] == STATUSES.index("failed"))
    assert np.all(np.isfinite(t.admitted[dropped]))  # admitted, then dropped: never a rejection


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_decode_runs_match_step_by_step(sc: Scenario) -> None:
    # jumping over decode runs is exact: same records to the last bit, same number of steps
    fast = simulate(sc)
    slow = simulate(sc, decode_runs=False)
    assert fast.records.to_dicts() == slow.records.to_dicts()
    assert fast.engine_steps == slow.engine_steps
    assert fast.events <= slow.events


# --------------------------------------------------------------------------- determinism


def test_same_seed_same_records() -> None:
    sc = load_scenario(SCENARIOS / "mixed_hint_review.yaml")
    a, b = simulate(sc), simulate(sc)
    assert a.records.to_dicts() == b.records.to_dicts()
    assert a.trace.to_rows() == b.trace.to_rows()
    c = simulate(sc.model_copy(update={"seed": sc.seed + 1}))
    assert c.records.to_dicts() != a.records.to_dicts()


def test_rng_passed_in_overrides_seed() -> None:
    sc = scenario()
    a = simulate(sc, rng=np.random.default_rng(11))
    b = simulate(sc.model_copy(update={"seed": 999}), rng=np.random.default_rng(11))
    assert a.records.to_dicts() == b.records.to_dicts()


# --------------------------------------------------------------------------- the spec's profiles


def in_service_share_at(result: SimResult, level: int) -> float:
    """Share of the run with exactly ``level`` sequences running (decode lane)."""
    tr = result.trace
    decode = tr.lane != 2
    return float(tr.duration_s[decode & (tr.running == level)].sum() / (result.window_end_s - result.window_start_s))


def test_profile_a_does_not_saturate() -> None:
    sc = load_scenario(SCENARIOS / "profile_a.yaml")
    assert sc.server.budget_tokens() == 65_536
    result = simulate(sc)
    assert_valid(result)
    report = build_report(result.records, result.window_start_s, result.window_end_s)
    assert report.by_status["success"] == 300
    assert report.in_service is not None and report.in_service.peak < 27  # far below the 54 that fit
    assert report.in_service.share_of_window_at_peak < 0.01
    assert report.queue_wait_s is not None and report.queue_wait_s.at(95) < 0.05
    assert report.prefill_s is not None and report.prefill_s.at(50) == pytest.approx(0.15)
    assert report.request_tpot_s.at(50) == pytest.approx(0.030, abs=0.001)


def test_profile_b_saturates_at_eight() -> None:
    sc = load_scenario(SCENARIOS / "profile_b.yaml")
    result = simulate(sc)
    assert_valid(result)
    report = build_report(result.records, result.window_start_s, result.window_end_s)
    assert report.offered == 300
    assert report.in_service is not None and report.in_service.peak == 8  # 65,536 // 8,000
    assert in_service_share_at(result, 8) > 0.5
    assert report.queue_wait_s is not None and report.queue_wait_s.at(95) > 3.0
    assert report.queue_wait_s.at(50) > 0.5
    assert report.timed_out <= 10
    assert report.prefill_s is not None and report.prefill_s.at(50) == pytest.approx(1.2)
    assert report.request_tpot_s.at(50) == pytest.approx(0.031, abs=0.001)
    assert int(result.trace.kv_tokens_used.max()) == 64_000
    # reserve sets aside each output cap up front: what is computed stays below what is reserved
    assert int(result.trace.kv_tokens_held.max()) < 64_000


def test_profile_b_saturates_over_many_seeds() -> None:
    peaks, q95 = [], []
    sc = load_scenario(SCENARIOS / "profile_b.yaml")
    for seed in range(8):
        r = simulate(sc.model_copy(update={"seed": seed}))
        peaks.append(int(r.trace.running.max()))
        ok = r.records.is_success
        q95.append(float(np.percentile((r.records.admitted - r.records.start)[ok], 95)))
    assert peaks == [8] * 8
    assert np.median(q95) > 3.0


# --------------------------------------------------------------------------- limits and exits


def test_deadline_produces_timeouts_that_free_kv() -> None:
    # 2 slots of 120 tokens, 20 req/s of ~1-second requests: most wait past a 1.5 s deadline
    sc = scenario(server={"kv_budget_tokens": 240, "timeout_s": 1.5}, workload={"arrival": {"kind": "constant", "rate_rps": 20}},
                  step={"base_s": 0.05})
    result = simulate(sc)
    assert_valid(result)
    counts = result.status_counts()
    assert counts["timeout"] > 100 and counts["success"] > 0
    t = result.records
    timed = t.status == STATUSES.index("timeout")
    assert np.allclose(t.end[timed] - t.start[timed], 1.5)
    assert set(t.error[timed].tolist()) == {"deadline_exceeded"}
    assert kv_within_budget(result)


def test_full_queue_produces_rejections() -> None:
    sc = scenario(server={"kv_budget_tokens": 240, "max_waiting": 4}, workload={"arrival": {"kind": "constant", "rate_rps": 50}})
    result = simulate(sc)
    counts = result.status_counts()
    assert counts["rejected"] > 50
    t = result.records
    rej = t.status == STATUSES.index("rejected")
    assert np.all(t.end[rej] == t.start[rej]) and set(t.error[rej].tolist()) == {"queue_full"}
    assert int(result.trace.waiting.max()) <= 4
    assert counts["success"] + counts["rejected"] == 200


def test_request_too_large_for_kv_is_rejected() -> None:
    sc = scenario(server={"kv_budget_tokens": 100})
    result = simulate(sc)
    assert result.status_counts()["rejected"] == 200
    assert set(result.records.error.tolist()) == {"kv_exceeds_budget"}


def test_cancellation_frees_kv() -> None:
    # reserve: one slot; every request's client gives up after ~0.2 s, so later ones get the slot
    sc = scenario(server={"kv_budget_tokens": 130}, workload={"arrival": {"kind": "constant", "rate_rps": 10}},
                  step={"base_s": 0.05}, cancel={"probability": 1.0, "after_s": 0.2})
    result = simulate(sc)
    assert_valid(result)
    counts = result.status_counts()
    assert counts["cancelled"] > 100
    t = result.records
    cancelled = t.status == STATUSES.index("cancelled")
    # cancelled while running: admitted, some output, then another request was admitted after it
    running_cancel = cancelled & np.isfinite(t.admitted)
    assert running_cancel.sum() > 10
    later_admits = np.sort(t.admitted[np.isfinite(t.admitted)])
    for end in t.end[running_cancel][:20]:
        assert np.any(later_admits >= end)  # the slot went to someone else
    assert kv_within_budget(result)


def test_paged_preempts_and_recomputes() -> None:
    # paged blocks fill as outputs grow; the newest runner is preempted and later completes
    sc = scenario(server={"policy": "paged", "kv_budget_tokens": 1024, "max_num_batched_tokens": 512},
                  workload={"classes": [{"prompt": {"value": 100}, "output": {"value": 300}}],
                            "arrival": {"kind": "constant", "rate_rps": 20}, "num_requests": 40},
                  step={"base_s": 0.01, "per_prefill_token_s": 1e-5})
    result = simulate(sc)
    assert_valid(result)
    assert result.preemptions > 0
    assert result.status_counts()["success"] == 40
    assert kv_within_budget(result)
    # with reserve the same budget holds only two requests at once and never preempts
    reserve = simulate(sc.model_copy(update={"server": sc.server.model_copy(update={"policy": "reserve"})}))
    assert reserve.preemptions == 0 and int(reserve.trace.running.max()) == 2
    assert int(result.trace.running.max()) > 2


def test_shared_lane_prefill_slows_decoders() -> None:
    base = {"kv_budget_tokens": 60_000}
    step = {"base_s": 0.02, "per_prefill_token_s": 1e-4}
    wl = {"classes": [{"prompt": {"value": 4000}, "output": {"value": 100}}]}
    shared = simulate(scenario(server={**base, "prefill_lane": "shared"}, workload=wl, step=step))
    separate = simulate(scenario(server={**base, "prefill_lane": "separate"}, workload=wl, step=step))
    tpot = [build_report(r.records, r.window_start_s, r.window_end_s).request_tpot_s.at(50) for r in (shared, separate)]
    assert tpot[0] > 1.5 * tpot[1]
    assert tpot[1] == pytest.approx(0.02, rel=0.05)


def test_closed_loop_keeps_users_busy() -> None:
    sc = scenario(workload={"arrival": None, "closed_loop": {"users": 3, "think_s": 0.0}, "num_requests": 30},
                  server={"kv_budget_tokens": 100_000})
    result = simulate(sc)
    assert_valid(result)
    assert result.status_counts()["success"] == 30
    assert int(result.trace.running.max()) == 3


def test_scenario_errors_name_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nserver: {policy: lru, kv_budget_tokens: 10}\nstep_model: {}\n"
                   "workload: {arrival: {kind: poisson, rate_rps: 1}, num_requests: 3, classes: [{prompt: {value: 1}, output: {value: 1}}]}\n")
    with pytest.raises(ConfigError, match="server.policy"):
        load_scenario(bad)
    with pytest.raises(ConfigError, match="kv_budget_tokens, or"):
        parse_scenario({"server": {}, "step_model": {}, "workload": {}})
    with pytest.raises(ConfigError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")


def test_scenario_json_and_files(tmp_path: Path) -> None:
    (tmp_path / "lengths.txt").write_text("10\n20\n30\n")
    (tmp_path / "sc.json").write_text(
        '{"server": {"kv_budget_tokens": 5000}, "step_model": {"base_s": 0.01},'
        ' "workload": {"arrival": {"kind": "replay", "start_s": [0, 1, 1.5, 4]},'
        ' "classes": [{"prompt": {"kind": "empirical", "path": "lengths.txt"}, "output": {"value": 5}}]}}')
    sc = load_scenario(tmp_path / "sc.json")
    result = simulate(sc)
    assert result.records.start.tolist() == [0.0, 1.0, 1.5, 4.0]
    assert set(result.records.prompt_tokens.tolist()) <= {10, 20, 30}


def test_shipped_profiles_golden_numbers() -> None:
    # pinned results of the shipped scenarios (seed 6): a change here is a change in behaviour
    expected = {
        "profile_a": ({"success": 300, "timeout": 0}, 0.0, 0.0, 12),
        "profile_b": ({"success": 299, "timeout": 1}, 2.063, 10.015, 8),
    }
    for name, (counts, q50, q95, peak) in expected.items():
        r = simulate(load_scenario(SCENARIOS / f"{name}.yaml"))
        rep = build_report(r.records, r.window_start_s, r.window_end_s)
        assert {k: rep.by_status[k] for k in counts} == counts
        assert rep.queue_wait_s is not None
        assert (round(rep.queue_wait_s.at(50), 3), round(rep.queue_wait_s.at(95), 3)) == (q50, q95)
        assert rep.in_service is not None and rep.in_service.peak == peak


def test_class_timeout_overrides_server_deadline() -> None:
    sc = scenario(server={"kv_budget_tokens": 240, "timeout_s": 100.0},
                  workload={"arrival": {"kind": "constant", "rate_rps": 20},
                            "classes": [{"name": "impatient", "prompt": {"value": 100}, "output": {"value": 20},
                                         "timeout_s": 1.5}]},
                  step={"base_s": 0.05})
    t = simulate(sc).records
    timed = t.status == STATUSES.index("timeout")
    assert timed.sum() > 100 and np.allclose(t.end[timed] - t.start[timed], 1.5)


def test_preempted_request_finding_the_queue_full_fails_with_its_wasted_tokens() -> None:
    # paged KV for about three growing requests, a one-place queue kept full by fast arrivals
    sc = scenario(server={"policy": "paged", "kv_budget_tokens": 16 * 12, "max_waiting": 1},
                  workload={"classes": [{"prompt": {"value": 8}, "output": {"value": 60}}],
                            "arrival": {"kind": "constant", "rate_rps": 40}, "num_requests": 30},
                  step={"base_s": 0.01})
    result = simulate(sc)
    assert_valid(result)
    assert int(result.trace.waiting.max()) <= 1
    t = result.records
    dropped = t.error == "preempted_queue_full"
    assert dropped.sum() > 0 and np.all(t.status[dropped] == STATUSES.index("failed"))
    assert np.all(t.output_tokens[dropped] >= 1)  # tokens generated before the drop count as wasted work
    assert result.preemptions >= int(dropped.sum())


@pytest.mark.parametrize("output", [{"kind": "fixed", "value": 0}, {"kind": "uniform", "low": 0, "high": 5},
                                    {"kind": "lognormal", "median": 5, "sigma": 1, "min_tokens": 0},
                                    {"kind": "empirical", "values": [3, 0, 4]}])
def test_an_output_length_that_can_be_zero_is_refused(output: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"workload\.classes\.0\.output.*at least 1 token"):
        scenario(workload={"classes": [{"prompt": {"value": 10}, "output": output}]})


def test_zero_output_lengths_from_a_file_are_refused(tmp_path: Path) -> None:
    (tmp_path / "outputs.txt").write_text("5\n0\n7\n")
    sc = parse_scenario({"server": {"kv_budget_tokens": 5000}, "step_model": {"base_s": 0.01},
                         "workload": {"arrival": {"kind": "constant", "rate_rps": 1}, "num_requests": 5,
                                      "classes": [{"name": "from_file", "prompt": {"value": 10},
                                                   "output": {"kind": "empirical", "path": "outputs.txt"}}]}},
                        base_dir=tmp_path)
    with pytest.raises(ConfigError, match="workload class 'from_file': output lengths must be at least 1 token"):
        simulate(sc)


def test_replay_of_a_records_file(tmp_path: Path) -> None:
    records = Path(__file__).resolve().parent.parent / "sample_data" / "r1_r4.json"
    sc = parse_scenario({
        "server": {"kv_budget_tokens": 5000}, "step_model": {"base_s": 0.01},
        "workload": {"arrival": {"kind": "replay", "path": str(records), "speed": 2.0},
                     "classes": [{"prompt": {"value": 10}, "output": {"value": 5}}]}}, base_dir=tmp_path)
    assert simulate(sc).records.start.tolist() == [0.0, 0.5, 1.0, 1.5]


@st.composite
def cohort_scenarios(draw: st.DrawFn) -> Scenario:
    """The property scenarios, with prefix caching, tenants, fair scheduling, shedding and block sizes drawn too."""
    sc = draw(scenarios())
    doc = sc.model_dump(mode="json", exclude_none=True)
    server = doc["server"]
    server["block_size_tokens"] = draw(st.sampled_from([1, 4, 16, 64]))
    if draw(st.booleans()):
        server["prefix_caching"] = True
        for c in doc["workload"]["classes"]:
            c["shared_prefix"] = {"tokens": draw(st.integers(1, 64)), "groups": draw(st.integers(1, 3))}
            c["prompt"] = {"kind": "fixed", "value": draw(st.integers(65, 300))}
    if draw(st.booleans()):
        names = [c["name"] for c in doc["workload"]["classes"]]
        server["tenants"] = {n: {"max_running": draw(st.sampled_from([None, 1, 3])),
                                 "weight": draw(st.floats(0.5, 3))} for n in names}
        for c in doc["workload"]["classes"]:
            c["tenant"] = c["name"]
        server["scheduling"] = draw(st.sampled_from(["fcfs", "fair"]))
    if draw(st.booleans()):
        server["admission"] = {"max_queue_wait_s": draw(st.sampled_from([0.05, 0.5]))}
    server["kv_budget_tokens"] = max(server["kv_budget_tokens"], 64 * server["block_size_tokens"])
    return parse_scenario(doc)


@settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(cohort_scenarios(), preempting_scenarios()))
def test_the_decode_cohort_plans_what_the_per_sequence_loop_plans(sc: Scenario) -> None:
    # the scheduler's lazy decode cohort is exact: the same records, token times and step trace to the last bit
    lazy = simulate(sc)
    eager = simulate(sc, lazy_decode=False)
    assert lazy.records.to_dicts() == eager.records.to_dicts()
    assert lazy.trace.to_rows() == eager.trace.to_rows()
    assert (lazy.events, lazy.engine_steps, lazy.preemptions, lazy.prefix_evictions) == \
        (eager.events, eager.engine_steps, eager.preemptions, eager.prefix_evictions)
    runs = simulate(sc, token_times="runs", decode_runs=False)
    assert runs.token_runs is not None
    assert runs.token_runs.expand().to_pylist() == [r.get("token_times") for r in eager.records.to_dicts()]


@st.composite
def busy_arrival_scenarios(draw: st.DrawFn) -> Scenario:
    """Shared-lane scenarios where arrivals, retries and lagged sightings fall inside decode runs."""
    server = {"policy": draw(st.sampled_from(["reserve", "paged"])), "kv_budget_tokens": draw(st.integers(800, 6000)),
              "max_num_seqs": draw(st.integers(1, 32)), "max_num_batched_tokens": draw(st.sampled_from([None, 64, 512])),
              "chunked_prefill": draw(st.booleans()), "max_waiting": draw(st.sampled_from([None, 2, 50])),
              "timeout_s": draw(st.sampled_from([None, 0.4, 3.0])),
              "prefill_lane": draw(st.sampled_from(["shared", "separate"])),
              "prefix_caching": draw(st.booleans())}
    cls: dict[str, Any] = {"prompt": draw(length), "output": {"kind": "uniform", "low": 1, "high": draw(st.integers(2, 60))}}
    if draw(st.booleans()):
        cls["conversation"] = {"turns": draw(st.integers(2, 3)), "think_s": draw(st.floats(0, 0.3))}
    lags = draw(st.sampled_from([(), (0.0005, 0.004)]))
    step = {"base_s": draw(st.floats(0.002, 0.03)), "per_prefill_token_s": draw(st.floats(0, 1e-4)),
            "per_decode_seq_s": draw(st.floats(0, 1e-4)), "per_kv_token_s": draw(st.floats(0, 1e-6)),
            "emit_lead_s": draw(st.sampled_from([0.0, 0.001])), "arrival_lags_s": list(lags),
            "busy_arrival_lags_s": [2 * x for x in lags]}
    doc: dict[str, Any] = {
        "name": "busy", "seed": draw(st.integers(0, 2**32 - 1)), "server": server, "step_model": step,
        "workload": {"arrival": {"kind": draw(st.sampled_from(["poisson", "constant"])),
                                 "rate_rps": draw(st.floats(5, 200))},
                     "num_requests": draw(st.integers(2, 80)), "classes": [cls]},
        "cancel": draw(st.sampled_from([None, {"probability": 0.3, "after_s": 0.05}]))}
    if draw(st.booleans()):
        doc["client"] = {"max_attempts": 3, "backoff": {"base_s": 0.01}}
    return parse_scenario(doc)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(busy_arrival_scenarios())
def test_a_decode_run_takes_in_the_step_an_arrival_falls_in_exactly_as_step_by_step(sc: Scenario) -> None:
    # on the shared lane a run goes on through the step an arrival (a retry, a lagged sighting) falls in, rather
    # than stopping before it: the same records and token times as one step at a time, and fewer events
    fast, slow = simulate(sc), simulate(sc, decode_runs=False)
    assert fast.records.to_dicts() == slow.records.to_dicts()
    assert fast.engine_steps == slow.engine_steps
    assert fast.events <= slow.events
