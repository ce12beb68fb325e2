"""A measured offered-load sweep against a simulated one: does the simulator find the same knee?

At each offered rate the real engine serves the scenario open loop, in process (as ``servebench
run``); the step model is fitted to each rate's own step trace and records (the engine's steps and
lags change with the load: one model for all rates left 14-30% errors below the knee), with the
fit's quality beside each point, and the pooled fit of every rate's trace stands in where a rate's
own is too poor. The simulator replays each rate with the same seed, ``REPLICAS`` times with
different noise and lag draws, pooled, so one unlucky draw does not decide a p95. Per rate the
measured and simulated TTFT and latency p50/p95, throughput and queue wait are compared, and the
knee is found both ways by one rule (``knee_rps``). With ``engine_repeats`` 2 the engine serves
each rate twice: the second run's difference from the first is the measurement's own noise floor,
and each simulated error is reported against it.

A scenario that replays a trace is offered each rate by its speedup, as a sweep over a trace is: the
trace's requests at speedup 1 arrive at :func:`replay_rate_rps` (requests - 1 over the span of their
arrivals, the rate a sweep point reads), so rate ``r`` replays them at speedup ``r`` / that rate, with
the trace's own bursts and lengths, on the engine and in the simulator alike (:func:`scenario_at_rate`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servebench.analysis.summary import SLO
from servebench.capacity.stepmodel import FitMethod, StepFit, require_usable
from servebench.errors import ConfigError, InputFormatError
from servebench.formatting import fmt
from servebench.records import rundir
from servebench.records.schema import parse_objects
from servebench.records.table import RecordTable, validate
from servebench.serving.engine.validation import (
    REPLICAS,
    arrival_lag_fields,
    busy_arrival_lags,
    fit_trace,
    idle_arrival_lags,
    simulation_scenario,
)
from servebench.serving.scenario import Scenario
from servebench.serving.simulate import SimResult, simulate
from servebench.serving.sweep import SweepPoint, offered_of, point_from, point_from_records, scenario_at
from servebench.serving.workload import replay_trace

KNEE_FACTOR = 2.0  # the knee: TTFT p95 at least this many times its value at the lowest rate
TARGET_KNEE_REL_ERROR = 0.10
TARGET_BELOW_KNEE_REL_ERROR = 0.10
CPU_REQUESTS_PER_RATE = 200  # the CPU-sized default: about 40 s per engine pass over five rates of tiny_cpu
CPU_MAX_WALL_S_PER_RATE = 30.0
LONG_MAX_WALL_S_PER_RATE = 300.0
COMPARED: tuple[str, ...] = ("ttft_p50_s", "ttft_p95_s", "latency_p50_s", "latency_p95_s")  # held to the target
METRICS: tuple[str, ...] = ("ttft_p50_s", "ttft_p95_s", "latency_p50_s", "latency_p95_s", "throughput_rps",
                            "queue_wait_p50_s", "queue_wait_p95_s")
RESULT = rundir.VALIDATION  # in the output folder, beside REPORT and one run folder per rate (rundir.rate_folder)
REPORT = rundir.VALIDATION_REPORT
Progress = Callable[[str, float], None]  # (stage: "run" or "simulate", rate)


class PointComparison(BaseModel):
    """One offered rate, measured and simulated, with relative errors ((simulated - measured) / measured)."""

    model_config = ConfigDict(extra="forbid")

    rate_rps: float
    measured: dict[str, float | None]
    simulated: dict[str, float | None]
    rel_error: dict[str, float | None] = Field(description="None where a value is missing or measured is 0.")
    below_knee: bool = Field(description="Below the measured knee (or no knee found): the percentiles here are "
                                         "held to the target.")
    measured_status: dict[str, int]
    simulated_status: dict[str, int]
    fit_summary: str | None = Field(None, description="The fit the simulation of this rate used, in one line.")
    engine_rel_diff: dict[str, float | None] | None = Field(None, description="The engine's own repeatability: "
                                                            "a second run of this rate against the first, as "
                                                            "rel_error (None: served once).")
    within_engine_spread: list[str] | None = Field(None, description="The compared metrics whose simulated error "
                                                   "is no larger than the engine's own run-to-run difference.")
    speedup: float | None = Field(None, description="A trace replay's speedup that offered this rate, on the engine "
                                                    "and in the simulator (None: drawn arrivals at the rate).")


class SweepValidation(BaseModel):
    """The whole comparison: ``points``, the knee both ways and its error, the fit behind the simulation."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")

    scenario: str
    rates_rps: list[float]
    requests_per_rate: int
    points: list[PointComparison]
    measured_knee_rps: float | None
    simulated_knee_rps: float | None
    knee_relative_error: float | None = Field(description="(simulated - measured) / measured knee; None unless "
                                                          "both sweeps have a knee.")
    knee_rule: str
    max_below_knee_rel_error: float | None = Field(description="Largest |error| of TTFT and latency p50/p95 "
                                                               "below the measured knee.")
    max_below_knee_engine_rel_diff: float | None = Field(None, description="Largest |difference| of the same "
                                                         "metrics between two engine runs of one rate, below the "
                                                         "knee (None: served once): the measurement's noise floor.")
    engine_repeats: int = 1
    replicas: int = Field(1, description="Seeded simulated replays pooled per rate.")
    target_knee_rel_error: float = TARGET_KNEE_REL_ERROR
    target_below_knee_rel_error: float = TARGET_BELOW_KNEE_REL_ERROR
    fit: StepFit
    fit_summary: str
    measured_sweep: list[SweepPoint]
    simulated_sweep: list[SweepPoint]
    notes: list[str] = Field(default_factory=list)


def knee_rps(points: Sequence[SweepPoint], factor: float = KNEE_FACTOR, slo_given: bool = False) -> float | None:
    """Return the lowest rate where TTFT p95 is at least ``factor`` x its value at the lowest rate.

    With SLOs given, the knee is instead the lowest rate whose point no longer meets them (where
    the SLO capacity falls). A point with no successful request counts as past the knee; None
    when no rate is past it. The knee is where the curve stays past: a rate past it followed by
    a higher rate back below is one noisy p95 (a stall in a 200-request run), not the knee.

    >>> from servebench.serving.sweep import SweepPoint
    >>> def p(rate, ttft):
    ...     return SweepPoint.model_construct(load=rate, ttft_s={"p95": ttft}, meets_slo=True)
    >>> knee_rps([p(1, 0.1), p(2, 0.15), p(4, 0.2), p(8, 0.9)])
    4.0
    """
    ordered = sorted(points, key=lambda p: p.load)
    if not ordered:
        return None
    if slo_given:
        past = [not p.meets_slo for p in ordered]
    else:
        base = ordered[0].ttft_s.get("p95")
        if base is None:
            return float(ordered[0].load)
        past = [False] + [p.ttft_s.get("p95") is None or p.ttft_s["p95"] >= factor * base for p in ordered[1:]]
    knee = None
    for p, is_past in zip(reversed(ordered), reversed(past)):  # from the top: the lowest rate of the last run past
        if not is_past:
            break
        knee = float(p.load)
    return knee


def metrics_of(point: SweepPoint) -> dict[str, float | None]:
    """Return the compared metrics of one sweep point."""
    return {"ttft_p50_s": point.ttft_s.get("p50"), "ttft_p95_s": point.ttft_s.get("p95"),
            "latency_p50_s": point.latency_s.get("p50"), "latency_p95_s": point.latency_s.get("p95"),
            "throughput_rps": point.throughput_rps, "queue_wait_p50_s": point.queue_wait_s.get("p50"),
            "queue_wait_p95_s": point.queue_wait_s.get("p95")}


def rel_error(measured: float | None, simulated: float | None) -> float | None:
    """Return (simulated - measured) / measured, or None without both values or with measured 0."""
    if measured is None or simulated is None or not np.isfinite(measured) or measured == 0:
        return None
    return (simulated - measured) / measured


def compare_sweeps(measured: Sequence[SweepPoint], simulated: Sequence[SweepPoint], *, slo_given: bool = False,
                   measured_status: Sequence[dict[str, int]] | None = None,
                   simulated_status: Sequence[dict[str, int]] | None = None,
                   repeated: Sequence[SweepPoint] | None = None,
                   fit_summaries: Sequence[str] | None = None) -> tuple[list[PointComparison], dict[str, Any]]:
    """Pair points by rate, compute relative errors, the knee both ways and the below-knee error.

    ``repeated`` is a second engine run of each rate: its difference from the first is reported
    per point and below the knee (the noise floor any simulated error is judged against).
    """
    if repeated is not None and [p.load for p in repeated] != [p.load for p in measured]:
        raise ConfigError("the repeated engine runs must cover the measured rates")
    if [p.load for p in measured] != [p.load for p in simulated]:
        raise ConfigError("measured and simulated sweeps must cover the same rates")
    m_knee = knee_rps(measured, slo_given=slo_given)
    s_knee = knee_rps(simulated, slo_given=slo_given)
    out, below, floor = [], [], []
    for i, (m, s) in enumerate(zip(measured, simulated)):
        mv, sv = metrics_of(m), metrics_of(s)
        errs = {k: rel_error(mv[k], sv[k]) for k in METRICS}
        diffs = within = None
        if repeated is not None:
            again = metrics_of(repeated[i])
            diffs = {k: rel_error(mv[k], again[k]) for k in METRICS}
            within = [k for k in COMPARED if errs[k] is not None and diffs[k] is not None
                      and abs(errs[k]) <= abs(diffs[k])]
        is_below = m_knee is None or m.load < m_knee
        if is_below:
            below += [abs(errs[k]) for k in COMPARED if errs[k] is not None]
            floor += [abs(diffs[k]) for k in COMPARED if diffs is not None and diffs[k] is not None]
        out.append(PointComparison(rate_rps=m.load, measured=mv, simulated=sv, rel_error=errs, below_knee=is_below,
                                   measured_status=dict(measured_status[i]) if measured_status else {},
                                   simulated_status=dict(simulated_status[i]) if simulated_status else {},
                                   fit_summary=fit_summaries[i] if fit_summaries else None,
                                   engine_rel_diff=diffs, within_engine_spread=within))
    summary = {"measured_knee_rps": m_knee, "simulated_knee_rps": s_knee,
               "knee_relative_error": rel_error(m_knee, s_knee),
               "max_below_knee_rel_error": max(below) if below else None,
               "max_below_knee_engine_rel_diff": max(floor) if floor else None}
    return out, summary


def pooled(sims: Sequence[SimResult]) -> SimResult:
    """Return replays of one run as one: their records laid end to end on the clock (percentiles over all,
    throughput over their summed windows), the first replay's step trace."""
    offsets = np.cumsum([0.0] + [s.window_end_s - s.window_start_s for s in sims[:-1]])
    tables = [s.records for s in sims]

    def joined(name: str, shift: bool = False) -> np.ndarray:
        return np.concatenate([getattr(t, name) + (o if shift else 0.0) for t, o in zip(tables, offsets)])

    records = RecordTable.from_columns(
        start=joined("start", True), end=joined("end", True), first_token=joined("first_token", True),
        admitted=joined("admitted", True), status=joined("status"), output_tokens=joined("output_tokens"),
        prompt_tokens=joined("prompt_tokens"), source=sims[0].name,
        request_id=np.array([f"{k}:{rid}" for k, t in enumerate(tables) for rid in t.request_id], dtype=object))
    return replace(sims[0], records=records, window_start_s=0.0,
                   window_end_s=float(offsets[-1] + sims[-1].window_end_s - sims[-1].window_start_s))


def pooled_point(sims: Sequence[SimResult], rate: float, slo: SLO, slo_target: float) -> SweepPoint:
    """Return the sweep point of replays of one run pooled (:func:`pooled`), offered at one replay's rate: the
    replays share their arrivals, and ``requests - 1`` gaps over the pooled span counted the gaps between replays
    (8 replays read a few % over the measured run's offered rate)."""
    point = point_from(pooled(sims), rate, "rate", slo, slo_target)
    first = sims[0]
    _, offered_rps = offered_of(first.records, "rate", max(first.window_end_s - first.window_start_s, 1e-9))
    return point.model_copy(update={"offered_rps": offered_rps,
                                    "attempted_rps": offered_rps * point.attempted / max(point.offered, 1)})


def _table(records: list[dict[str, Any]], name: str) -> tuple[RecordTable, float, float]:
    ends = [r["end"] for r in records]
    window_end = max(max(ends, default=0.0), 1e-9)
    return validate(parse_objects(records, name), 0.0, window_end), 0.0, window_end


def _server_fields(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Return what only the server sees, read off a timing run's step trace (as the simulator's)."""
    if not steps:
        return {"peak_active": 0, "mean_active": None, "peak_waiting": 0, "max_kv_tokens_used": 0, "preemptions": 0}
    dur = np.array([s["duration_s"] for s in steps])
    running = np.array([s["running"] for s in steps])
    busy = float(dur.sum())
    return {"peak_active": int(running.max()), "mean_active": float((running * dur).sum() / busy) if busy > 0 else None,
            "peak_waiting": int(max(s["waiting"] for s in steps)),
            "max_kv_tokens_used": int(max(s["kv_tokens_used"] for s in steps)),
            "preemptions": int(sum(s["preempted"] for s in steps))}


def _after(earlier: list[dict[str, Any]], steps: list[dict[str, Any]], gap_s: float = 1.0) -> list[dict[str, Any]]:
    """Return a run's steps moved on the clock to start ``gap_s`` after the ``earlier`` runs' last step ended.

    Every run's clock starts at 0; laid end to end, the traces fit as one (each run's first step
    after an idle engine, as it was).
    """
    if not earlier:
        return steps
    offset = max(s["start_s"] + s["duration_s"] for s in earlier) + gap_s
    moved = []
    for s in steps:
        row = dict(s, start_s=s["start_s"] + offset)
        if row.get("compute_start_s") is not None:
            row["compute_start_s"] += offset
        moved.append(row)
    return moved


def replay_rate_rps(scenario: Scenario, requests: int | None = None) -> tuple[float, int]:
    """Return the arrival rate of a trace replay's requests at speedup 1, and how many it replays.

    The rate is ``requests - 1`` over the span of the first ``requests`` arrivals of the window (None: all
    of it), as a sweep point reads its offered rate. Raises ConfigError when they arrive at one instant.
    """
    arrival_s = replay_trace(scenario_at(scenario, 1.0, "speedup", requests).workload).arrival_s
    span_s = float(arrival_s[-1] - arrival_s[0])
    if arrival_s.size < 2 or not span_s > 0:
        raise ConfigError(f"scenario {scenario.name!r}: the {arrival_s.size} requests its trace replays arrive at "
                          "one instant, so no speedup offers a rate; give a trace window whose requests arrive "
                          "over time")
    return (arrival_s.size - 1) / span_s, int(arrival_s.size)


def scenario_at_rate(scenario: Scenario, rate_rps: float, requests: int | None = None,
                     replay_rps: float | None = None) -> Scenario:
    """Return the scenario offering ``rate_rps``: drawn arrivals at that rate, or a trace at the speedup that offers it.

    ``replay_rps`` is the trace's rate at speedup 1 (:func:`replay_rate_rps`; computed when None).
    """
    if scenario.workload.trace is None:
        return scenario_at(scenario, rate_rps, "rate", requests)
    base_rps = replay_rps if replay_rps is not None else replay_rate_rps(scenario, requests)[0]
    return scenario_at(scenario, rate_rps / base_rps, "speedup", requests)


def validate_sweep(model: Any, scenario: Scenario, rates: Sequence[float], *, requests: int | None = None,
                   max_wall_s_per_rate: float | None = CPU_MAX_WALL_S_PER_RATE, slo: SLO | None = None,
                   slo_target: float = 0.95, allow_poor_fit: bool = False, method: FitMethod = "huber",
                   warmup_steps: int = 3, progress: Progress | None = None,
                   on_run: Callable[[float, Any, Scenario], None] | None = None, engine_repeats: int = 1,
                   replicas: int = REPLICAS) -> SweepValidation:
    """Run the engine at each rate, fit, simulate the same rates and compare (see the module docstring).

    ``model`` is a ``servebench.serving.engine.model.Decoder``; ``on_run(rate, timing_run, scenario)`` sees
    each rate's first measured run and the scenario it served (to write its folder). ``engine_repeats`` 2
    serves every rate a second time, after the first pass over all rates. A trace replay is offered each
    rate by its speedup (:func:`scenario_at_rate`). Raises ``PoorFitError`` when even the pooled fit is too
    poor.
    """
    from servebench.serving.engine.runner import run_scenario

    grid = sorted(set(float(r) for r in rates))
    if not grid or any(not (r > 0 and np.isfinite(r)) for r in grid):
        raise ConfigError(f"rates must be positive and finite, got {list(rates)}")
    if scenario.workload.arrival is None and scenario.workload.trace is None:
        raise ConfigError(f"scenario {scenario.name!r} is closed loop; validate-sweep needs open-loop arrivals "
                          "(or a trace to replay)")
    if engine_repeats not in (1, 2) or replicas < 1:
        raise ConfigError(f"engine_repeats must be 1 or 2 and replicas at least 1, got {engine_repeats}, {replicas}")
    slo = slo or SLO()
    slo_given = any(v is not None for v in (slo.ttft_s, slo.tpot_s, slo.latency_s))
    n = requests if requests is not None else scenario.workload.num_requests
    notes: list[str] = []
    replay_rps, speedups = None, None
    if scenario.workload.trace is not None:  # every rate through the trace's speedup, as a sweep over a trace
        replay_rps, replayed = replay_rate_rps(scenario, n)
        n = n or replayed
        speedups = [rate / replay_rps for rate in grid]
        notes.append(f"trace {scenario.workload.trace.path} replayed: its {replayed:,} requests arrive at "
                     f"{fmt(replay_rps)} requests/s at speedup 1, so each rate is replayed at rate / "
                     f"{fmt(replay_rps)} (" + ", ".join(f"{r:g}/s at {fmt(s)}x" for r, s in zip(grid, speedups))
                     + ")")
    at_rate = {rate: scenario_at_rate(scenario, rate, n, replay_rps) for rate in grid}  # every rate checked first
    measured, repeated, m_status = [], [], []
    all_steps, lags, busy_lags, own_fits = [], [], [], []
    for attempt in range(engine_repeats):
        for rate in grid:
            if progress is not None:
                progress("run", rate)
            run = run_scenario(model, at_rate[rate], max_wall_s=max_wall_s_per_rate, warmup_steps=warmup_steps)
            steps = run.step_dicts()
            table, ws, we = _table(run.records, f"measured at {rate:g}/s")
            point = point_from_records(table, ws, we, rate, "rate", slo, slo_target, server=_server_fields(steps))
            if attempt:
                repeated.append(point)
                continue
            if on_run is not None:
                on_run(rate, run, at_rate[rate])
            measured.append(point)
            m_status.append({s: int(c) for s, c in zip(*np.unique([r["status"] for r in run.records],
                                                                   return_counts=True))})
            notes += [f"at {rate:g}/s: {note}" for note in run.notes]
            own_fits.append(fit_trace(steps, table, method=method, send_lags_s=run.send_lags_s) if steps else None)
            if steps:
                lags.append(idle_arrival_lags(table, steps))
                busy_lags.append(busy_arrival_lags(table, steps, run.send_lags_s))
                all_steps += _after(all_steps, steps)
    fit = fit_trace(all_steps, method=method)
    fit.model = fit.model.model_copy(update=arrival_lag_fields(
        np.concatenate(lags) if lags else np.zeros(0), busy_lags_s=np.concatenate(busy_lags) if busy_lags else None))
    require_usable(fit, allow_poor_fit=allow_poor_fit, what="the sweep's step traces")
    if fit.quality is not None and not fit.quality.usable:
        notes.append(f"simulated from a poor fit (--allow-poor-fit): {fit.quality.reason}")
    simulated, s_status, summaries = [], [], []
    for rate, own in zip(grid, own_fits):
        if progress is not None:
            progress("simulate", rate)
        usable = own is not None and own.quality is not None and own.quality.usable
        if own is not None and not usable:
            notes.append(f"at {rate:g}/s: this rate's own fit is too poor ({own.summary}); simulated with the "
                         "fit of every rate's trace")
        used = own if usable and own is not None else fit
        summaries.append(("this rate's trace: " if used is own else "every rate's traces: ") + used.summary)
        sc = simulation_scenario(at_rate[rate], used)
        sims = [simulate(sc, replica=k, token_times=False) for k in range(replicas)]
        simulated.append(pooled_point(sims, rate, slo, slo_target))
        s_status.append({s: c for s, c in sims[0].status_counts().items() if c})
    points, summary = compare_sweeps(measured, simulated, slo_given=slo_given, measured_status=m_status,
                                     simulated_status=s_status, repeated=repeated or None,
                                     fit_summaries=summaries)
    for point, speedup in zip(points, speedups or []):
        point.speedup = speedup
    rule = ("the lowest rate whose point misses the SLOs (where the SLO capacity falls), and every higher rate "
            "too" if slo_given else f"the lowest rate where TTFT p95 is at least {KNEE_FACTOR:g}x its value at "
            "the lowest rate, and at every higher rate")
    if summary["measured_knee_rps"] is None:
        notes.append(f"no knee in the measured sweep up to {grid[-1]:g}/s: add higher rates to find it")
    floor = summary["max_below_knee_engine_rel_diff"]
    if floor is not None and floor > TARGET_BELOW_KNEE_REL_ERROR:
        notes.append(f"the engine itself is not repeatable to the target: a second run of the same rate and seed "
                     f"differs by up to {floor:.0%} below the knee (target {TARGET_BELOW_KNEE_REL_ERROR:.0%}), so "
                     "simulated errors up to that are within the measurement's own noise")
    return SweepValidation(scenario=scenario.name, rates_rps=grid, requests_per_rate=int(n or 0), points=points,
                           knee_rule=rule, fit=fit, fit_summary=fit.summary, measured_sweep=measured,
                           simulated_sweep=simulated, notes=notes, engine_repeats=engine_repeats,
                           replicas=replicas, **summary)


def read_sweep_validation(path: Path) -> dict[str, Any]:
    """Read a validate-sweep output folder's result (or the JSON file itself) as JSON data, checked."""
    file = path / RESULT if path.is_dir() else path
    return sweep_validation_doc(rundir.read_validation(file), str(file))


def sweep_validation_doc(doc: Any, source: str) -> dict[str, Any]:
    """Check that parsed JSON is a validate-sweep result; return it."""
    if not isinstance(doc, dict) or not isinstance(doc.get("points"), list):
        raise InputFormatError(f"{source}: no 'points' list; was it written by servebench validate-sweep?")
    for i, p in enumerate(doc["points"]):
        if not (isinstance(p, dict) and isinstance(p.get("rate_rps"), (int, float))
                and isinstance(p.get("measured"), dict) and isinstance(p.get("simulated"), dict)):
            raise InputFormatError(f"{source}, point {i + 1}: needs rate_rps, measured and simulated")
    return doc


__all__ = ["PointComparison", "SweepValidation", "compare_sweeps", "knee_rps", "metrics_of", "pooled", "pooled_point",
           "rel_error", "read_sweep_validation", "replay_rate_rps", "scenario_at_rate", "sweep_validation_doc",
           "validate_sweep"]
