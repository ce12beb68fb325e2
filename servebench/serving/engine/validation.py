"""Check the simulator against a timing run: fit the step model to the run's step trace,
simulate the same scenario with it, and compare p50/p95 of TTFT, request TPOT and latency.

The simulated server is the one the engine is: the same scheduler limits, the same workload
drawn from the same seed, prompts computed inside the batched step (``prefill_lane: shared``).
Besides the step time, ``fit_trace`` measures what happens around the steps, from the run's own
trace and records: the arrival lag (a request that arrives at an idle engine is admitted this
long after its arrival: the arrival thread's wake-up and the engine's; its spread too), the lag of
a request that arrives while a step runs (the arrival thread waits for the engine thread's
interpreter lock: from the run metadata's ``send_lags_s``), the emit lead (tokens come out when
the model finishes, before the step's bookkeeping and the next plan), the cost of waking an idle
engine and of the step after a prefill, and the steps' scatter around the model (step-time
noise). With noise or lag spreads in the model, the simulated percentiles pool ``REPLICAS``
replays of the run that differ only in those seeded draws: the comparison is against the
model's distribution, not one draw of it.

The target is a relative error within 5% below saturation; above it, small differences in
step time compound through the queue and the comparison says so instead of passing. A fit too
poor to predict from (``stepmodel.judge``) is refused unless ``allow_poor_fit``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from servebench.analysis.contract import metric_values
from servebench.analysis.percentiles import percentile
from servebench.capacity.stepmodel import FitMethod, StepFit, bin_means, fit_step_model, require_usable
from servebench.errors import ConfigError, InputFormatError
from servebench.records.steps import StepTrace, as_trace
from servebench.records.table import STATUSES, RecordTable
from servebench.serving.scenario import Scenario, with_server, with_step_model
from servebench.serving.simulate import simulate

METRICS: tuple[str, ...] = ("ttft", "tpot", "latency")
QUANTILES: tuple[int, ...] = (50, 95)
TARGET_REL_ERROR = 0.05
MIN_IDLE_ARRIVALS = 5  # arrivals at an idle engine needed to measure the arrival lag
LAG_BINS = 20  # the arrival lag's spread: the mean of each 5% of the idle arrivals' lags
SATURATED_QUEUE_SHARE = 0.2  # share of busy time with requests waiting above which a run is saturated
SPEED_WINDOW_S = 0.5  # window over which measured step time is compared with the fitted model
REPLICAS = 8  # replays of the run pooled for the simulated percentiles (they differ in noise and lags only)


class MetricComparison(BaseModel):
    """One percentile of one metric, measured and simulated."""

    metric: str = Field(description="ttft, tpot or latency (success-only, seconds).")
    q: int
    measured_s: float | None
    simulated_s: float | None
    rel_error: float | None = Field(description="(simulated - measured) / measured; None without both values.")
    within_target: bool | None


class Validation(BaseModel):
    """The fitted step model and how well the simulator reproduces the run."""

    fit: StepFit
    comparisons: list[MetricComparison]
    measured_status: dict[str, int]
    simulated_status: dict[str, int]
    queue_share: float = Field(description="Share of the run's busy time during which requests waited.")
    speed_ratio_p5: float | None = Field(
        None, description="5th percentile over time windows of measured / fitted step time (1 = the fit).")
    speed_ratio_p95: float | None = Field(
        None, description="95th percentile of the same ratio; far from 1 means the machine's speed drifted "
                          "during the run (other load), which no fitted model can replay.")
    saturated: bool
    saturation_evidence: str
    max_abs_rel_error: float | None
    target_rel_error: float = TARGET_REL_ERROR
    passed: bool | None = Field(description="Every comparison within target (None when saturated: not judged).")
    fit_summary: str = Field("", description="The fit's quality in one line, shown beside the prediction.")
    notes: list[str] = Field(default_factory=list)


Steps = StepTrace | Sequence[Mapping[str, Any]]  # a trace, or rows under its names or the old ones


def _trace(steps: Steps) -> StepTrace:
    try:
        return as_trace(steps)
    except InputFormatError as exc:  # rows handed over in memory, not a file
        raise ConfigError(str(exc)) from None


def _values(trace: StepTrace, name: str, null: float | None = None) -> np.ndarray:
    """Return a column as floats; rows where it is null take ``null``, or the trace is refused."""
    a = getattr(trace, name)
    values = np.full(len(trace), math.nan) if a is None else a.astype(np.float64)
    if null is not None:
        return np.where(np.isnan(values), null, values)
    if np.isnan(values).any():
        raise ConfigError(f"step trace row {int(np.argmax(np.isnan(values))) + 1}: no {name}")
    return values


def fit_trace(steps: Steps, records: RecordTable | None = None, *, method: FitMethod = "huber",
              noise: bool = True, send_lags_s: Mapping[str, float] | None = None) -> StepFit:
    """Fit the step model to a timing run's step trace (``servebench run``'s steps.jsonl, read or in memory).

    With the run's ``records`` the arrival lag is measured too; the emit lead needs the trace's
    ``compute_start_s`` (older traces without it leave the lead at 0). With ``noise`` the model
    carries the steps' scatter around it (``stepmodel.fit_noise``), and the spread of the arrival
    lags, so a simulation replays both; with the run's ``send_lags_s`` (request ID -> how late the
    arrival thread submitted it: the run metadata's ``run.send_lags_s``) also the lags of requests
    that arrived while a step ran (the thread waits for the engine's).
    """
    trace = _trace(steps)
    if not len(trace):
        raise ConfigError("the step trace is empty: the run computed nothing")
    fit = fit_step_model(trace, method=method, noise=noise)
    timing: dict[str, Any] = {"emit_lead_s": emit_lead_s(trace) or 0.0}
    if records is not None:
        busy = busy_arrival_lags(records, trace, send_lags_s) if send_lags_s and noise else None
        timing |= arrival_lag_fields(idle_arrival_lags(records, trace), spread=noise, busy_lags_s=busy)
    fit.model = fit.model.model_copy(update=timing)
    return fit


def arrival_lag_fields(lags_s: np.ndarray, *, spread: bool = True,
                       busy_lags_s: np.ndarray | None = None) -> dict[str, Any]:
    """Return the step model's ``arrival_lag_s`` (the median idle arrival lag) and, with ``spread``,
    ``arrival_lags_s`` (its distribution); nothing with fewer than ``MIN_IDLE_ARRIVALS`` lags. With
    ``busy_lags_s`` (lags of arrivals while a step ran) also ``busy_arrival_lags_s``."""
    lags = _finite_lags(lags_s)
    if lags.size < MIN_IDLE_ARRIVALS:
        return {}
    out: dict[str, Any] = {"arrival_lag_s": float(np.median(lags))}
    if spread:
        out["arrival_lags_s"] = tuple(float(x) for x in bin_means(lags, min(LAG_BINS, lags.size)))
        busy = _finite_lags(busy_lags_s if busy_lags_s is not None else np.zeros(0))
        if busy.size >= MIN_IDLE_ARRIVALS:
            out["busy_arrival_lags_s"] = tuple(float(x) for x in bin_means(busy, min(LAG_BINS, busy.size)))
    return out


def _finite_lags(lags_s: np.ndarray) -> np.ndarray:
    lags = np.maximum(np.asarray(lags_s, dtype=np.float64), 0.0)
    return lags[np.isfinite(lags)]


def emit_lead_s(steps: Steps) -> float | None:
    """Return the median time from the model finishing a step to the step's end (None: not traced)."""
    t = _trace(steps)
    if t.compute_start_s is None or t.compute_s is None:
        return None
    trailing = (_values(t, "start_s") + _values(t, "duration_s") - t.compute_start_s.astype(np.float64)
                - t.compute_s.astype(np.float64))
    trailing = trailing[np.isfinite(trailing)]
    if not trailing.size:
        return None
    return max(0.0, float(np.median(trailing)))


def _arrived_busy(arrival_s: np.ndarray, steps: Steps) -> np.ndarray:
    """Return whether a step was running at each arrival time."""
    t = _trace(steps)
    start = _values(t, "start_s")
    end = start + _values(t, "duration_s")
    order = np.argsort(start, kind="stable")
    start, end = start[order], np.maximum.accumulate(end[order])
    i = np.searchsorted(start, arrival_s, side="right") - 1
    return (i >= 0) & (end[np.maximum(i, 0)] > arrival_s)


def idle_arrival_lags(records: RecordTable, steps: Steps) -> np.ndarray:
    """Return admitted - start of the requests that arrived while the engine was idle (no step running)."""
    ok = np.isfinite(records.admitted)
    arrival, admitted = records.start[ok], records.admitted[ok]
    busy = _arrived_busy(arrival, steps)
    return admitted[~busy] - arrival[~busy]


def busy_arrival_lags(records: RecordTable, steps: Steps, send_lags_s: Mapping[str, float]) -> np.ndarray:
    """Return how late the requests that arrived while a step ran were submitted (from ``send_lags_s``)."""
    lags = np.array([send_lags_s.get(str(rid), math.nan) for rid in records.request_id], dtype=np.float64)
    busy = _arrived_busy(records.start, steps) & np.isfinite(lags)
    return lags[busy]


def arrival_lag_s(records: RecordTable, steps: Steps) -> float | None:
    """Return the median lag from arrival to admission at an idle engine (None: too few idle arrivals)."""
    lags = idle_arrival_lags(records, steps)
    if lags.size < MIN_IDLE_ARRIVALS:
        return None
    return max(0.0, float(np.median(lags)))


def simulation_scenario(scenario: Scenario, fit: StepFit) -> Scenario:
    """Return the scenario as the engine ran it, timed by the fitted step model."""
    return with_step_model(with_server(scenario, prefill_lane="shared"), fit.model)


def _status_counts(table: RecordTable) -> dict[str, int]:
    counts = np.bincount(table.status.astype(np.int64), minlength=len(STATUSES))
    return {s: int(c) for s, c in zip(STATUSES, counts)}


def _queue_share(steps: Steps) -> float:
    t = _trace(steps)
    duration = _values(t, "duration_s")
    busy = float(duration.sum())
    waiting = float(duration[_values(t, "waiting", null=0) > 0].sum())
    return waiting / busy if busy > 0 else 0.0


def speed_ratios(steps: Steps, fit: StepFit, window_s: float = SPEED_WINDOW_S) -> tuple[float | None, float | None]:
    """Return the 5th and 95th percentiles, over time windows, of measured / fitted step time."""
    t = _trace(steps)
    start, measured = _values(t, "start_s"), _values(t, "duration_s")
    predicted = fit.model.step_s(_values(t, "prefill_tokens"), _values(t, "decode_seqs"),  # type: ignore[arg-type]
                                 _values(t, "kv_tokens_read"), _values(t, "prefill_seqs", null=0))
    window = np.floor(start / window_s).astype(np.int64)
    window -= window.min(initial=0)
    num = np.bincount(window, weights=measured)
    den = np.bincount(window, weights=predicted)
    count = np.bincount(window)
    ok = (count >= 5) & (den > 0)
    if ok.sum() < 2:
        return None, None
    ratio = num[ok] / den[ok]
    return float(np.percentile(ratio, 5)), float(np.percentile(ratio, 95))


def compare(measured: RecordTable, simulated: RecordTable | Sequence[RecordTable]) -> list[MetricComparison]:
    """Return p50 and p95 of each metric, measured against simulated (several replays: pooled)."""
    replays = [simulated] if isinstance(simulated, RecordTable) else list(simulated)
    out = []
    for metric in METRICS:
        mv, _ = metric_values(measured, metric)
        sv = np.concatenate([metric_values(t, metric)[0] for t in replays])
        for q in QUANTILES:
            m, s = percentile(mv, q), percentile(sv, q)
            rel = None if m is None or s is None or m <= 0 else (s - m) / m
            out.append(MetricComparison(metric=metric, q=q, measured_s=m, simulated_s=s, rel_error=rel,
                                        within_target=None if rel is None else abs(rel) <= TARGET_REL_ERROR))
    return out


def validate_run(records: RecordTable, steps: Steps, scenario: Scenario, *,
                 allow_poor_fit: bool = False, method: FitMethod = "huber",
                 send_lags_s: Mapping[str, float] | None = None) -> Validation:
    """Fit, simulate and compare; see the module docstring. Raises ``PoorFitError`` on a poor fit.

    ``send_lags_s`` is the run metadata's ``run.send_lags_s`` (see ``fit_trace``), when the run has it.
    """
    steps = _trace(steps)
    fit = fit_trace(steps, records, method=method, send_lags_s=send_lags_s)
    require_usable(fit, allow_poor_fit=allow_poor_fit, what="the run's step trace")
    sc = simulation_scenario(scenario, fit)
    noisy = bool(fit.model.noise_factors or fit.model.noise_excess_s or fit.model.arrival_lags_s
                 or fit.model.busy_arrival_lags_s)
    sims = [simulate(sc, replica=k) for k in range(REPLICAS if noisy else 1)]
    sim = sims[0]
    comparisons = compare(records, [s.records for s in sims])
    measured_status = _status_counts(records)
    share = _queue_share(steps)
    failed = measured_status["rejected"] + measured_status["timeout"]
    saturated = share > SATURATED_QUEUE_SHARE or failed > 0
    evidence = (f"requests waited during {share:.0%} of the busy time (threshold {SATURATED_QUEUE_SHARE:.0%}); "
                f"{measured_status['rejected']} rejected, {measured_status['timeout']} timed out")
    errors = [abs(c.rel_error) for c in comparisons if c.rel_error is not None]
    lo, hi = speed_ratios(steps, fit)
    notes = []
    if lo is not None and hi is not None and (lo < 0.8 or hi > 1.25):
        notes.append(f"the machine's speed drifted during the run: over {SPEED_WINDOW_S:g} s windows, measured step "
                     f"time ran from {lo:.2f}x to {hi:.2f}x of the fitted model (5th to 95th percentile); "
                     "the tails of a shared or throttled machine cannot be replayed by a fitted model")
    if fit.quality is not None and not fit.quality.usable:
        notes.append(f"predicted from a poor fit (--allow-poor-fit): {fit.quality.reason}")
    if fit.excess_share is not None and fit.excess_share > 0.05:
        notes.append(f"steps took {fit.excess_share:.0%} longer in total than the robust fit predicts: time the fit "
                     "leaves to slow outliers (another process on the machine), so the run's tails exceed the "
                     "simulation's")
    if scenario.server.prefill_lane != "shared":
        notes.append("the scenario asks for a separate prefill lane; the engine computes prompts inside the "
                     "batched step, so the simulation uses prefill_lane: shared")
    judged = [c.within_target for c in comparisons if c.within_target is not None]
    passed = None if saturated or not judged else all(judged)
    return Validation(fit=fit, comparisons=comparisons, measured_status=measured_status,
                      simulated_status=sim.status_counts(), queue_share=share, speed_ratio_p5=lo,
                      speed_ratio_p95=hi, saturated=saturated,
                      saturation_evidence=evidence, max_abs_rel_error=max(errors) if errors else None,
                      passed=passed, fit_summary=fit.summary, notes=notes)
