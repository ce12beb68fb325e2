"""Tests for the step-time model and its least-squares fit."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from servebench.capacity.stepmodel import (
    EXCESS_BINS,
    MIN_R2,
    PoorFitError,
    StepModel,
    StepNoise,
    autocorrelation,
    fit_noise,
    fit_noise_memory,
    fit_step_model,
    normal_scores,
    require_usable,
)
from servebench.errors import ConfigError
from servebench.serving.scenario import parse_scenario
from servebench.serving.simulate import simulate

TRUE = StepModel(base_s=0.012, per_prefill_token_s=8e-5, per_decode_seq_s=3e-4, per_kv_token_s=2e-8)
FITTED = ("base_s", "per_prefill_token_s", "per_decode_seq_s", "per_kv_token_s")  # the synthetic trace's columns


def synthetic_trace(n: int, noise_s: float, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    prefill = rng.integers(0, 4096, size=n) * (rng.random(n) < 0.4)
    decode = rng.integers(0, 128, size=n)
    kv = decode * rng.integers(100, 4000, size=n)
    duration = np.array([TRUE.step_s(int(p), int(d), int(k)) for p, d, k in zip(prefill, decode, kv)])
    return {"duration": duration + rng.normal(0, noise_s, size=n), "prefill_tokens": prefill,
            "decode_seqs": decode, "kv_tokens_read": kv}


def test_fit_recovers_exact_coefficients() -> None:
    fit = fit_step_model(synthetic_trace(400, 0.0, 1))
    for name, value in TRUE.model_dump().items():
        assert getattr(fit.model, name) == pytest.approx(value, rel=1e-6)
    assert fit.rmse_s < 1e-9 and fit.r2 == pytest.approx(1.0)


def test_fit_with_noise_is_within_its_standard_errors() -> None:
    fit = fit_step_model(synthetic_trace(3000, 0.002, 2))
    for name in FITTED:
        value = getattr(TRUE, name)
        se = fit.stderr[name]
        assert se is not None and abs(getattr(fit.model, name) - value) < 4 * se
    assert fit.rmse_s == pytest.approx(0.002, rel=0.1)
    assert fit.r2 is not None and fit.r2 > 0.9


def test_fit_never_goes_negative_and_pins_coefficients() -> None:
    trace = synthetic_trace(500, 0.0, 3)
    fit = fit_step_model(trace, ["base_s", "per_prefill_token_s"])
    assert fit.model.per_decode_seq_s == 0 and fit.model.per_kv_token_s == 0
    assert fit.stderr["per_kv_token_s"] is None
    assert all(v >= 0 for v in fit.model.model_dump().values() if isinstance(v, float))


def test_fit_from_simulated_trace_recovers_model() -> None:
    # a shared-lane simulation's trace (with multi-step decode runs) fits back to its own model
    sc = parse_scenario({
        "seed": 4, "server": {"kv_budget_tokens": 50_000, "max_num_batched_tokens": 1024},
        "step_model": {"base_s": 0.01, "per_prefill_token_s": 5e-5, "per_decode_seq_s": 2e-4,
                       "per_kv_token_s": 1e-8},
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 4}, "num_requests": 300,
                     "classes": [{"prompt": {"kind": "uniform", "low": 50, "high": 3000},
                                  "output": {"kind": "uniform", "low": 5, "high": 200}}]}})
    result = simulate(sc)
    assert int(result.trace.steps.max()) > 1
    fit = fit_step_model(result.trace.columns())
    assert fit.model.base_s == pytest.approx(0.01, rel=1e-5)
    assert fit.model.per_prefill_token_s == pytest.approx(5e-5, rel=1e-5)
    assert fit.model.per_decode_seq_s == pytest.approx(2e-4, rel=1e-5)
    assert fit.model.per_kv_token_s == pytest.approx(1e-8, rel=1e-4)
    assert fit.steps == result.engine_steps


def test_flat_model_reproduces_spec_timings() -> None:
    m = StepModel.from_flat(1.2, 7800, 0.031)
    assert m.step_s(0, 8, 0) == pytest.approx(0.031)
    assert m.prefill_s(7800) == pytest.approx(1.2)


def test_decode_run_ends_match_repeated_steps() -> None:
    ends = TRUE.decode_run_ends(5.0, 10, 20_000, 4)
    t, kv = 5.0, 20_000
    for e in ends:
        t += TRUE.step_s(0, 10, kv)
        kv += 10
        assert e == pytest.approx(t)


@settings(max_examples=300, deadline=None)
@given(base_s=st.sampled_from([0.0, 0.012, 0.02]), per_decode_seq_s=st.floats(0, 1e-3),
       per_kv_token_s=st.sampled_from([0.0, 2e-8, 3.3e-8, 1e-7]), per_prefill_seq_s=st.sampled_from([0.0, 1e-3]),
       start_s=st.floats(0, 1e4), decode_seqs=st.integers(0, 300), kv_tokens_read=st.integers(0, 10**8),
       steps=st.integers(1, 80), first_extra_s=st.sampled_from([0.0, 0.004]), stop_after_s=st.floats(0, 2))
def test_decode_run_ends_are_step_s_added_one_step_at_a_time_bit_for_bit(
        base_s: float, per_decode_seq_s: float, per_kv_token_s: float, per_prefill_seq_s: float, start_s: float,
        decode_seqs: int, kv_tokens_read: int, steps: int, first_extra_s: float, stop_after_s: float) -> None:
    """The run's ends, added up in Python (its kv tokens as floats, no "+ 0.0") or by numpy, are bit for bit the
    sums of step_s one step at a time, and decode_run_ends_until stops at the first step past its stop time."""
    model = StepModel(base_s=base_s, per_decode_seq_s=per_decode_seq_s, per_kv_token_s=per_kv_token_s,
                      per_prefill_seq_s=per_prefill_seq_s)
    t, expected = start_s, []
    for j in range(steps):
        step = model.step_s(0, decode_seqs, kv_tokens_read + decode_seqs * j)
        t += step + first_extra_s if j == 0 and first_extra_s else step
        expected.append(t)
    assert np.array_equal(model.decode_run_ends(start_s, decode_seqs, kv_tokens_read, steps, None, first_extra_s),
                          expected)
    stop_s = start_s + stop_after_s
    cut = next((j + 1 for j, e in enumerate(expected) if e > stop_s), steps)
    assert model.decode_run_ends_until(start_s, decode_seqs, kv_tokens_read, steps, first_extra_s, stop_s) \
        == expected[:cut]


def test_bad_inputs() -> None:
    with pytest.raises(ValidationError):
        StepModel(base_s=-1)
    with pytest.raises(ConfigError, match="lacks column"):
        fit_step_model({"duration": [1.0], "prefill_tokens": [1]})
    with pytest.raises(ConfigError, match="row 2, column 'duration'"):
        fit_step_model({"duration": [1.0, float("nan")], "prefill_tokens": [1, 2], "decode_seqs": [1, 1],
                        "kv_tokens_used": [0, 0]})
    with pytest.raises(ConfigError, match="row 3, column 'decode_seqs': 'two' is not a number"):
        fit_step_model([{"duration": 1.0, "prefill_tokens": 0, "decode_seqs": d, "kv_tokens_read": 0}
                        for d in (1, 2, "two")])  # was reported as a missing column
    with pytest.raises(ConfigError, match="expected some of"):
        fit_step_model(synthetic_trace(10, 0, 0), ["gamma"])
    with pytest.raises(ConfigError, match="at least that many"):
        fit_step_model({k: v[:2] for k, v in synthetic_trace(10, 0, 0).items()})


# --------------------------------------------------------------------------- robust fit, quality, overhead terms


def with_slow_outliers(trace: dict[str, np.ndarray], share: float, factor: float, seed: int) -> dict[str, np.ndarray]:
    """Return the trace with ``share`` of its steps made ``factor`` times slower (another process stole the core)."""
    rng = np.random.default_rng(seed)
    out = dict(trace)
    slow = rng.random(trace["duration"].size) < share
    out["duration"] = np.where(slow, trace["duration"] * factor, trace["duration"])
    return out


def test_huber_fit_with_slow_outliers_stays_near_the_clean_fit() -> None:
    clean_trace = synthetic_trace(2000, 0.0005, 5)
    dirty = with_slow_outliers(clean_trace, 0.08, 6.0, 6)
    clean = fit_step_model(clean_trace)
    robust = fit_step_model(dirty)
    plain = fit_step_model(dirty, method="least_squares")
    names = ("base_s", "per_prefill_token_s", "per_decode_seq_s")

    def worst_rel_distance(fit: object) -> float:
        return max(abs(getattr(fit.model, c) / getattr(clean.model, c) - 1) for c in names)

    assert worst_rel_distance(robust) < 0.05
    assert worst_rel_distance(plain) > 0.2  # least squares is dragged up by the stalls
    assert robust.outlier_share > 0.05 and plain.outlier_share == 0
    assert robust.excess_share is not None and robust.excess_share > 0.2  # the stolen time, reported


def test_quality_refuses_a_poor_fit_and_the_override_allows_it() -> None:
    rng = np.random.default_rng(7)
    noise = synthetic_trace(500, 0.0, 8)
    noise["duration"] = rng.exponential(0.05, size=500)  # step times unrelated to the work done
    fit = fit_step_model(noise)
    assert fit.quality is not None and not fit.quality.usable
    assert "mean relative error" in fit.quality.reason or "R²" in fit.quality.reason
    with pytest.raises(PoorFitError, match="--allow-poor-fit"):
        require_usable(fit, what="x.jsonl")
    require_usable(fit, allow_poor_fit=True)
    good = fit_step_model(synthetic_trace(500, 0.0005, 9))
    assert good.quality is not None and good.quality.usable and good.quality.r2_judged
    require_usable(good)
    assert "R² " in good.summary and "mean relative error" in good.summary


def test_r2_is_not_judged_when_every_step_is_alike() -> None:
    # identical decode steps with 1% jitter: R² is about 0 (nothing to explain), yet the fit predicts well
    rng = np.random.default_rng(10)
    n = 400
    trace = {"duration": 0.01 * (1 + 0.01 * rng.standard_normal(n)), "prefill_tokens": np.zeros(n),
             "decode_seqs": np.full(n, 4), "kv_tokens_read": np.full(n, 400)}
    fit = fit_step_model(trace)
    assert fit.r2 is not None and fit.r2 < MIN_R2
    assert fit.quality is not None and fit.quality.usable and not fit.quality.r2_judged


def test_per_prefill_seq_cost_is_fitted_when_traced() -> None:
    rng = np.random.default_rng(11)
    n = 600
    seqs = rng.integers(0, 4, size=n)
    prefill = seqs * rng.integers(10, 200, size=n)
    decode = rng.integers(0, 16, size=n)
    true = StepModel(base_s=0.001, per_prefill_token_s=1e-5, per_prefill_seq_s=0.0012, per_decode_seq_s=1e-4)
    duration = np.array([true.step_s(int(p), int(d), 0, int(s)) for p, d, s in zip(prefill, decode, seqs)])
    cols = {"duration": duration, "prefill_tokens": prefill, "decode_seqs": decode, "kv_tokens_read": np.zeros(n),
            "prefill_seqs": seqs}
    fit = fit_step_model(cols)
    assert fit.model.per_prefill_seq_s == pytest.approx(0.0012, rel=1e-6)
    without = fit_step_model({k: v for k, v in cols.items() if k != "prefill_seqs"})
    assert without.model.per_prefill_seq_s == 0  # an older trace: the term stays pinned


def _one_request_scenario(step: dict) -> object:
    return parse_scenario({
        "seed": 1, "server": {"kv_budget_tokens": 10_000, "max_num_batched_tokens": 512}, "step_model": step,
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 0.5}, "num_requests": 20,
                     "classes": [{"prompt": {"value": 100}, "output": {"value": 10}}]}})


def test_simulator_applies_the_arrival_lag_and_the_emit_lead() -> None:
    # 2 s between arrivals, 0.03 s of work each: every request finds the engine idle
    step = {"base_s": 0.001, "per_prefill_token_s": 1e-5, "per_prefill_seq_s": 0.002}
    plain = simulate(_one_request_scenario(step)).records
    lagged = simulate(_one_request_scenario(step | {"arrival_lag_s": 0.0007, "emit_lead_s": 0.0001})).records
    np.testing.assert_array_equal(plain.start, lagged.start)  # records start at the arrival, not when seen
    ttft = plain.first_token - plain.start
    np.testing.assert_allclose(ttft, 0.001 + 100 * 1e-5 + 0.002, rtol=1e-9)  # one prefill step, with its set-up
    np.testing.assert_allclose(lagged.first_token - lagged.start, ttft + 0.0007 - 0.0001, rtol=1e-9)
    np.testing.assert_allclose(lagged.admitted - lagged.start, 0.0007, rtol=1e-9)
    np.testing.assert_allclose(lagged.end - plain.end, 0.0007 - 0.0001, atol=1e-9)


# --------------------------------------------------------------------------- step-time noise and the lag's spread


def test_noise_stream_has_the_fitted_distribution_and_autocorrelation() -> None:
    factors = tuple(np.linspace(0.6, 1.8, 50))
    ratio = StepNoise(factors, 0.6, np.random.default_rng(3)).take(40_000)
    fitted, rho = fit_noise(ratio)
    np.testing.assert_allclose(fitted, factors, rtol=0.03)  # each 2% of the steps, recovered
    assert rho == pytest.approx(0.6, abs=0.06)
    independent = fit_noise(StepNoise(factors, 0.0, np.random.default_rng(4)).take(40_000))[1]
    assert independent < 0.05
    assert fit_noise(ratio[:50]) == ((), 0.0)  # too few steps: no noise


def test_noise_stream_peeks_without_drawing_and_is_seeded() -> None:
    a = StepNoise((0.5, 1.0, 2.0), 0.3, np.random.default_rng(5))
    b = StepNoise((0.5, 1.0, 2.0), 0.3, np.random.default_rng(5))
    ahead = a.peek(10_000).copy()  # longer than one chunk
    a.advance(3)
    np.testing.assert_array_equal(np.concatenate([b.take(3), b.take(9_997)]), ahead)
    np.testing.assert_array_equal(a.take(9_997), ahead[3:])
    assert set(np.unique(ahead)) <= {0.5, 1.0, 2.0}


def test_fit_with_noise_keeps_the_total_and_the_spread_of_each_kind_of_step() -> None:
    trace = synthetic_trace(3000, 0.0, 12)
    rng = np.random.default_rng(13)
    trace["duration"] = trace["duration"] + rng.normal(0.0, 0.002, size=trace["duration"].size)
    fit = fit_step_model(trace, noise=True)
    modelled = fit.model.step_s(trace["prefill_tokens"], trace["decode_seqs"], trace["kv_tokens_read"])
    prefill = trace["prefill_tokens"] > 0  # 40% of the steps: enough for a table of their own
    for kind, table in ((~prefill, fit.model.noise_excess_s), (prefill, fit.model.prefill_noise_excess_s)):
        excess = np.array(table)
        assert len(excess) == EXCESS_BINS and np.all(np.diff(excess) >= 0)
        assert excess.mean() == pytest.approx((trace["duration"] - modelled)[kind].mean(), rel=1e-9)
        spread = excess[int(0.9 * EXCESS_BINS)] - excess[int(0.1 * EXCESS_BINS)]  # p90 - p10 of the excess
        assert spread == pytest.approx(0.002 * 2 * 1.2816, rel=0.15)
    assert fit.model.noise_autocorrelation < 0.1  # the injected noise is independent from step to step
    assert fit.model.noise_factors == ()  # the scatter is fitted as seconds, not as factors
    assert fit_step_model(trace).model.noise_excess_s == ()  # only when asked for
    few = {k: v[:220] for k, v in trace.items()}  # under 100 steps with prompt tokens: one table for all
    assert fit_step_model(few, noise=True).model.prefill_noise_excess_s == ()


def test_fit_recovers_jitter_plus_a_slow_drift_and_replays_its_memory_at_every_lag() -> None:
    """As on the engine: each step's excess is half fresh jitter, half a drift that fades over tens of steps.
    One AR(1) coefficient cannot give both the low lag-1 correlation and the long memory (a request's TPOT,
    the mean over its steps, spreads by the latter); jitter plus drift recovers both."""
    trace = synthetic_trace(8000, 0.0, 31)
    jitter, rho = 0.5, 0.97
    table = tuple(float(x) for x in np.linspace(-0.001, 0.003, 200) ** 3 / 0.003 ** 2)  # skewed, as the engine's
    excess = StepNoise(table, rho, np.random.default_rng(32), additive=True, jitter_share=jitter).take(8000)
    trace["duration"] = trace["duration"] + excess
    fit = fit_step_model(trace, noise=True)
    assert fit.model.noise_jitter_share == pytest.approx(jitter, abs=0.08)
    assert fit.model.noise_autocorrelation == pytest.approx(rho, abs=0.015)
    modelled = fit.model.step_s(trace["prefill_tokens"], trace["decode_seqs"], trace["kv_tokens_read"])
    lags = np.array([1, 8, 48])
    measured = autocorrelation(normal_scores(trace["duration"] - modelled, trace["prefill_tokens"] > 0), 48)[lags - 1]
    noise = fit.model.noise(np.random.default_rng(0))
    assert noise is not None
    replayed = autocorrelation(normal_scores(noise.take(200_000)), 48)[lags - 1]
    np.testing.assert_allclose(replayed, measured, atol=0.06)  # lag 1 about 0.49, lag 48 about 0.12
    assert fit_noise_memory(np.random.default_rng(33).normal(size=5000)) == (1.0, 0.0)  # no memory: all jitter


def test_noise_without_jitter_is_the_old_stream_and_jitter_keeps_the_table() -> None:
    table = (0.5, 1.0, 2.0, 4.0)
    old = StepNoise(table, 0.8, np.random.default_rng(6)).take(5000)
    np.testing.assert_array_equal(StepNoise(table, 0.8, np.random.default_rng(6), jitter_share=0.0).take(5000), old)
    mixed = StepNoise(table, 0.8, np.random.default_rng(6), jitter_share=0.6).take(40_000)
    assert np.unique(mixed, return_counts=True)[1] / mixed.size == pytest.approx([0.25] * 4, abs=0.02)
    assert autocorrelation(normal_scores(mixed), 1)[0] < autocorrelation(normal_scores(old), 1)[0] - 0.2
    with pytest.raises(ConfigError, match="jitter share"):
        StepNoise(table, 0.8, np.random.default_rng(6), jitter_share=1.5)


def test_fit_recovers_a_stall_that_costs_the_same_seconds_on_short_and_long_steps() -> None:
    """As on the engine: the slowest steps are a fixed stall over the model whatever their size, so the
    fitted noise is that stall in seconds, and a simulated long step is not blown up several-fold."""
    trace = synthetic_trace(4000, 0.0, 21)  # steps of 12 ms to 0.4 s
    rng = np.random.default_rng(22)
    n = trace["duration"].size
    stalled = rng.random(n) < 0.04  # 4% of the steps, whatever their size, lose 20 ms to another thread
    trace["duration"] = trace["duration"] + rng.normal(0.0, 0.0005, size=n) + np.where(stalled, 0.020, 0.0)
    fit = fit_step_model(trace, noise=True)
    for table in (fit.model.noise_excess_s, fit.model.prefill_noise_excess_s):
        np.testing.assert_allclose(table[-7:], 0.020, atol=0.002)  # the slowest 3.5%: the stall, recovered
        assert abs(float(np.median(table))) < 0.001  # the rest: the jitter around the model
    long_s = fit.model.step_s(4000, 0, 0)
    noise = fit.model.noise(np.random.default_rng(0))
    assert noise is not None and noise.additive
    worst = max(noise.apply(long_s, v) for v in noise.take(5000, prefill=True))
    assert worst < long_s + 0.025  # a 0.33 s step gains at most the stall, as in the trace
    modelled = fit.model.step_s(trace["prefill_tokens"], trace["decode_seqs"], trace["kv_tokens_read"])
    ratio, long = (trace["duration"] / modelled)[stalled], modelled[stalled] > 0.2
    assert ratio[~long].max() > 2.0 and ratio[long].max() < 1.15  # as a factor, the stall depends on the size


@pytest.mark.parametrize("kind", ["noise_factors", "noise_excess_s"])
def test_simulated_noise_keeps_the_mean_widens_the_tails_and_is_deterministic(kind: str) -> None:
    step = {"base_s": 0.002, "per_prefill_token_s": 1e-5, "per_decode_seq_s": 1e-4}
    sc = parse_scenario({
        "seed": 2, "server": {"kv_budget_tokens": 20_000, "max_num_batched_tokens": 256}, "step_model": step,
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 4}, "num_requests": 300,
                     "classes": [{"prompt": {"kind": "uniform", "low": 16, "high": 200},
                                  "output": {"kind": "uniform", "low": 20, "high": 60}}]}})
    factors = tuple(float(x) for x in np.exp(np.linspace(-1.0, 1.0, 50)))
    factors = tuple(f / np.mean(factors) for f in factors)  # mean 1: the model's time on average
    excess = tuple(float(x) for x in np.linspace(-0.0015, 0.0015, 50))  # mean 0 s: the same on average
    table = factors if kind == "noise_factors" else excess
    noisy_sc = sc.model_copy(update={"step_model": sc.step_model.model_copy(
        update={kind: table, "noise_autocorrelation": 0.5})})
    plain, noisy = simulate(sc), simulate(noisy_sc)
    model = noisy_sc.step_model.to_model()
    assert model.noise_mean == pytest.approx(1.0)
    t = simulate(noisy_sc, decode_runs=False).trace  # each step: the model's time with one value of the table on it
    clean = model.step_s(t.prefill_tokens, t.decode_seqs, t.kv_tokens_read, t.prefill_seqs)
    applied = t.duration_s / clean if kind == "noise_factors" else t.duration_s - clean
    assert np.all(np.min(np.abs(applied[:, None] - np.array(table)[None, :]), axis=1) < 1e-9)

    def tpot(records) -> np.ndarray:
        return (records.end - records.first_token) / (records.output_tokens - 1)

    assert tpot(noisy.records).mean() == pytest.approx(tpot(plain.records).mean(), rel=0.05)
    assert np.percentile(tpot(noisy.records), 95) > 1.1 * np.percentile(tpot(plain.records), 95)
    assert np.ptp(tpot(noisy.records)) > 3 * np.ptp(tpot(plain.records))
    again, stepwise = simulate(noisy_sc), simulate(noisy_sc, decode_runs=False)
    np.testing.assert_array_equal(again.records.end, noisy.records.end)  # the same seed, the same run
    np.testing.assert_array_equal(stepwise.records.end, noisy.records.end)  # runs use the factors steps would
    other = simulate(noisy_sc.model_copy(update={"seed": 3}), workload=None)
    assert not np.array_equal(other.records.end, noisy.records.end)


def test_simulator_draws_each_requests_arrival_lag_from_its_spread() -> None:
    step = {"base_s": 0.001, "per_prefill_token_s": 1e-5, "arrival_lag_s": 0.002,
            "arrival_lags_s": [0.001, 0.003]}
    records = simulate(_one_request_scenario(step)).records  # every request finds the engine idle
    lags = np.round(records.admitted - records.start, 9)
    assert set(lags) == {0.001, 0.003}
    np.testing.assert_array_equal(simulate(_one_request_scenario(step)).records.admitted, records.admitted)
    with pytest.raises(ConfigError, match="arrival_lags_s"):
        parse_scenario({"server": {"kv_budget_tokens": 100}, "step_model": {"arrival_lags_s": [-1.0]},
                        "workload": {"arrival": {"kind": "poisson", "rate_rps": 1}, "num_requests": 1,
                                     "classes": [{"prompt": {"value": 10}, "output": {"value": 2}}]}})


# --------------------------------------------------------------------------- what came before a step


def _wake_scenario(step: dict) -> object:
    return parse_scenario({
        "seed": 6, "server": {"kv_budget_tokens": 50_000, "max_num_batched_tokens": 256}, "step_model": step,
        "workload": {"arrival": {"kind": "poisson", "rate_rps": 15}, "num_requests": 400,
                     "classes": [{"prompt": {"kind": "uniform", "low": 16, "high": 500},
                                  "output": {"kind": "uniform", "low": 5, "high": 60}}]}})


def test_wake_and_after_prefill_terms_are_recovered_from_a_simulated_trace() -> None:
    true = {"base_s": 0.001, "per_prefill_token_s": 1.5e-5, "per_decode_seq_s": 1.2e-4, "per_kv_token_s": 2e-7,
            "wake_s": 0.0012, "wake_tau_s": 0.02, "after_prefill_s": 0.0003}
    result = simulate(_wake_scenario(true))
    cols = result.trace.columns()
    idle = np.asarray(cols["start_s"]) > 0  # rows after an idle engine and rows straight after a prefill exist
    assert idle.any()
    fit = fit_step_model(cols)
    assert fit.model.wake_tau_s == 0.02  # the time constant, picked from the grid
    for name in ("wake_s", "after_prefill_s", "base_s", "per_prefill_token_s", "per_decode_seq_s"):
        assert getattr(fit.model, name) == pytest.approx(true[name], rel=1e-4), name
    plain = simulate(_wake_scenario({k: v for k, v in true.items() if k not in ("wake_s", "after_prefill_s")}))
    assert (plain.records.first_token - plain.records.start).mean() < (
        result.records.first_token - result.records.start).mean()  # waking costs time to first token
    no_start = {k: v for k, v in cols.items() if k != "start_s"}  # a trace without start times: both pinned at 0
    assert fit_step_model(no_start).model.wake_s == 0 and fit_step_model(no_start).model.after_prefill_s == 0


def test_simulator_adds_the_wake_after_idle_and_the_cost_after_a_prefill() -> None:
    # lone requests 2 s apart: each prefill step wakes an engine idle for about 2 s, its first decode follows it
    step = {"base_s": 0.001, "per_prefill_token_s": 1e-5, "wake_s": 0.004, "wake_tau_s": 0.5,
            "after_prefill_s": 0.0005}
    records = simulate(_one_request_scenario(step)).records
    plain = simulate(_one_request_scenario({"base_s": 0.001, "per_prefill_token_s": 1e-5})).records
    idle = records.start - np.concatenate([[0.0], records.end[:-1]])
    np.testing.assert_allclose(records.first_token - records.start,
                               plain.first_token - plain.start + 0.004 * -np.expm1(-idle / 0.5), rtol=1e-9)
    np.testing.assert_allclose((records.end - records.first_token) - (plain.end - plain.first_token), 0.0005,
                               rtol=1e-9)  # once per request: its first decode step
    again = simulate(_one_request_scenario(step), decode_runs=False).records
    np.testing.assert_array_equal(again.end, records.end)
    model = StepModel(wake_s=0.004, after_prefill_s=0.0005)  # tau 0: the whole wake after any idle
    assert model.extra_s(0.0, True) == 0.0005 and model.extra_s(0.0, False) == 0.0
    assert model.extra_s(0.2, True) == 0.004  # after idle the engine wakes; the prefill before is long gone


def test_an_arrival_while_a_step_runs_draws_its_lag_from_the_busy_lags() -> None:
    # a 60 ms prefill per request, arrivals 2 s apart plus one 10 ms after each: the second finds a step running
    sc = parse_scenario({
        "seed": 1, "server": {"kv_budget_tokens": 10_000, "max_num_batched_tokens": 8192},
        "step_model": {"base_s": 0.001, "per_prefill_token_s": 1e-4, "arrival_lags_s": [0.0005],
                       "busy_arrival_lags_s": [0.06]},
        "workload": {"arrival": {"kind": "replay", "start_s": [0.0, 0.01, 2.0, 2.01, 4.0, 4.01]}, "num_requests": 6,
                     "classes": [{"prompt": {"value": 600}, "output": {"value": 3}}]}})
    records = simulate(sc).records
    seen = np.round(records.admitted - records.start, 9)
    np.testing.assert_allclose(seen[0::2], 0.0005)  # idle engine: the idle lag
    np.testing.assert_allclose(seen[1::2], 0.06)  # mid-step: seen 60 ms late, after the 62 ms step has ended
    no_busy = simulate(sc.model_copy(update={"step_model": sc.step_model.model_copy(
        update={"busy_arrival_lags_s": ()})})).records
    np.testing.assert_allclose((records.admitted - no_busy.admitted)[0::2], 0.0)
    np.testing.assert_allclose((no_busy.admitted - no_busy.start)[1::2], 0.0515, atol=1e-4)  # at the step's end
    replay = simulate(sc, replica=1).records  # another replay: the same workload, other draws
    np.testing.assert_array_equal(replay.start, records.start)
