"""The capacity planner: from a workload and SLOs to GPU type, tensor parallelism, replicas and cost.

For every accelerator x tensor-parallel degree x ``max_num_seqs``:

1. **Fit.** Weights per GPU (``kv.weight_bytes``) plus a fixed overhead must leave memory for KV
   (``kv.kv_budget_bytes`` at ``memory_utilization``); the budget in tokens (``kv.budget_tokens``)
   must hold at least one request. Otherwise the configuration cannot serve this model.
2. **Unloaded SLOs.** A request alone on the server (``roofline.unloaded_times_s``) is the best any
   load can do; when the (1 - target) quantile request already misses an SLO, no load meets it.
3. **Capacity per replica.** The roofline's step model goes into the simulator, and the sweep's
   capacity search (``sweep.search_capacity``) finds the highest arrival rate whose share of
   requests within every SLO reaches the target. The search starts from an analytic estimate of
   throughput, and simulations are memoized (identical scenario and load are simulated once).
4. **What binds.** ``throughput`` when the first load that misses is the engine's throughput bound
   (every simulated load below it meets the SLOs: the engine has no time left for more), else the
   diagnosis (``diagnosis.diagnose_records``) of the first load that misses.
5. **Replicas and cost.** replicas = ceil(rate / (capacity x (1 - headroom))); cost per hour =
   replicas x tp x price; cost per million output tokens = cost per hour / (output tokens per hour / 1e6).
6. **The fleet, simulated** (``plan``; ``verify_fleet``). Division assumes requests spread evenly; a router
   does not, and bursts land unevenly. The options that meet the SLOs are verified cheapest first: the whole
   fleet of the divided count, behind ``router``, is simulated at the planned rate
   (:mod:`servebench.serving.fleet`), and the count is raised one replica at a time until the fleet meets the
   SLOs (at most ``MAX_FLEET_REPLICAS_FACTOR`` times the divided count). Verification only raises a count, so
   an option whose divided cost is not below the cheapest verified cost cannot win and is not verified
   (branch and bound, as the capacity search); at most ``MAX_VERIFIED_OPTIONS`` options are. A fleet
   simulation offers ``requests_per_simulation`` requests per replica, at most ``MAX_FLEET_REQUESTS`` in all
   (a trace's window: its requests), so the default plan stays interactive.

The capacity search does not depend on the total rate, so ``evaluate`` runs once and ``price``
turns its result into options at any rate (what-if and cost-vs-traffic charts cost no simulation).

A workload may be a trace (``Workload.from_trace``): the planner then sizes for its busiest minute,
simulating that window's requests at speedups (:mod:`servebench.planning.trace_window` states the rules).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from servebench.analysis.diagnosis import Limit, Thresholds, diagnose_records
from servebench.analysis.fleet import REPLICA_COLUMN
from servebench.analysis.summary import SLO
from servebench.capacity import kv
from servebench.capacity.gpus import ACCELERATORS, DEFAULT_GPUS, Accelerator, get_accelerator, with_price
from servebench.capacity.roofline import (
    ACTIVE_PARAMETERS,
    Calibration,
    Efficiency,
    Roofline,
    roofline,
    unloaded_times_s,
)
from servebench.capacity.stepmodel import StepModel
from servebench.errors import ConfigError, ServebenchError
from servebench.formatting import fmt_count, fmt_share
from servebench.planning.trace_window import (
    busiest_minute,
    computed_prompt_tokens,
    speedup_for,
    window_rate_rps,
    window_requests,
)
from servebench.serving.fleet import simulate_fleet
from servebench.serving.scenario import MAX_REPLICAS, FleetSpec, Router, Scenario, ServerSpec, StepModelSpec
from servebench.serving.simulate import SimResult
from servebench.serving.sweep import SweepPoint, evaluate, point_from, scenario_at, search_capacity
from servebench.serving.workload import (
    MAX_GENERATED,
    ArrivalSpec,
    ClassSpec,
    LengthSpec,
    TraceSpec,
    WorkloadSpec,
    draw_requests,
)

ProgressCallback = Callable[[int, int, str], None]
# What binds a configuration: the diagnosis's vocabulary, and ``throughput`` where the engine's throughput
# bound (engine time per request at the most sequences that fit) sets the capacity
PlanLimit = Union[Limit, Literal["throughput"]]
TENSOR_PARALLEL: tuple[int, ...] = (1, 2, 4, 8)
MAX_NUM_SEQS: tuple[int, ...] = (16, 64, 256)
LENGTH_SAMPLE = 4000  # requests drawn to measure a workload mix's length distribution
MIN_REQUESTS_PER_SIMULATION = 20  # fewer make no percentile worth a plan: a smaller trace window is replayed whole
DEFAULT_REQUESTS_PER_SIMULATION = 300  # a drawn mix's, unless given
MAX_FLEET_REQUESTS = 3000  # requests one fleet simulation offers, at most (requests_per_simulation per replica)
MAX_VERIFIED_OPTIONS = 4  # options whose replica count a plan verifies by simulating the fleet, at most
MAX_FLEET_REPLICAS_FACTOR = 2  # a verified count goes up to this times the divided count (then: SLOs missed)


class Workload(BaseModel):
    """What the planner serves: the traffic's request mix, or a trace's window (rate is given separately)."""

    model_config = ConfigDict(extra="forbid")

    classes: list[ClassSpec] = Field(default_factory=list, description="The request mix (at least one class), "
                                                                       "unless a trace gives the requests.")
    arrival: ArrivalSpec = Field(default_factory=lambda: ArrivalSpec(kind="poisson", rate_rps=1.0))
    trace: TraceSpec | None = Field(None, description="A trace's window to replay in place of classes and arrival "
                                                      "(trace_window's rules).")
    trace_rate_rps: float | None = Field(None, gt=0, description="The trace window's requests per second at "
                                                                 "speedup 1 (set from the trace when not given).")
    prefix_caching: bool = Field(False, description="Simulate the server with prefix caching (on for a trace with "
                                                    "block IDs, unless asked otherwise).")
    server: ServerSpec | None = Field(None, description="Scheduler settings to keep (policy, token budget, "
                                                        "deadline); KV budget and max_num_seqs are the planner's.")
    name: str = "plan"

    @model_validator(mode="after")
    def _check(self) -> "Workload":
        if (self.trace is None) == (not self.classes):
            raise ValueError("give the requests one way: classes (a mix), or a trace")
        if self.trace is not None and self.trace_rate_rps is None:
            self.trace_rate_rps = window_rate_rps(self.trace)
        return self

    def rate_to_serve_rps(self) -> float | None:
        """Return a trace's rate to serve, its window's rate at its speedup (None for a mix: the rate is given)."""
        if self.trace is None or self.trace_rate_rps is None:
            return None
        return self.trace_rate_rps * self.trace.speedup

    def default_requests(self) -> int:
        """Return the requests a simulation offers unless given: every request of a trace's window (at least
        ``MIN_REQUESTS_PER_SIMULATION``), else ``DEFAULT_REQUESTS_PER_SIMULATION``."""
        if self.trace is None:
            return DEFAULT_REQUESTS_PER_SIMULATION
        return max(MIN_REQUESTS_PER_SIMULATION, len(window_requests(self.trace)))

    @classmethod
    def from_trace(cls, path: str, fmt: str = "auto", *, prefix_caching: bool | None = None) -> "Workload":
        """Return a trace's busiest minute (prefix caching on when the trace has block IDs, unless given)."""
        spec = busiest_minute(path, fmt)
        caching = window_requests(spec).trace_blocks is not None if prefix_caching is None else prefix_caching
        return cls(trace=spec, prefix_caching=caching, name=f"{Path(path).name}, busiest minute")

    @classmethod
    def fixed(cls, prompt_tokens: int, output_tokens: int) -> "Workload":
        """Return one class of fixed prompt and output lengths (output cap = output length)."""
        if prompt_tokens < 1 or output_tokens < 1:
            raise ConfigError(f"prompt and output tokens must be at least 1, got {prompt_tokens} and {output_tokens}")
        return cls(classes=[ClassSpec(name="default", prompt=LengthSpec(kind="fixed", value=prompt_tokens),
                                      output=LengthSpec(kind="fixed", value=output_tokens))])

    @classmethod
    def from_scenario(cls, scenario: Scenario) -> "Workload":
        """Return a scenario's request mix, arrival process and scheduler settings (open loop only)."""
        wl = scenario.workload
        if wl.trace is not None:
            return cls(trace=wl.trace, prefix_caching=scenario.server.prefix_caching, server=scenario.server,
                       name=scenario.name)
        if wl.arrival is None:
            raise ConfigError(f"scenario {scenario.name!r} is closed loop; the planner needs open-loop arrivals")
        return cls(classes=wl.classes, arrival=wl.arrival, prefix_caching=scenario.server.prefix_caching,
                   server=scenario.server, name=scenario.name)

    def with_prompt_scale(self, factor: float) -> "Workload":
        """Return the mix with every prompt length scaled by ``factor`` (a what-if: halve the prompt).

        >>> Workload.fixed(2000, 100).with_prompt_scale(0.5).classes[0].prompt.value
        1000
        """
        if not factor > 0:
            raise ConfigError(f"prompt scale must be positive, got {factor}")
        if self.trace is not None:
            raise ConfigError("a trace's prompts are its own: a trace cannot be scaled")

        def scale(n: float | int | None) -> int | None:
            return None if n is None else max(1, round(n * factor))

        classes = []
        for c in self.classes:
            p = c.prompt
            update = {"value": scale(p.value), "low": scale(p.low), "high": scale(p.high),
                      "median": None if p.median is None else p.median * factor, "max_tokens": scale(p.max_tokens),
                      "values": None if p.values is None else [scale(v) for v in p.values]}
            classes.append(c.model_copy(update={"prompt": p.model_copy(update=update)}))
        return self.model_copy(update={"classes": classes})


class PlanRequest(BaseModel):
    """Everything a plan depends on except the total rate (see ``price``)."""

    model_config = ConfigDict(extra="forbid")

    model: kv.ModelShape
    weight_bytes_per_parameter: float = Field(2, gt=0, description="2 for bf16/fp16 weights, 1 for fp8.")
    active_parameters: int | None = Field(None, ge=1, description="Mixture of experts: parameters per token.")
    workload: Workload
    slo: SLO
    slo_target: float = Field(0.95, gt=0.5, le=1, description="Share of requests that must meet every SLO.")
    gpus: list[str] = Field(default_factory=lambda: list(DEFAULT_GPUS))
    prices: dict[str, float] = Field(default_factory=dict, description="USD per GPU-hour by preset name.")
    tensor_parallel: list[int] = Field(default_factory=lambda: list(TENSOR_PARALLEL))
    max_num_seqs: list[int] = Field(default_factory=lambda: list(MAX_NUM_SEQS))
    headroom: float = Field(0.2, ge=0, lt=1, description="Share of capacity left unused (bursts, failover).")
    memory_utilization: float = Field(0.9, gt=0, le=1, description="Share of device memory the engine takes "
                                                                   "(vLLM's gpu_memory_utilization default).")
    overhead_gib: float = Field(2.0, ge=0, description="Per-GPU memory for activations, CUDA graphs and "
                                                       "buffers, GiB (an assumption).")
    max_num_batched_tokens: int = Field(8192, ge=1, description="Token budget per step (chunked prefill), unless "
                                                                "the scenario sets one.")
    requests_per_simulation: int = Field(DEFAULT_REQUESTS_PER_SIMULATION, ge=MIN_REQUESTS_PER_SIMULATION,
                                         le=MAX_GENERATED)
    tolerance: float = Field(0.1, gt=0, lt=1, description="Relative width at which the capacity search stops "
                                                          "(capacity is the bracket's meeting end: never above).")
    seed: int = Field(0, ge=0)
    efficiency: Efficiency = Field(default_factory=Efficiency)
    calibration: Calibration | None = None
    router: Router = Field("round_robin", description="The router in front of the replicas when the fleet is "
                                                      "simulated (docs/fleet.md).")
    verify_fleet: bool = Field(True, description="Check the cheapest options' replica counts by simulating the "
                                                 "whole fleet (plan only; price divides).")

    @model_validator(mode="after")
    def _router_needs(self) -> "PlanRequest":
        if self.router == "prefix_affinity" and not self.workload.prefix_caching:
            raise ValueError("router prefix_affinity routes by the replicas' cached prefixes: plan with prefix "
                             "caching (a trace with block IDs, or a scenario whose server has prefix_caching)")
        return self


class Option(BaseModel):
    """One configuration, priced at the planned rate (the JSON keys of ``servebench plan``)."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    tensor_parallel: int
    max_num_seqs: int | None = Field(description="None where the GPU count alone rules it out (no fit, or SLOs "
                                                 "missed unloaded).")
    capacity_rps_per_replica: float = Field(description="Highest arrival rate one replica serves within the SLOs.")
    replicas: int | None
    gpus_total: int | None
    meets_slo: bool
    cost_per_hour_usd: float | None
    cost_per_million_output_tokens_usd: float | None
    limit: PlanLimit = Field(description="What binds first as load grows: the diagnosis's vocabulary, or "
                                         "'throughput' where the engine's throughput bound sets the capacity.")
    router: Router | None = Field(None, description="The router the fleet was simulated behind; None: not simulated.")
    fleet_verified: bool = Field(False, description="True when replicas came from simulating the whole fleet at "
                                                    "the planned rate; False: by division alone.")
    replicas_by_division: int | None = Field(None, description="ceil(rate / (capacity x (1 - headroom))); replicas "
                                                               "is more where the fleet needed more.")


class FleetTry(BaseModel):
    """One fleet simulated at the planned rate."""

    model_config = ConfigDict(extra="forbid")

    replicas: int
    attainment: float = Field(description="Share of requests within every SLO.")
    meets_slo: bool
    load_imbalance: float | None = Field(description="Busiest replica's requests / the mean.")
    requests_per_replica: list[int]


class FleetCheck(BaseModel):
    """How an option's replica count was verified: each fleet tried, the divided count first.

    No try: the divided count is more replicas than a fleet simulation holds (``MAX_REPLICAS``); ``note`` says so.
    """

    model_config = ConfigDict(extra="forbid")

    router: Router
    requests: int = Field(description="Requests each fleet simulation offered (bounded: MAX_FLEET_REQUESTS).")
    tries: list[FleetTry]
    note: str


class Detail(BaseModel):
    """How one configuration's numbers were computed."""

    model_config = ConfigDict(extra="forbid")

    note: str
    fits: bool
    weights_gib_per_gpu: float
    kv_budget_gib_per_gpu: float | None
    kv_budget_tokens: int | None
    effective_max_num_seqs: int | None = Field(None, description="max_num_seqs capped at what KV can ever hold.")
    step_model: StepModel | None
    how: dict[str, str] = Field(default_factory=dict)
    unloaded_ttft_s: float | None = None
    unloaded_tpot_s: float | None = None
    estimate_rps: float | None = Field(None, description="Analytic throughput estimate that seeded the search.")
    capacity_upper_rps: float | None = Field(None, description="Lowest load found to miss the SLOs.")
    search: str | None = None
    efficiency_source: str = "defaults"
    price_usd_per_hour: float
    price_source: str
    fleet: FleetCheck | None = Field(None, description="The fleet simulations behind a verified replica count.")


class Evaluated(BaseModel):
    """One configuration's capacity per replica, independent of the total rate."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    tensor_parallel: int
    max_num_seqs: int | None
    capacity_rps: float
    limit: PlanLimit
    detail: Detail


class Skipped(BaseModel):
    """A configuration that fits but was not simulated: even at its throughput bound it costs more than the best."""

    model_config = ConfigDict(extra="forbid")

    gpu: str
    tensor_parallel: int
    max_num_seqs: int
    bound_rps_per_replica: float = Field(description="No higher load can be sustained (engine time per request).")
    lowest_cost_per_hour_usd: float = Field(description="Its cost at the planned rate if it reached its bound.")
    note: str


class Evaluation(BaseModel):
    """Every configuration's capacity, and what the search cost."""

    model_config = ConfigDict(extra="forbid")

    request: PlanRequest
    configs: list[Evaluated]
    skipped: list[Skipped] = Field(default_factory=list, description="Candidates not simulated (branch and bound).")
    mean_output_tokens: float
    mean_prompt_tokens: float
    simulations: int
    pruned: int = Field(description="Configurations ruled out without simulating (no fit, or SLOs missed unloaded).")
    notes: list[str]


class Plan(BaseModel):
    """The options at one rate, ranked (meeting the SLOs first, then by cost), and the cheapest that meets them."""

    model_config = ConfigDict(extra="forbid")

    rate_rps: float
    options: list[Option]
    best: Option | None
    reason: str | None = Field(description="Why best is what it is (or why there is none).")
    details: list[Detail] = Field(description="Aligned with options: how each was computed.")


# --------------------------------------------------------------------------- the workload's lengths


def _lengths(workload: Workload, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return prompt, output and output-cap lengths of the mix (a large seeded sample) or of a trace's window,
    and the prompt tokens a server computes (with prefix caching, those a cache does not serve)."""
    if workload.trace is not None:
        drawn = window_requests(workload.trace)
        computed = computed_prompt_tokens(drawn) if workload.prefix_caching else drawn.prompt_tokens
    else:
        drawn = draw_requests(workload.classes, LENGTH_SAMPLE, np.random.default_rng(seed))
        computed = drawn.prompt_tokens
    return drawn.prompt_tokens, drawn.output_tokens, drawn.max_output_tokens, computed


def _scenario(req: PlanRequest, budget_tokens: int, max_num_seqs: int, step: StepModel) -> Scenario:
    """Return the simulator's scenario for one replica of one configuration."""
    wl = req.workload
    keep = wl.server
    server = ServerSpec(
        policy=keep.policy if keep else "paged", kv_budget_tokens=budget_tokens, max_num_seqs=max_num_seqs,
        max_num_batched_tokens=keep.max_num_batched_tokens if keep and keep.max_num_batched_tokens
        else req.max_num_batched_tokens,
        chunked_prefill=keep.chunked_prefill if keep else True, max_waiting=keep.max_waiting if keep else None,
        block_size_tokens=keep.block_size_tokens if keep else kv.DEFAULT_BLOCK_SIZE,
        timeout_s=keep.timeout_s if keep else None, prefill_lane=keep.prefill_lane if keep else "shared",
        prefix_caching=wl.prefix_caching)
    workload = (WorkloadSpec(trace=wl.trace, num_requests=req.requests_per_simulation) if wl.trace is not None
                else WorkloadSpec(arrival=wl.arrival, classes=wl.classes, num_requests=req.requests_per_simulation))
    return Scenario(name=wl.name, seed=req.seed, server=server, step_model=StepModelSpec(**step.model_dump()),
                    workload=workload)


def _evaluate(req: PlanRequest, scenario: Scenario, load_rps: float, source: Literal["grid", "search"],
              requests: int | None = None) -> tuple[SweepPoint, SimResult]:
    """Simulate one replica at ``load_rps``: at that arrival rate, or a trace's window at the speedup offering it."""
    wl = req.workload
    if wl.trace is None or wl.trace_rate_rps is None:
        return evaluate(scenario, load_rps, "rate", req.slo, req.slo_target, requests, source)
    point, sim = evaluate(scenario, speedup_for(load_rps, wl.trace_rate_rps), "speedup", req.slo, req.slo_target,
                          requests, source)
    return point.model_copy(update={"load": load_rps}), sim


def throughput_rps(step: StepModel, *, prompt_tokens: float, decode_tokens: float, kv_tokens_per_seq: float,
                   batch: int) -> tuple[float, float]:
    """Return (requests/s, TPOT s) of a server kept at ``batch`` running sequences, queueing aside.

    Each request prefills its prompt (``prompt_tokens`` x per_prefill_token_s, inside some step) and
    takes ``decode_tokens`` decode steps; a decode step of ``batch`` sequences takes d = step_s(0, batch,
    batch x ``kv_tokens_per_seq``). Per request the engine spends decode_tokens x d / batch + prefill, so
    X = 1 / that; TPOT = d + the prefill time that lands in each step, batch x prefill / decode_tokens.

    >>> throughput_rps(StepModel(base_s=0.01), prompt_tokens=100, decode_tokens=99, kv_tokens_per_seq=100, batch=10)
    (10.1010101010101, 0.01)
    """
    d = step.step_s(0, batch, int(batch * kv_tokens_per_seq))
    prefill = prompt_tokens * step.per_prefill_token_s
    per_request = decode_tokens * d / batch + prefill
    x = 1 / per_request if per_request > 0 else math.inf
    return x, d + batch * prefill / max(decode_tokens, 1.0)


def capacity_bounds_rps(step: StepModel, *, prompt_tokens: float, decode_tokens: float, kv_tokens_per_seq: float,
                        max_seqs: int, tpot_slo_s: float | None = None) -> tuple[float, float]:
    """Return (estimate, bound): the best throughput whose TPOT meets the SLO, and the most at ``max_seqs``.

    Throughput grows with the batch, so the bound is the throughput at ``max_seqs``: with a
    per-sequence KV read no larger than the real one, no load above it can be sustained. The
    estimate ignores queueing, so the simulated capacity lies below it; it seeds the search.
    """
    bound, _ = throughput_rps(step, prompt_tokens=prompt_tokens, decode_tokens=decode_tokens,
                              kv_tokens_per_seq=kv_tokens_per_seq, batch=max_seqs)
    best, b = 0.0, 1
    while True:
        x, tpot = throughput_rps(step, prompt_tokens=prompt_tokens, decode_tokens=decode_tokens,
                                 kv_tokens_per_seq=kv_tokens_per_seq, batch=b)
        if tpot_slo_s is None or tpot <= tpot_slo_s or b == 1:
            best = max(best, x)
        if b >= max_seqs:
            return min(best, bound), bound
        b = min(max_seqs, b * 2)


# --------------------------------------------------------------------------- the search


def _efficiency(req: PlanRequest, acc: Accelerator) -> tuple[Efficiency, str]:
    cal = req.calibration
    if cal is not None and cal.accelerator == acc.name:
        return cal.efficiency, f"calibrated from {cal.source}"
    return req.efficiency, "defaults" if req.efficiency == Efficiency() else "given"


def _limit_from(sim: SimResult, point: SweepPoint, req: PlanRequest, budget_tokens: int) -> Limit:
    """Return what binds at a load that misses the SLOs: the diagnosis's verdict, or the missed SLO."""
    shape = req.model
    try:
        verdict = diagnose_records(
            sim.records, sim.window_start_s, sim.window_end_s, shape=shape,
            budget_bytes=budget_tokens * kv.bytes_per_token(shape),
            policy=req.workload.server.policy if req.workload.server else "paged",
            thresholds=Thresholds(ttft_objective_s=req.slo.ttft_s or Thresholds().ttft_objective_s))
    except ServebenchError:
        verdict = None
    if verdict is not None and verdict.limit != "none":
        return verdict.limit
    # no pattern matched: name the stage of the SLO that failed
    tpot, ttft, queue = point.tpot_s.get("p95"), point.ttft_s.get("p95"), point.queue_wait_s.get("p95")
    if req.slo.tpot_s is not None and tpot is not None and tpot > req.slo.tpot_s:
        return "decode"
    if ttft is not None and queue is not None and queue >= 0.5 * ttft:
        return "queueing"
    return "prefill"


class _Candidate(BaseModel):
    """A configuration that fits and can meet the SLOs unloaded: what its search needs."""

    model_config = ConfigDict(extra="forbid")

    acc: Accelerator
    tensor_parallel: int
    max_num_seqs: int
    effective_max_num_seqs: int
    budget_tokens: int
    step: StepModel
    estimate_rps: float
    bound_rps: float
    detail: Detail


class _Mix(BaseModel):
    """The workload's length statistics the search uses."""

    mean_prompt: float
    mean_computed_prompt: float = Field(description="Prompt tokens the engine computes per request (less what a "
                                                    "prefix cache can serve of a trace).")
    mean_output: float
    decode_tokens: float = Field(description="Mean decode steps per request (output - 1).")
    kv_per_seq: float = Field(description="Prompt tokens a decoding sequence reads, weighted by its decode steps.")
    prompt_low: int = Field(description="The (1 - target) quantile of prompt tokens computed, for the unloaded "
                                        "check.")
    output_low: int
    smallest_request_tokens: int
    largest_request_tokens: int
    policy: kv.Policy
    block: int
    separate_lane: bool


def _mix(req: PlanRequest) -> _Mix:
    prompts, outputs, caps, computed = _lengths(req.workload, req.seed)
    q = 100 * (1 - req.slo_target)
    server = req.workload.server
    policy = server.policy if server else "paged"
    block = server.block_size_tokens if server else kv.DEFAULT_BLOCK_SIZE
    decode = outputs - 1
    return _Mix(
        mean_prompt=float(prompts.mean()), mean_computed_prompt=float(computed.mean()),
        mean_output=float(outputs.mean()), decode_tokens=float(decode.mean()),
        kv_per_seq=float((decode * prompts).sum() / decode.sum()) if decode.sum() > 0 else float(prompts.mean()),
        prompt_low=int(np.percentile(computed, q)), output_low=int(max(1, np.percentile(outputs, q))),
        smallest_request_tokens=int(min(kv.tokens_per_request(int(p), int(c), policy, int(o), block)
                                        for p, o, c in zip(prompts, outputs, caps))),
        largest_request_tokens=int(max(kv.tokens_per_request(int(p), int(c), policy, int(c), block)
                                       for p, c in zip(prompts, caps))),
        policy=policy, block=block, separate_lane=server is not None and server.prefill_lane == "separate")


def _accelerators(req: PlanRequest) -> list[Accelerator]:
    accs = [with_price(a, req.prices[a.name]) if a.name in req.prices else a
            for a in (get_accelerator(g) for g in dict.fromkeys(req.gpus))]
    if not accs:
        raise ConfigError("give at least one GPU type")
    unknown = sorted(set(req.prices) - set(ACCELERATORS))
    if unknown:
        raise ConfigError(f"prices for unknown GPU(s) {', '.join(unknown)}")
    return accs


def _screen(req: PlanRequest, mix: _Mix, acc: Accelerator, tp: int) -> Evaluated | list[_Candidate]:
    """Return why (acc, tp) cannot serve at all (no fit, SLOs missed unloaded), or its candidates by max_num_seqs."""
    shape = req.model
    assert shape.parameters is not None
    eff, eff_source = _efficiency(req, acc)
    weights = kv.weight_bytes(shape.parameters, req.weight_bytes_per_parameter, tensor_parallel=tp)
    common = dict(weights_gib_per_gpu=weights / kv.GIB, efficiency_source=eff_source,
                  price_usd_per_hour=acc.price_usd_per_hour, price_source=f"{acc.price_source} ({acc.price_date})")
    try:
        budget_bytes = kv.kv_budget_bytes(acc.memory_gib * kv.GIB, memory_utilization=req.memory_utilization,
                                          weights_bytes=weights, overhead_bytes=req.overhead_gib * kv.GIB)
    except ConfigError:
        budget_bytes = 0
    budget_tokens = kv.budget_tokens(budget_bytes, shape, tensor_parallel=tp,
                                     block_size=mix.block if mix.policy == "paged" else None)
    if budget_tokens < mix.largest_request_tokens:
        usable = acc.memory_gib * req.memory_utilization
        note = (f"does not fit: weights {weights / kv.GIB:.1f} GiB + overhead {req.overhead_gib:g} GiB per GPU in "
                f"{usable:.1f} GiB ({acc.memory_gib:g} GiB x {req.memory_utilization:g}) leave "
                f"{budget_bytes / kv.GIB:.2f} GiB for KV = {budget_tokens:,} tokens, under the "
                f"{mix.largest_request_tokens:,} one request can need")
        return Evaluated(gpu=acc.name, tensor_parallel=tp, max_num_seqs=None, capacity_rps=0.0, limit="kv_memory",
                         detail=Detail(note=note, fits=False, kv_budget_gib_per_gpu=budget_bytes / kv.GIB,
                                       kv_budget_tokens=budget_tokens, step_model=None, **common))
    roof: Roofline = roofline(shape, acc, tensor_parallel=tp, weight_bytes_per_parameter=req.weight_bytes_per_parameter,
                              prompt_tokens=mix.mean_prompt, efficiency=eff, active_parameters=req.active_parameters)
    step = roof.step_model
    server = req.workload.server
    mbt = (server.max_num_batched_tokens if server else None) or req.max_num_batched_tokens
    ttft0, tpot0, latency0 = unloaded_times_s(step, mix.prompt_low, mix.output_low, mbt)
    base = dict(fits=True, kv_budget_gib_per_gpu=budget_bytes / kv.GIB, kv_budget_tokens=budget_tokens,
                step_model=step, how=roof.how, unloaded_ttft_s=ttft0, unloaded_tpot_s=tpot0, **common)
    missed = [(name, value, limit) for name, value, limit in (("TTFT", ttft0, req.slo.ttft_s),
                                                              ("TPOT", tpot0, req.slo.tpot_s),
                                                              ("latency", latency0, req.slo.latency_s))
              if limit is not None and value > limit]
    if missed:
        what = "; ".join(f"{n} {v:.3g} s > SLO {lim:g} s" for n, v, lim in missed)
        note = (f"misses the SLOs with no load at all (a request of {mix.prompt_low:,} prompt and "
                f"{mix.output_low:,} output tokens, the {100 * (1 - req.slo_target):g}th percentile, alone on the "
                f"server): {what}")
        limit: Limit = "prefill" if missed[0][0] == "TTFT" else "decode"
        return Evaluated(gpu=acc.name, tensor_parallel=tp, max_num_seqs=None, capacity_rps=0.0, limit=limit,
                         detail=Detail(note=note, **base))
    most_seqs = max(1, budget_tokens // max(1, mix.smallest_request_tokens))
    out = []
    for b in sorted(set(req.max_num_seqs)):
        b_eff = min(b, most_seqs)
        est, bound = capacity_bounds_rps(step, prompt_tokens=mix.mean_computed_prompt, decode_tokens=mix.decode_tokens,
                                         kv_tokens_per_seq=mix.kv_per_seq, max_seqs=b_eff, tpot_slo_s=req.slo.tpot_s)
        if mix.separate_lane:
            bound = math.inf  # prefills run beside the decode batch: the engine-time bound does not apply
        out.append(_Candidate(acc=acc, tensor_parallel=tp, max_num_seqs=b, effective_max_num_seqs=b_eff,
                              budget_tokens=budget_tokens, step=step, estimate_rps=est, bound_rps=bound,
                              detail=Detail(note="", effective_max_num_seqs=b_eff, estimate_rps=est, **base)))
    return out


def _search(req: PlanRequest, c: _Candidate, memo: dict[tuple[str, float], tuple[SweepPoint, SimResult]]) -> Evaluated:
    """Find one candidate's capacity per replica with the sweep's capacity search, and what binds."""
    scenario = _scenario(req, c.budget_tokens, c.effective_max_num_seqs, c.step)
    key_base = scenario.model_dump_json()
    bound = c.bound_rps
    sims: dict[float, tuple[SweepPoint, SimResult]] = {}

    def simulate_at(load: float, source: Literal["grid", "search"]) -> tuple[SweepPoint, SimResult]:
        key = (key_base, load)
        if key not in memo:
            memo[key] = _evaluate(req, scenario, load, source)
        sims[load] = memo[key]
        return memo[key]

    def run(load: float, source: Literal["grid", "search"]) -> SweepPoint:
        if load >= bound:
            # unsustainable, whatever a short simulation shows (its queue may not have grown yet): a miss,
            # simulated later only if it is needed to name the limit
            return SweepPoint.model_construct(load=load, meets_slo=False)
        return simulate_at(load, source)[0]

    grid = [round(0.91 * c.estimate_rps, 9)] + ([bound] if math.isfinite(bound) else [])
    points = {x: run(x, "grid") for x in grid}
    cap = search_capacity(run, grid, points, "rate", req.tolerance, 12)
    capacity = cap.load or 0.0
    limit: PlanLimit = "none"
    if cap.upper is not None and cap.upper >= bound:  # every load simulated below the bound met the SLOs
        limit = "throughput"
    elif cap.upper is not None:
        point, sim = sims.get(cap.upper) or simulate_at(cap.upper, "search")
        limit = _limit_from(sim, point, req, c.budget_tokens)
    note = (f"capacity {capacity:.4g} requests/s per replica ({cap.note})" if cap.load is not None
            else f"no load tried meets the SLOs ({cap.note})")
    if limit == "throughput":
        note += (f"; the throughput bound sets it: from {bound:.4g} requests/s on the engine needs more time than "
                 f"it has at {c.effective_max_num_seqs} sequences (engine time per request), while every load "
                 "simulated below met the SLOs")
    elif math.isfinite(bound):
        note += (f"; no load from {bound:.4g} requests/s on can be sustained at {c.effective_max_num_seqs} "
                 "sequences (engine time per request), so those count as misses")
    if c.effective_max_num_seqs < c.max_num_seqs:
        note += (f"; KV holds at most {c.effective_max_num_seqs} sequences, so max_num_seqs {c.max_num_seqs} "
                 f"acts as {c.effective_max_num_seqs}")
    detail = c.detail.model_copy(update={"note": note, "capacity_upper_rps": cap.upper, "search": cap.note})
    return Evaluated(gpu=c.acc.name, tensor_parallel=c.tensor_parallel, max_num_seqs=c.max_num_seqs,
                     capacity_rps=capacity, limit=limit, detail=detail)


def _replicas(rate_rps: float, capacity_rps: float, headroom: float) -> int | None:
    usable = capacity_rps * (1 - headroom)
    return max(1, math.ceil(rate_rps / usable - 1e-9)) if usable > 0 else None


def evaluate_configurations(req: PlanRequest, rate_rps: float | None = None,
                            progress: ProgressCallback | None = None) -> Evaluation:
    """Find every configuration's capacity per replica under the SLOs (see the module docstring).

    With ``rate_rps``, candidates are searched from the lowest possible cost up (cost at their
    throughput bound), and one whose lowest possible cost is not below the cheapest option found
    is not simulated (listed in ``skipped``): branch and bound. Without it, every candidate is.
    """
    if not req.slo.any:
        raise ConfigError("give at least one SLO (TTFT, TPOT or latency): capacity is the load that still meets them")
    if rate_rps is not None and not (rate_rps > 0 and math.isfinite(rate_rps)):
        raise ConfigError(f"rate must be a positive number of requests per second, got {rate_rps}")
    shape = req.model
    if shape.parameters is None:
        raise ConfigError(f"model {shape.name or '(unnamed)'}: no parameter count, so weights cannot be sized")
    accs = _accelerators(req)
    mix = _mix(req)
    notes: list[str] = []
    configs: list[Evaluated] = []
    candidates: list[_Candidate] = []
    for acc in accs:
        for tp in sorted(set(req.tensor_parallel)):
            if tp > acc.max_tensor_parallel:
                continue
            try:
                kv.kv_heads_per_gpu(shape, tp)
            except ConfigError as exc:
                notes.append(f"{acc.name} x{tp} skipped: {exc}")
                continue
            screened = _screen(req, mix, acc, tp)
            if isinstance(screened, Evaluated):
                configs.append(screened)
            else:
                candidates.extend(screened)
    pruned = len(configs)

    def lowest_cost(c: _Candidate) -> float:
        if rate_rps is None or not math.isfinite(c.bound_rps):
            return 0.0
        n = _replicas(rate_rps, c.bound_rps, req.headroom)
        return math.inf if n is None else n * c.tensor_parallel * c.acc.price_usd_per_hour

    candidates.sort(key=lambda c: (lowest_cost(c), c.acc.name, c.tensor_parallel, c.max_num_seqs))
    memo: dict[tuple[str, float], tuple[SweepPoint, SimResult]] = {}
    skipped: list[Skipped] = []
    best_cost = math.inf
    for i, c in enumerate(candidates):
        label = f"{c.acc.name} x{c.tensor_parallel}, max_num_seqs {c.max_num_seqs}"
        floor = lowest_cost(c)
        if rate_rps is not None and floor >= best_cost:
            skipped.append(Skipped(gpu=c.acc.name, tensor_parallel=c.tensor_parallel, max_num_seqs=c.max_num_seqs,
                                   bound_rps_per_replica=c.bound_rps, lowest_cost_per_hour_usd=floor,
                                   note=f"not simulated: even at its throughput bound of {c.bound_rps:.4g} requests/s "
                                        f"per replica it costs at least ${floor:.2f}/hour, not below the cheapest "
                                        f"option found (${best_cost:.2f}/hour)"))
            if progress is not None:
                progress(i + 1, len(candidates), f"{label}: skipped (cannot be cheaper)")
            continue
        e = _search(req, c, memo)
        configs.append(e)
        if rate_rps is not None:
            n = _replicas(rate_rps, e.capacity_rps, req.headroom)
            if n is not None:
                best_cost = min(best_cost, n * c.tensor_parallel * c.acc.price_usd_per_hour)
        if progress is not None:
            progress(i + 1, len(candidates), f"{label}: {e.capacity_rps:.3g} requests/s per replica")
    if req.calibration is not None and req.calibration.accelerator not in {a.name for a in accs}:
        notes.append(f"the calibration is for {req.calibration.accelerator}, which this plan does not include")
    return Evaluation(request=req, configs=configs, skipped=skipped, mean_output_tokens=mix.mean_output,
                      mean_prompt_tokens=mix.mean_prompt, simulations=len(memo), pruned=pruned, notes=notes)


# --------------------------------------------------------------------------- pricing at a rate


def _option(e: Evaluated, rate_rps: float, headroom: float, mean_output_tokens: float, price: float) -> Option:
    usable = e.capacity_rps * (1 - headroom)
    if usable <= 0:
        return Option(gpu=e.gpu, tensor_parallel=e.tensor_parallel, max_num_seqs=e.max_num_seqs,
                      capacity_rps_per_replica=e.capacity_rps, replicas=None, gpus_total=None, meets_slo=False,
                      cost_per_hour_usd=None, cost_per_million_output_tokens_usd=None, limit=e.limit)
    replicas = max(1, math.ceil(rate_rps / usable - 1e-9))
    gpus = replicas * e.tensor_parallel
    per_hour = gpus * price
    tokens_per_hour = rate_rps * mean_output_tokens * 3600
    return Option(gpu=e.gpu, tensor_parallel=e.tensor_parallel, max_num_seqs=e.max_num_seqs,
                  capacity_rps_per_replica=e.capacity_rps, replicas=replicas, gpus_total=gpus, meets_slo=True,
                  cost_per_hour_usd=per_hour, cost_per_million_output_tokens_usd=per_hour / tokens_per_hour * 1e6,
                  limit=e.limit, replicas_by_division=replicas)


def _rank_key(o: Option) -> tuple:
    return (not o.meets_slo, o.cost_per_hour_usd if o.cost_per_hour_usd is not None else math.inf,
            o.gpus_total or 0, -o.capacity_rps_per_replica, o.gpu, o.tensor_parallel, o.max_num_seqs or 0)


def price(evaluation: Evaluation, rate_rps: float, prices: dict[str, float] | None = None) -> Plan:
    """Return the options at ``rate_rps`` (requests/s), ranked, with the cheapest that meets the SLOs."""
    if not (rate_rps > 0 and math.isfinite(rate_rps)):
        raise ConfigError(f"rate must be a positive number of requests per second, got {rate_rps}")
    req = evaluation.request
    prices = prices or {}
    pairs = []
    for e in evaluation.configs:
        usd = prices.get(e.gpu, e.detail.price_usd_per_hour)
        detail = e.detail if e.gpu not in prices else e.detail.model_copy(
            update={"price_usd_per_hour": usd, "price_source": "set by the user"})
        pairs.append((_option(e, rate_rps, req.headroom, evaluation.mean_output_tokens, usd), detail))
    pairs.sort(key=lambda p: _rank_key(p[0]))
    options = [o for o, _ in pairs]
    best = next((o for o in options if o.meets_slo), None)
    if best is not None:
        reason = (f"cheapest configuration meeting the SLOs: {best.replicas} replica(s) of {best.gpu} x"
                  f"{best.tensor_parallel}, each planned at {rate_rps / best.replicas:.3g} of its "
                  f"{best.capacity_rps_per_replica:.3g} requests/s ({req.headroom:.0%} headroom)")
    else:
        reason = _no_option_reason(evaluation)
    return Plan(rate_rps=rate_rps, options=options, best=best, reason=reason, details=[d for _, d in pairs])


def _no_option_reason(evaluation: Evaluation) -> str:
    configs = evaluation.configs
    if not configs:
        return "no configuration to try: " + ("; ".join(evaluation.notes) or "no GPU type or parallelism given")
    if all(not c.detail.fits for c in configs):
        return (f"the model does not fit on any configuration tried (largest: "
                f"{max(configs, key=lambda c: c.tensor_parallel).gpu} x{max(c.tensor_parallel for c in configs)}): "
                f"{configs[0].detail.note}")
    fitting = [c for c in configs if c.detail.fits]
    if all(c.max_num_seqs is None for c in fitting):
        return "every configuration that fits misses the SLOs even with no load: " + fitting[0].detail.note
    return "no configuration meets the SLOs at any load tried; the binding limits: " + ", ".join(
        sorted({c.limit for c in fitting}))


def plan(req: PlanRequest, rate_rps: float, progress: ProgressCallback | None = None) -> tuple[Evaluation, Plan]:
    """Evaluate every configuration, price them at ``rate_rps``, then verify the cheapest by simulating the fleet."""
    if not (rate_rps > 0 and math.isfinite(rate_rps)):
        raise ConfigError(f"rate must be a positive number of requests per second, got {rate_rps}")
    evaluation = evaluate_configurations(req, rate_rps, progress)
    priced = price(evaluation, rate_rps)
    return evaluation, verify_fleets(evaluation, priced, progress) if req.verify_fleet else priced


def _option_scenario(evaluation: Evaluation, option: Option) -> Scenario:
    """Return the simulator's scenario for one replica of ``option`` (its configuration as evaluated)."""
    e = next(c for c in evaluation.configs if (c.gpu, c.tensor_parallel, c.max_num_seqs) ==
             (option.gpu, option.tensor_parallel, option.max_num_seqs))
    d = e.detail
    assert d.step_model is not None and d.kv_budget_tokens is not None and d.effective_max_num_seqs is not None
    return _scenario(evaluation.request, d.kv_budget_tokens, d.effective_max_num_seqs, d.step_model)


def fleet_point(evaluation: Evaluation, option: Option, rate_rps: float, replicas: int,
                requests: int | None = None) -> tuple[SweepPoint, SimResult]:
    """Simulate ``replicas`` replicas of ``option`` behind the request's router at ``rate_rps`` (the whole fleet)."""
    req = evaluation.request
    scenario = _option_scenario(evaluation, option)
    n = requests or min(MAX_FLEET_REQUESTS, req.requests_per_simulation * replicas)
    wl = req.workload
    if wl.trace is not None and wl.trace_rate_rps is not None:
        at = scenario_at(scenario, speedup_for(rate_rps, wl.trace_rate_rps), "speedup", n)
    else:
        at = scenario_at(scenario, rate_rps, "rate", n)
    sim = simulate_fleet(at, FleetSpec(replicas=replicas, router=req.router), token_times=False).result
    return point_from(sim, rate_rps, "rate", req.slo, req.slo_target), sim


def _fleet_try(point: SweepPoint, sim: SimResult, replicas: int) -> FleetTry:
    counts = np.bincount(sim.records.extra[REPLICA_COLUMN].to_numpy(), minlength=replicas).tolist()
    mean = sum(counts) / replicas
    return FleetTry(replicas=replicas, attainment=point.slo_attainment or 0.0, meets_slo=bool(point.meets_slo),
                    load_imbalance=max(counts) / mean if mean > 0 else None, requests_per_replica=counts)


def verify_fleets(evaluation: Evaluation, result: Plan, progress: ProgressCallback | None = None) -> Plan:
    """Return the plan with the cheapest options' replica counts verified by simulating each fleet (step 6)."""
    req = evaluation.request
    rate = result.rate_rps
    pairs = list(zip(result.options, result.details))
    order = [i for i, (o, _) in enumerate(pairs) if o.meets_slo and o.replicas is not None]
    best_cost = math.inf
    verified = 0
    for i in order:
        o, d = pairs[i]
        if verified >= MAX_VERIFIED_OPTIONS or (o.cost_per_hour_usd or 0.0) >= best_cost:
            break  # a count only rises: this option cannot become the cheapest
        assert o.replicas is not None
        if o.replicas > MAX_REPLICAS:  # no fleet simulation holds it: the count stays division's, and says so
            note = (f"{fmt_count(o.replicas, 'replica')} by division, more than the {MAX_REPLICAS} replicas a fleet "
                    "simulation holds: not simulated")
            check = FleetCheck(router=req.router, requests=0, tries=[], note=note)
            pairs[i] = (o, d.model_copy(update={"fleet": check, "note": f"{d.note}; fleet: {note}"}))
            continue
        verified += 1
        divided, most = o.replicas, min(o.replicas * MAX_FLEET_REPLICAS_FACTOR, MAX_REPLICAS)
        tries: list[FleetTry] = []
        n = divided
        requests = 0
        while n <= most:
            if progress is not None:
                progress(verified, min(len(order), MAX_VERIFIED_OPTIONS),
                         f"{o.gpu} x{o.tensor_parallel}: {n} replicas behind {req.router}, simulated together")
            point, sim = fleet_point(evaluation, o, rate, n)
            requests = len(sim.records)
            tries.append(_fleet_try(point, sim, n))
            if tries[-1].meets_slo:
                break
            n += 1
        met = tries[-1].meets_slo
        if met and n == divided:
            note = f"{fmt_count(n, 'replica')} behind {req.router} meet the SLOs together, as division says"
        elif met:
            note = (f"{fmt_count(divided, 'replica')} by division, {n} needed under bursts: the fleet of {divided} "
                    f"behind {req.router} had {fmt_share(tries[0].attainment)} of requests within the SLOs")
        else:
            note = (f"{fmt_count(divided, 'replica')} by division, and even {most} behind {req.router} miss the SLOs "
                    f"together ({fmt_share(tries[-1].attainment)} within them)")
        check = FleetCheck(router=req.router, requests=requests, tries=tries, note=note)
        if met:
            per_hour = (o.cost_per_hour_usd or 0.0) * n / divided
            tokens_per_hour = rate * evaluation.mean_output_tokens * 3600
            option = o.model_copy(update={"replicas": n, "gpus_total": n * o.tensor_parallel,
                                          "cost_per_hour_usd": per_hour,
                                          "cost_per_million_output_tokens_usd": per_hour / tokens_per_hour * 1e6})
            best_cost = min(best_cost, per_hour)
        else:
            option = o.model_copy(update={"replicas": None, "gpus_total": None, "meets_slo": False,
                                          "cost_per_hour_usd": None, "cost_per_million_output_tokens_usd": None})
        option = option.model_copy(update={"router": req.router, "fleet_verified": True,
                                           "replicas_by_division": divided})
        pairs[i] = (option, d.model_copy(update={"fleet": check, "note": f"{d.note}; fleet: {note}"}))
    if progress is not None and verified:
        progress(verified, verified, f"{verified} fleet(s) verified behind {req.router}")
    pairs.sort(key=lambda p: _rank_key(p[0]))
    options = [o for o, _ in pairs]
    best = next((o for o in options if o.meets_slo), None)
    reason = result.reason
    if best is not None:
        reason = (f"cheapest configuration meeting the SLOs: {best.replicas} replica(s) of {best.gpu} x"
                  f"{best.tensor_parallel}, each planned at {rate / best.replicas:.3g} of its "
                  f"{best.capacity_rps_per_replica:.3g} requests/s ({req.headroom:.0%} headroom)")
        if best.fleet_verified:
            reason += (f"; the fleet simulated behind {best.router} " +
                       (f"needs {best.replicas}, where division says {best.replicas_by_division}"
                        if best.replicas != best.replicas_by_division else "meets the SLOs at that count"))
    elif options:
        reason = _no_option_reason(evaluation)
    return Plan(rate_rps=rate, options=options, best=best, reason=reason, details=[d for _, d in pairs])


def fleet_sentence(option: Option, detail: Detail) -> str | None:
    """Say what simulating the fleet changed for ``option`` (None when it was not simulated).

    >>> tries = [FleetTry(replicas=4, attainment=0.937, meets_slo=False, load_imbalance=1.0,
    ...                   requests_per_replica=[300] * 4),
    ...          FleetTry(replicas=5, attainment=0.999, meets_slo=True, load_imbalance=1.01,
    ...                   requests_per_replica=[300, 300, 300, 300, 300])]
    >>> o = Option(gpu="H100", tensor_parallel=1, max_num_seqs=64, capacity_rps_per_replica=8.5, replicas=5,
    ...            gpus_total=5, meets_slo=True, cost_per_hour_usd=15.0, cost_per_million_output_tokens_usd=1.0,
    ...            limit="decode", router="round_robin", fleet_verified=True, replicas_by_division=4)
    >>> d = Detail(note="", fits=True, weights_gib_per_gpu=15.0, kv_budget_gib_per_gpu=50.0, kv_budget_tokens=1,
    ...            step_model=None, price_usd_per_hour=3.0, price_source="",
    ...            fleet=FleetCheck(router="round_robin", requests=1500, tries=tries, note=""))
    >>> print(fleet_sentence(o, d))
    4 replicas by division, 5 needed under bursts: behind round_robin the fleet of 4 had 93.7% of requests within the SLOs, the fleet of 5 99.9% (requests per replica 300 / 300 / 300 / 300 / 300, the busiest 1.01x the mean).
    """
    check = detail.fleet
    if check is not None and not check.tries:  # too many replicas to simulate: the note says so
        return f"{check.note[0].upper()}{check.note[1:]}."
    if check is None or not option.fleet_verified:
        return None
    first, last = check.tries[0], check.tries[-1]
    spread = (f"requests per replica {' / '.join(f'{n:,}' for n in last.requests_per_replica)}, the busiest "
              f"{last.load_imbalance:.2f}x the mean" if last.load_imbalance is not None else "")
    if last.meets_slo and last.replicas == first.replicas:
        return (f"{fmt_count(first.replicas, 'replica')} by division, and the fleet of {first.replicas} simulated "
                f"behind {check.router} meets the SLOs too ({fmt_share(first.attainment)} of requests within them; "
                f"{spread}).")
    if last.meets_slo:
        return (f"{fmt_count(first.replicas, 'replica')} by division, {last.replicas} needed under bursts: behind "
                f"{check.router} the fleet of {first.replicas} had {fmt_share(first.attainment)} of requests within the "
                f"SLOs, the fleet of {last.replicas} {fmt_share(last.attainment)} ({spread}).")
    return (f"{fmt_count(first.replicas, 'replica')} by division, and even {last.replicas} behind {check.router} miss "
            f"the SLOs together ({fmt_share(last.attainment)} of requests within them).")


def cost_curve(evaluation: Evaluation, rates_rps: Sequence[float]) -> list[dict[str, float | str | None]]:
    """Return, for each rate, the cheapest option meeting the SLOs (cost per hour and its configuration)."""
    out: list[dict[str, float | str | None]] = []
    for r in rates_rps:
        best = price(evaluation, r).best
        out.append({"rate_rps": float(r), "cost_per_hour_usd": best.cost_per_hour_usd if best else None,
                    "cost_per_million_output_tokens_usd": best.cost_per_million_output_tokens_usd if best else None,
                    "configuration": f"{best.replicas} x {best.gpu} x{best.tensor_parallel}" if best else None,
                    "gpus_total": best.gpus_total if best else None})
    return out


def planned_point(evaluation: Evaluation, option: Option, rate_rps: float, *, requests: int | None = None,
                  seed: int | None = None) -> SweepPoint:
    """Re-simulate one replica of ``option`` at its share of ``rate_rps`` (a check of the plan)."""
    if option.replicas is None or option.max_num_seqs is None:
        raise ConfigError(f"{option.gpu} x{option.tensor_parallel} has no planned load to simulate")
    req = evaluation.request
    scenario = _option_scenario(evaluation, option)
    if seed is not None:
        scenario = scenario.model_copy(update={"seed": seed})
    point, _ = _evaluate(req, scenario, rate_rps / option.replicas, "grid", requests or req.requests_per_simulation)
    return point


# --------------------------------------------------------------------------- inputs from files


def shape_from_config_file(path: str, *, bytes_per_element: float | None = None) -> tuple[kv.ModelShape, int]:
    """Return a config.json's shape with its estimated parameter count, and the active parameters."""
    from servebench.capacity.hf_config import read_config, shape_from_config
    from servebench.capacity.roofline import estimate_parameters

    p = Path(path)
    cfg = read_config(p)
    shape = shape_from_config(cfg, name=p.parent.name if p.name == "config.json" else p.stem, source=str(p),
                              bytes_per_element=bytes_per_element)
    total, active = estimate_parameters(cfg, str(p))
    try:
        return kv.ModelShape(**{**shape.model_dump(), "parameters": total}), active
    except ValueError:  # over MAX_PARAMETERS
        raise ConfigError(f"{p}: its sizes give {total:,} parameters, over the {kv.MAX_PARAMETERS:,} a model may "
                          "have (docs/kv.md)") from None


def load_calibration(run_dir: str, *, gpu: str | None = None) -> Calibration:
    """Read a ``servebench run`` folder, fit its step trace and calibrate the efficiency factors of its device.

    The device comes from ``metadata.json`` (``runtime.device_name``) unless ``gpu`` names a preset.
    """
    from servebench.capacity.gpus import accelerator_for_device
    from servebench.capacity.roofline import calibrate
    from servebench.capacity.stepmodel import fit_step_model
    from servebench.errors import InputFormatError
    from servebench.records.loaders import load_table
    from servebench.records.rundir import METADATA, read_folder

    d = Path(run_dir)
    folder = read_folder(d, require=("steps", "metadata"))  # the run folder's files, as every command reads them
    meta, meta_path, records_path = folder.metadata or {}, d / METADATA, folder.records_path
    model = meta.get("model")
    runtime = meta.get("runtime")
    if not isinstance(model, dict) or not isinstance(runtime, dict):
        raise InputFormatError(f"{meta_path}: no 'model' and 'runtime' objects; was it written by servebench run?")
    try:
        shape = kv.ModelShape(name=model.get("name"), layers=model["layers"], kv_heads=model["kv_heads"],
                              head_dim=model["head_dim"], bytes_per_element=model["bytes_per_element"],
                              num_attention_heads=model.get("num_attention_heads"),
                              hidden_size=model.get("hidden_size"), parameters=model["parameters"])
    except (KeyError, ValueError) as exc:
        raise InputFormatError(f"{meta_path}, field 'model': {exc}") from None
    device = str(runtime.get("device_name") or runtime.get("device") or "")
    acc = get_accelerator(gpu) if gpu else accelerator_for_device(device)
    if acc is None:
        raise ConfigError(f"{meta_path}: device {device!r} matches no GPU preset; say which with --calibrate-gpu "
                          f"({', '.join(ACCELERATORS)})")
    fit = fit_step_model(folder.steps if folder.steps is not None else [])
    table, _, _ = load_table(records_path)
    prompts = table.prompt_tokens[table.prompt_tokens >= 0]
    if prompts.size == 0:
        raise InputFormatError(f"{records_path}: no prompt_tokens, so the prefill cost per token cannot be compared")
    return calibrate(fit.model, shape, acc, weight_bytes_per_parameter=float(model["bytes_per_element"]),
                     prompt_tokens=float(prompts.mean()), source=f"{d} ({device}, {fit.steps} steps fitted)")


# --------------------------------------------------------------------------- one document for the CLI and the app


def _trace_document(workload: Workload) -> dict | None:
    """Return the trace window a plan sized for (None: a drawn mix)."""
    spec = workload.trace
    if spec is None:
        return None
    return {"path": spec.path, "format": spec.format, "window_start_s": spec.start_s, "window_s": spec.duration_s,
            "requests": len(window_requests(spec)), "window_rate_rps": workload.trace_rate_rps,
            "prefix_caching": workload.prefix_caching}


def plan_document(evaluation: Evaluation, result: Plan) -> dict:
    """Return the plan as plain JSON data: ``options`` and ``best`` (the documented keys) with their context."""
    req = evaluation.request
    cal = req.calibration
    return {
        "model": {"name": req.model.name, "parameters": req.model.parameters,
                  "active_parameters": req.active_parameters or ACTIVE_PARAMETERS.get(req.model.name or ""),
                  "weight_bytes_per_parameter": req.weight_bytes_per_parameter,
                  "kv_bytes_per_element": req.model.bytes_per_element,
                  "kv_dtype": req.model.kv_dtype_note or "bf16, 2 bytes: the 16-bit dtype engines serve in"},
        "workload": {"name": req.workload.name, "rate_rps": result.rate_rps,
                     "mean_prompt_tokens": evaluation.mean_prompt_tokens,
                     "mean_output_tokens": evaluation.mean_output_tokens,
                     "classes": [c.model_dump(mode="json", exclude_none=True) for c in req.workload.classes],
                     "prefix_caching": req.workload.prefix_caching, "trace": _trace_document(req.workload)},
        "slo": req.slo.model_dump(), "slo_target": req.slo_target, "headroom": req.headroom,
        "efficiency": {"defaults": req.efficiency.model_dump(),
                       "calibration": cal.model_dump(mode="json") if cal is not None else None,
                       "used": ({cal.accelerator: f"calibrated from {cal.source}"} if cal is not None else {})
                       | {"other accelerators": "defaults" if req.efficiency == Efficiency() else "given"}},
        "options": [o.model_dump(mode="json") for o in result.options],
        "best": result.best.model_dump(mode="json") if result.best is not None else None,
        "reason": result.reason,
        "details": [d.model_dump(mode="json") for d in result.details],
        "skipped": [s.model_dump(mode="json") for s in evaluation.skipped],
        "search": {"simulations": evaluation.simulations, "pruned_without_simulating": evaluation.pruned,
                   "skipped_by_cost_bound": len(evaluation.skipped),
                   "requests_per_simulation": req.requests_per_simulation, "tolerance": req.tolerance},
        "fleet": {"router": req.router, "verified": req.verify_fleet,
                  "options_verified": sum(o.fleet_verified for o in result.options),
                  "fleet_simulations": sum(len(d.fleet.tries) for d in result.details if d.fleet is not None),
                  "most_options_verified": MAX_VERIFIED_OPTIONS, "most_requests_per_fleet": MAX_FLEET_REQUESTS,
                  "most_replicas_factor": MAX_FLEET_REPLICAS_FACTOR},
        "assumptions": {"memory_utilization": req.memory_utilization, "overhead_gib_per_gpu": req.overhead_gib,
                        "max_num_batched_tokens": req.max_num_batched_tokens,
                        "estimate": "a roofline estimate from public hardware figures, not a hardware guarantee"},
        "notes": evaluation.notes,
    }
