"""Offered-load sweeps over the simulator, and the usable capacity found by search.

Each point simulates the scenario at one arrival rate (open loop), one number of users (closed
loop) or one speedup of a replayed trace, with the *same seed*, so points share their random draws
(common random numbers: Poisson gaps scale exactly with 1 / rate) and curves are smooth. A trace is
swept by its speedup, not by a Poisson rate: every point replays the same requests with the trace's own
bursts, its arrival times divided by the speedup, so the knee is found for the real burst pattern. Per point: offered, accepted, completed,
rejected, timed out, throughput, p50/p95/p99 of TTFT, request TPOT, latency and queue wait (from
``summary.build_report``), goodput under the SLOs.

A point *meets the SLOs* when the share of offered requests that succeed within every limit
(failures count as misses) is at least ``slo_target``. The usable capacity is the highest load
that meets them: the grid brackets it (last meeting point below the first failing one; the
bracket widens by doubling or halving when the grid does not straddle it) and bisection narrows
the bracket to ``tolerance``. Capacity is the bracket's meeting end, never an extrapolation.

With several seeds the whole sweep (grid and search) is repeated per seed; the first seed's
points are the result and :class:`SeedSpread` reports the range over seeds of each grid point and
of the capacity. A :class:`PointRunner` evaluates the points: :class:`SerialRunner` here, one
after another; :mod:`servebench.load.ray_runner` runs them as Ray tasks with identical results.
"""

from __future__ import annotations

import csv
import io
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from servebench.analysis.retries import logical_codes
from servebench.analysis.summary import SLO, Distribution, Report, build_report
from servebench.errors import ConfigError
from servebench.records.steps import LANES
from servebench.records.table import RecordTable
from servebench.serving.disagg import simulate_deployment
from servebench.serving.scenario import Scenario, with_request_count
from servebench.serving.simulate import SimResult
from servebench.serving.workload import MAX_GENERATED, ClosedLoopSpec, rate_problem

Mode = Literal["rate", "users", "speedup"]
# each mode's load axis: its title and its unit, for tables and figures
LOAD_AXES: dict[str, tuple[str, str]] = {"rate": ("Offered load (requests/s)", "req/s"),
                                         "users": ("Concurrent users", "users"),
                                         "speedup": ("Trace speedup (x its own arrival rate)", "x")}
ProgressCallback = Callable[[int, int, "SweepPoint"], None]
QUANTILES = (50, 95, 99)
MAX_WIDEN = 6  # doublings (or halvings) tried when the grid does not bracket the capacity


class SweepPoint(BaseModel):
    """The outcome of one offered load."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")

    load: float = Field(description="Arrival rate (req/s), users or a trace's speedup, as swept.")
    source: Literal["grid", "search"] = "grid"
    offered: int = Field(description="User (logical) requests offered; each of their attempts is a record.")
    attempted: int | None = Field(None, description="Attempts sent (records): offered times the retry "
                                                    "amplification (None: a sweep file from before retries).")
    accepted: int
    completed: int
    rejected: int
    timed_out: int
    cancelled: int
    failed: int
    window_s: float
    offered_rps: float = Field(description="Offered user requests per second of arrivals (closed loop: of window).")
    attempted_rps: float | None = Field(None, description="Attempts per second: offered_rps x attempts / offered.")
    throughput_rps: float = Field(description="Completed requests per second of window.")
    output_tokens_per_s: float = Field(description="Successful output tokens per second of window.")
    goodput_rps: float = Field(description="Requests meeting every SLO per second of window.")
    slo_attainment: float = Field(description="Requests meeting every SLO / offered user requests (failures "
                                              "are misses).")
    meets_slo: bool
    ttft_s: dict[str, float | None]
    tpot_s: dict[str, float | None]
    latency_s: dict[str, float | None]
    queue_wait_s: dict[str, float | None]
    failure_aware_latency_s: dict[str, float | None] | None = Field(
        None, description="Latency percentiles with every non-success as +infinity (None: a sweep file from before "
                          "this field). Success-only latency can fall past saturation as the slowest requests fail; "
                          "this one cannot.")
    peak_active: int | None = Field(description="Most running sequences (step trace; None when measured "
                                            "from a client, which cannot see it).")
    mean_active: float | None = Field(description="Time-weighted mean running sequences while the engine ran.")
    peak_waiting: int | None = Field(description="Most waiting requests (None: not observable).")
    max_kv_tokens_used: int | None = Field(description="Most KV tokens held (None: not observable).")
    preemptions: int | None = Field(description="Preempted sequences (None: not observable).")


SERVER_FIELDS: tuple[str, ...] = ("peak_active", "mean_active", "peak_waiting", "max_kv_tokens_used", "preemptions")


class Capacity(BaseModel):
    """The highest load found that meets the SLOs, and how it was found."""

    model_config = ConfigDict(extra="forbid")

    load: float | None = Field(description="Highest load known to meet the SLOs (None: none found).")
    upper: float | None = Field(description="Lowest load known to miss them (None: none found).")
    evaluations: int = Field(description="Extra simulations run by the search.")
    note: str


class Interval(BaseModel):
    """The smallest and largest value over seeds, and how many seeds had a value."""

    model_config = ConfigDict(extra="forbid")

    min: float | None
    max: float | None
    n: int = Field(description="Seeds with a value (a percentile of no successes has none).")


class PointSpread(BaseModel):
    """One grid load over every seed."""

    model_config = ConfigDict(extra="forbid")

    load: float
    seeds_meeting_slo: int
    slo_attainment: Interval
    goodput_rps: Interval
    throughput_rps: Interval
    ttft_p95_s: Interval
    latency_p95_s: Interval


class SeedSpread(BaseModel):
    """The sweep repeated over several seeds: the range of each grid point and of the capacity."""

    model_config = ConfigDict(extra="forbid")

    seeds: list[int]
    capacity_by_seed: list[float | None] = Field(description="Each seed's capacity (None: no load met the SLOs).")
    capacity: Interval = Field(description="Lowest and highest capacity over seeds; min is None when some seed "
                                           "found none.")
    points: list[PointSpread] = Field(description="Grid loads (every seed ran them), by load.")


class SweepResult(BaseModel):
    """A sweep: its settings, its points by load, the capacity and the knee."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings")

    scenario: str
    mode: Mode
    seed: int
    requests_per_point: int | None
    slo: SLO
    slo_target: float
    points: list[SweepPoint] = Field(description="Grid and search points, by load.")
    capacity: Capacity
    knee_load: float | None = Field(description="Lowest load whose p95 latency or p95 TTFT is over twice the lowest "
                                                "load's (None: none).")
    kv_budget_tokens: int | None = Field(description="The server's KV budget (None: a measured server's is unknown).")
    spread: SeedSpread | None = Field(None, description="The range over seeds (None: one seed was run).")


def interval(values: Sequence[float | None]) -> Interval:
    """Return the range of the values that are not None.

    >>> interval([2.0, None, 1.5])
    Interval(min=1.5, max=2.0, n=2)
    """
    known = [v for v in values if v is not None]
    return Interval(min=min(known) if known else None, max=max(known) if known else None, n=len(known))


def seed_spread(seeds: Sequence[int], grid: Sequence[float], points: dict[int, dict[float, SweepPoint]],
                capacities: Sequence[Capacity]) -> SeedSpread:
    """Return the range over seeds of each grid point's outcome and of the capacity."""
    rows = []
    for x in grid:
        at = [points[s][x] for s in seeds]
        rows.append(PointSpread(
            load=x, seeds_meeting_slo=sum(p.meets_slo for p in at),
            slo_attainment=interval([p.slo_attainment for p in at]),
            goodput_rps=interval([p.goodput_rps for p in at]),
            throughput_rps=interval([p.throughput_rps for p in at]),
            ttft_p95_s=interval([p.ttft_s["p95"] for p in at]),
            latency_p95_s=interval([p.latency_s["p95"] for p in at])))
    loads = [c.load for c in capacities]
    cap = interval(loads)
    if any(v is None for v in loads):
        cap = cap.model_copy(update={"min": None})
    return SeedSpread(seeds=list(seeds), capacity_by_seed=loads, capacity=cap, points=rows)


@dataclass(frozen=True)
class PointTask:
    """One simulation of a sweep: a load under one seed."""

    load: float
    seed: int
    source: Literal["grid", "search"] = "grid"


@dataclass(frozen=True)
class SweepJob:
    """What every point of a sweep shares; ``evaluate`` runs one :class:`PointTask` (picklable, for Ray)."""

    scenario: Scenario
    mode: Mode
    slo: SLO
    slo_target: float
    requests: int | None

    def evaluate(self, task: PointTask) -> tuple[SweepPoint, int]:
        """Simulate one task; return its point and the server's KV budget in tokens."""
        sc = self.scenario
        if task.seed != sc.seed:
            sc = sc.model_copy(update={"seed": task.seed})
        point, sim = evaluate(sc, task.load, self.mode, self.slo, self.slo_target, self.requests, task.source)
        return point, sim.kv_budget_tokens


class PointRunner(Protocol):
    """Evaluates sweep points; ``parallel`` runners get the seeds' searches at once."""

    parallel: bool

    def run(self, job: SweepJob, tasks: Sequence[PointTask]) -> Iterator[tuple[PointTask, SweepPoint, int]]:
        """Yield (task, point, KV budget tokens) for every task, each as soon as it is done."""
        ...


class SerialRunner:
    """Evaluate points one after another in this process."""

    parallel = False

    def run(self, job: SweepJob, tasks: Sequence[PointTask]) -> Iterator[tuple[PointTask, SweepPoint, int]]:
        """Yield each task's point in order."""
        for task in tasks:
            point, kv = job.evaluate(task)
            yield task, point, kv


def seed_list(base_seed: int, seeds: int) -> list[int]:
    """Return the seeds of a sweep repeated ``seeds`` times: the scenario's, then the next ones.

    >>> seed_list(7, 3)
    [7, 8, 9]
    """
    if seeds < 1:
        raise ConfigError(f"--seeds {seeds}: a sweep needs at least one seed")
    return [base_seed + i for i in range(seeds)]


def default_rates(scenario: Scenario, points: int = 10) -> list[float]:
    """Return ``points`` arrival rates from 0.25x to 2.5x the scenario's own (a default sweep grid).

    >>> from servebench.serving.scenario import parse_scenario
    >>> default_rates(parse_scenario({"server": {"kv_budget_tokens": 10}, "step_model": {},
    ...     "workload": {"arrival": {"rate_rps": 1}, "num_requests": 1,
    ...                  "classes": [{"prompt": {"value": 1}, "output": {"value": 1}}]}}), 4)
    [0.25, 1.0, 1.75, 2.5]
    """
    arrival = scenario.workload.arrival
    if arrival is None:
        raise ConfigError(f"scenario {scenario.name!r} is closed loop: give user counts to sweep")
    if arrival.rate_rps is not None:
        rate = arrival.rate_rps
    else:
        times = sorted(arrival.start_s or [])
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        rate = (len(times) - 1) / span * arrival.speed if span > 0 else 1.0
    return [round(float(x), 6) for x in np.linspace(0.25 * rate, 2.5 * rate, points)]


def default_speedups(scenario: Scenario, points: int = 10) -> list[float]:
    """Return ``points`` speedups from 0.25x to 2.5x a trace replay's own (a default sweep grid)."""
    trace = scenario.workload.trace
    if trace is None:
        raise ConfigError(f"scenario {scenario.name!r} replays no trace: give rates or user counts to sweep")
    return [round(float(x), 6) for x in np.linspace(0.25 * trace.speedup, 2.5 * trace.speedup, points)]


def sweep_mode(scenario: Scenario, users: bool = False) -> Mode:
    """Return how a scenario's load is swept: a trace by its speedup, else by rate (or ``users``)."""
    if scenario.workload.trace is not None:
        if users:
            raise ConfigError(f"scenario {scenario.name!r} replays a trace: sweep its speedup, not users")
        return "speedup"
    return "users" if users else "rate"


def scenario_at(scenario: Scenario, load: float, mode: Mode, requests: int | None = None) -> Scenario:
    """Return the scenario at one arrival rate, number of users or trace speedup (and request count)."""
    wl = scenario.workload
    if wl.trace is not None and mode != "speedup":
        raise ConfigError(f"scenario {scenario.name!r} replays a trace: its load is the trace's speedup (sweep "
                          f"--speedups), not {'a rate' if mode == 'rate' else 'users'}")
    if mode == "speedup":
        wl = wl.with_speedup(load)
    elif mode == "rate":
        if wl.arrival is None:
            raise ConfigError(f"scenario {scenario.name!r} is closed loop; sweep --concurrency, not --rates")
        wl = wl.with_rate(load)
    else:
        users = int(load)
        if users < 1 or users != load:
            raise ConfigError(f"concurrency {load!r} must be a whole number of users >= 1")
        if wl.closed_loop is None:
            wl = wl.model_copy(update={"arrival": None, "closed_loop": ClosedLoopSpec(users=users),
                                       "num_requests": wl.num_requests or requests or 1000})
        else:
            wl = wl.with_users(users)
    if requests is not None and not 1 <= requests <= MAX_GENERATED:
        raise ConfigError(f"{requests:,} requests per point; a run takes from 1 to {MAX_GENERATED:,}")
    num_requests, duration_s = (wl.num_requests, wl.duration_s) if requests is None else (requests, None)
    if mode == "rate" and wl.arrival is not None and wl.arrival.kind != "replay":
        problem = rate_problem(load, num_requests, duration_s)
        if problem:  # e.g. 1e-300 req/s: its arrivals lie where a step's milliseconds are lost to rounding
            raise ConfigError(f"rate {load:g} requests/s: {problem}")
    at_load = scenario.model_copy(update={"workload": wl})
    return at_load if requests is None else with_request_count(at_load, requests)


def check_loads(scenario: Scenario, loads: Sequence[float], mode: Mode, requests: int | None = None) -> None:
    """Raise ConfigError unless every load makes a valid run (a rate whose arrivals keep float precision, a
    request count from 1 to MAX_GENERATED): checked before the first point is simulated."""
    for x in loads:
        scenario_at(scenario, float(x), mode, requests)


def _quantiles(d: Distribution | None) -> dict[str, float | None]:
    if d is None:
        return {f"p{q}": None for q in QUANTILES}
    return {f"p{q}": d.at(q) for q in QUANTILES}


def evaluate(scenario: Scenario, load: float, mode: Mode, slo: SLO, slo_target: float,
             requests: int | None = None, source: Literal["grid", "search"] = "grid") -> tuple[SweepPoint, SimResult]:
    """Simulate one load and summarize it as a sweep point."""
    sim = simulate_deployment(scenario_at(scenario, load, mode, requests), token_times=False)  # no ITL; a fleet runs whole
    return point_from(sim, load, mode, slo, slo_target, source), sim


def offered_of(table: RecordTable, mode: Mode, window_s: float) -> tuple[int, float]:
    """Return the user requests a run offered and their rate: ``requests - 1`` gaps over the span of their first
    starts (a retrying client's attempts are records; the user requests, logical, are what was offered), or per
    second of the window for a closed loop (``mode`` "users") or a single request."""
    codes = logical_codes(table)
    users = int(codes.max()) + 1 if codes.size else 0
    first_start = np.full(users, np.inf)
    np.minimum.at(first_start, codes, table.start)
    span = float(first_start.max() - first_start.min()) if users > 1 else 0.0
    return users, (users - 1) / span if mode != "users" and span > 0 else users / window_s


def point_from_records(table: RecordTable, window_start_s: float, window_end_s: float, load: float, mode: Mode,
                       slo: SLO, slo_target: float, source: Literal["grid", "search"] = "grid",
                       server: dict[str, Any] | None = None) -> SweepPoint:
    """Summarize records as a sweep point (metrics from ``build_report``).

    ``server`` holds what only the server can see (peak_active, mean_active, peak_waiting,
    max_kv_tokens_used, preemptions); a measured client run leaves them None.
    """
    window_s = max(window_end_s - window_start_s, 1e-9)
    report: Report = build_report(table, window_start_s, window_start_s + window_s, slo, by_slice=False)
    by = report.by_status
    if report.slo is not None:
        good, goodput = report.slo.good_requests, report.slo.goodput_requests_per_second
    else:
        good, goodput = report.completed, report.completed / window_s
    users, offered_rps = offered_of(table, mode, window_s)
    attainment = good / users
    server_fields = {name: None for name in SERVER_FIELDS} | (server or {})
    return SweepPoint(
        load=load, source=source, offered=users, attempted=len(table),
        attempted_rps=offered_rps * (len(table) / users),
        accepted=report.accepted, completed=report.completed,
        rejected=report.rejected, timed_out=report.timed_out, cancelled=by["cancelled"], failed=by["failed"],
        window_s=window_s, offered_rps=offered_rps, throughput_rps=report.completed / window_s,
        output_tokens_per_s=report.successful_output_tokens / window_s, goodput_rps=goodput,
        slo_attainment=attainment, meets_slo=attainment >= slo_target,
        ttft_s=_quantiles(report.ttft_s), tpot_s=_quantiles(report.request_tpot_s),
        latency_s=_quantiles(report.latency_s), queue_wait_s=_quantiles(report.queue_wait_s),
        failure_aware_latency_s=_quantiles(report.failure_aware_latency_s), **server_fields)


def point_from(sim: SimResult, load: float, mode: Mode, slo: SLO, slo_target: float,
               source: Literal["grid", "search"] = "grid") -> SweepPoint:
    """Summarize a simulation as a sweep point, with the server-side fields read off its step trace."""
    tr = sim.trace
    decode = tr.lane != LANES.index("prefill")
    busy = float(tr.duration_s[decode].sum())
    server = {
        "peak_active": int(tr.running.max()) if len(tr) else 0,
        "mean_active": float(np.sum(tr.running[decode] * tr.duration_s[decode]) / busy) if busy > 0 else None,
        "peak_waiting": int(tr.waiting.max()) if len(tr) else 0,
        "max_kv_tokens_used": int(tr.kv_tokens_used.max()) if len(tr) else 0,
        "preemptions": sim.preemptions,
    }
    return point_from_records(sim.records, sim.window_start_s, sim.window_end_s, load, mode, slo, slo_target,
                              source, server)


def sweep(scenario: Scenario, loads: Sequence[float], *, mode: Mode = "rate", slo: SLO | None = None,
          slo_target: float = 0.95, requests: int | None = None, search: bool = True, tolerance: float = 0.02,
          max_search: int = 10, progress: ProgressCallback | None = None, seeds: int = 1,
          runner: PointRunner | None = None) -> SweepResult:
    """Simulate each load under each seed, then search each seed's usable capacity (see the module docstring).

    ``runner`` evaluates the points (default: :class:`SerialRunner`); every runner gives the same result.
    """
    if not loads:
        raise ConfigError("a sweep needs at least one load")
    if any(not (x > 0 and math.isfinite(x)) for x in loads):
        raise ConfigError(f"sweep loads must be positive and finite, got {list(loads)}")
    if not 0 < slo_target <= 1:
        raise ConfigError(f"slo_target {slo_target} must be in (0, 1]")
    check_loads(scenario, loads, mode, requests)
    slo = slo or SLO()
    runner = runner if runner is not None else SerialRunner()
    seeds_run = seed_list(scenario.seed, seeds)
    job = SweepJob(scenario, mode, slo, slo_target, requests)
    grid = sorted(set(float(x) for x in loads))
    # a bisection usually needs about log2(1 / tolerance) simulations; the last call fixes the total
    total = (len(grid) + (max(1, math.ceil(math.log2(1 / tolerance))) if search else 0)) * len(seeds_run)
    points: dict[int, dict[float, SweepPoint]] = {s: {} for s in seeds_run}
    kv_budget = [0]
    lock = threading.Lock()  # the seeds' searches may record points from several threads

    def record(task: PointTask, point: SweepPoint, kv: int) -> SweepPoint:
        with lock:
            kv_budget[0] = kv
            points[task.seed][task.load] = point
            if progress is not None:
                progress(sum(map(len, points.values())), total, point)
        return point

    for task, point, kv in runner.run(job, [PointTask(x, s, "grid") for s in seeds_run for x in grid]):
        record(task, point, kv)

    def find_capacity(seed: int) -> Capacity:
        def run(load: float, source: Literal["grid", "search"]) -> SweepPoint:
            if load in points[seed]:
                return points[seed][load]
            (task, point, kv), = runner.run(job, [PointTask(load, seed, source)])
            return record(task, point, kv)
        if not search:
            return capacity_from_grid(grid, points[seed])
        return search_capacity(run, grid, points[seed], mode, tolerance, max_search)

    if runner.parallel and len(seeds_run) > 1:  # each search is sequential; the seeds' run side by side
        with ThreadPoolExecutor(max_workers=len(seeds_run), thread_name_prefix="sweep-seed") as pool:
            capacities = list(pool.map(find_capacity, seeds_run))
    else:
        capacities = [find_capacity(s) for s in seeds_run]
    base = points[seeds_run[0]]
    ordered = [base[k] for k in sorted(base)]
    done = sum(map(len, points.values()))
    if progress is not None and ordered:
        progress(done, done, ordered[-1])
    spread = seed_spread(seeds_run, grid, points, capacities) if len(seeds_run) > 1 else None
    return SweepResult(scenario=scenario.name, mode=mode, seed=scenario.seed, requests_per_point=requests,
                       slo=slo, slo_target=slo_target, points=ordered, capacity=capacities[0],
                       knee_load=knee(ordered), kv_budget_tokens=kv_budget[0], spread=spread)


def _bracket(grid: list[float], points: dict[float, SweepPoint]) -> tuple[float | None, float | None]:
    """Return (last meeting load below the first failing one, first failing load) over the grid."""
    lo = None
    for x in grid:
        if not points[x].meets_slo:
            return lo, x
        lo = x
    return lo, None


def capacity_from_grid(grid: list[float], points: dict[float, SweepPoint]) -> Capacity:
    """Return the capacity read off the grid: the last meeting load below the first failing one."""
    lo, hi = _bracket(grid, points)
    note = "read off the grid (search off)"
    return Capacity(load=lo, upper=hi, evaluations=0, note=note)


def search_capacity(run: Callable[[float, Literal["grid", "search"]], SweepPoint], grid: list[float],
                    points: dict[float, SweepPoint], mode: Mode, tolerance: float, max_search: int) -> Capacity:
    """Return the highest load meeting the SLOs by bisection between grid points, widening past the grid.

    ``run(load, source)`` evaluates one load (a simulation or a measured run) and is called only
    for loads not yet in ``points``; the simulator and the HTTP load generator share this rule.
    """
    lo, hi = _bracket(grid, points)
    evals = 0
    notes = []
    if hi is None:  # every grid point meets: widen upward
        x = grid[-1]
        for _ in range(MAX_WIDEN):
            x = x * 2
            evals += 1
            if not run(x, "search").meets_slo:
                hi = x
                break
            lo = x
        if hi is None:
            return Capacity(load=lo, upper=None, evaluations=evals,
                            note=f"every load up to {lo:g} meets the SLOs; capacity is above it")
    if lo is None:  # even the lowest grid point misses: widen downward
        x = hi
        for _ in range(MAX_WIDEN):
            x = x / 2 if mode != "users" else float(max(1, int(x) // 2))
            if x in points and x == hi:
                break
            evals += 1
            if run(x, "search").meets_slo:
                lo = x
                break
            hi = x
        if lo is None:
            return Capacity(load=None, upper=hi, evaluations=evals,
                            note=f"no load tried down to {hi:g} meets the SLOs")
    above = [x for x in grid if x > hi and points[x].meets_slo]
    if above:
        notes.append(f"grid loads {', '.join(f'{x:g}' for x in above)} meet the SLOs again above a failing one")
    for _ in range(max_search):
        if mode == "users":
            if hi - lo <= 1:
                break
            mid = float((int(lo) + int(hi)) // 2)
        else:
            if (hi - lo) <= tolerance * hi:
                break
            mid = (lo + hi) / 2
        evals += 1
        if run(mid, "search").meets_slo:
            lo = mid
        else:
            hi = mid
    notes.insert(0, f"bisection between {lo:g} (meets) and {hi:g} (misses)")
    return Capacity(load=lo, upper=hi, evaluations=evals, note="; ".join(notes))


def knee(points: Sequence[SweepPoint], factor: float = 2.0) -> float | None:
    """Return the lowest load whose p95 latency or p95 TTFT is over ``factor`` x that of the lowest load.

    TTFT counts too because queueing shows there first: a long-output workload can see its TTFT
    grow thirtyfold while its latency has not yet doubled. A point with no successes counts as
    past the knee.
    """
    if not points:
        return None
    ordered = sorted(points, key=lambda p: p.load)
    metrics = ("latency_s", "ttft_s")
    base = {m: getattr(ordered[0], m).get("p95") for m in metrics}
    if any(v is None for v in base.values()):
        return ordered[0].load
    for p in ordered[1:]:
        for m in metrics:
            v = getattr(p, m).get("p95")
            if v is None or v > factor * base[m]:
                return p.load
    return None


CSV_SCALARS: tuple[str, ...] = (
    "load", "source", "offered", "attempted", "accepted", "completed", "rejected", "timed_out", "cancelled", "failed",
    "window_s", "offered_rps", "attempted_rps", "throughput_rps", "output_tokens_per_s", "goodput_rps", "slo_attainment",
    "meets_slo", "peak_active", "mean_active", "peak_waiting", "max_kv_tokens_used", "preemptions",
)
CSV_DISTRIBUTIONS: tuple[str, ...] = ("ttft_s", "tpot_s", "latency_s", "queue_wait_s")


def sweep_rows(result: SweepResult) -> list[dict[str, object]]:
    """Return one flat row per point (``ttft_s_p95`` and so on), empty where there is no value."""
    rows = []
    for p in result.points:
        row: dict[str, object] = {k: getattr(p, k) for k in CSV_SCALARS}
        for d in CSV_DISTRIBUTIONS:
            for q, v in getattr(p, d).items():
                row[f"{d}_{q}"] = v
        rows.append({k: ("" if v is None else v) for k, v in row.items()})
    return rows


def sweep_csv(result: SweepResult) -> str:
    """Return the points as CSV text."""
    rows = sweep_rows(result)
    buf = io.StringIO()
    if rows:
        writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return buf.getvalue()
