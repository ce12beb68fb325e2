"""Disaggregated configurations in the plan: ``servebench plan --disaggregated`` (docs/planner.md).

For the cheapest configurations the plan found (GPU type, tensor parallelism and ``max_num_seqs``, each
instance one replica's GPUs), the search simulates prefill and decode instances of it together
(``servebench.serving.disagg``) at the planned rate and looks for the fewest that meet the SLOs. It starts
with as many of each kind as the colocated option has replicas (the verified count when the fleet was
simulated), doubling both, up to ``MAX_FLEET_REPLICAS_FACTOR`` times that and at most ``MAX_REPLICAS``
(256, what a simulation holds), until they meet the SLOs; a start past 256 is not simulated (its note says so); then
it bisects the prefill count with that many decode instances, and the decode count with the fewest prefill
instances found. This takes more instances of one kind never to hurt (they only shorten queues), and costs
about 2 log2(start) simulations. Each offers the fleet check's request count (``requests_per_simulation``
per instance, at most ``MAX_FLEET_REQUESTS``).

Every instance costs what a colocated replica does (its GPUs at the option's price); prompts' KV crosses each
prefill instance's link at ``kv_transfer_gbps`` GB/s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, Field

from servebench.errors import ConfigError
from servebench.planning.planner import (
    MAX_FLEET_REPLICAS_FACTOR,
    MAX_FLEET_REQUESTS,
    Evaluation,
    Option,
    Plan,
    _option_scenario,
)
from servebench.planning.trace_window import speedup_for
from servebench.serving.disagg import simulate_disaggregated
from servebench.serving.scenario import DISAGGREGATED_ROUTERS, MAX_REPLICAS, FleetSpec
from servebench.serving.sweep import SweepPoint, point_from, scenario_at

MAX_DISAGG_CONFIGS = 3  # configurations the disaggregated search tries, the cheapest colocated options first
DEFAULT_KV_TRANSFER_GBPS = 50.0  # a 400 Gb/s NIC per prefill instance, the common InfiniBand/RoCE port


class DisaggTry(BaseModel):
    """One disaggregated fleet simulated at the planned rate."""

    prefill_replicas: int
    decode_replicas: int
    attainment: float = Field(description="Share of requests within every SLO.")
    meets_slo: bool


class DisaggOption(BaseModel):
    """The fewest prefill and decode instances of one configuration found to meet the SLOs (None: none did)."""

    gpu: str
    tensor_parallel: int
    max_num_seqs: int
    prefill_replicas: int | None = Field(description="Prefill instances; None when no split tried met the SLOs.")
    decode_replicas: int | None
    kv_transfer_gbps: float = Field(description="Each prefill instance's link to the decode instances, GB/s.")
    gpus_total: int | None
    cost_per_hour_usd: float | None
    meets_slo: bool
    colocated_replicas: int | None = Field(description="The colocated option's replicas (None: it meets no SLO).")
    colocated_gpus: int | None
    router: str
    tries: list[DisaggTry] = Field(description="Every split simulated, in the order tried.")
    note: str


def disaggregated_point(evaluation: Evaluation, option: Option, rate_rps: float, prefill: int, decode: int,
                        kv_transfer_gbps: float, router: str) -> SweepPoint:
    """Simulate ``prefill`` + ``decode`` instances of ``option`` at ``rate_rps`` and judge them against the SLOs."""
    req = evaluation.request
    scenario = _option_scenario(evaluation, option)
    n = min(MAX_FLEET_REQUESTS, req.requests_per_simulation * (prefill + decode))
    wl = req.workload
    if wl.trace is not None and wl.trace_rate_rps is not None:
        at = scenario_at(scenario, speedup_for(rate_rps, wl.trace_rate_rps), "speedup", n)
    else:
        at = scenario_at(scenario, rate_rps, "rate", n)
    fleet = FleetSpec(prefill_replicas=prefill, decode_replicas=decode, kv_transfer_gbps=kv_transfer_gbps,
                      router=router)
    sim = simulate_disaggregated(at, fleet, token_times=False, shape=req.model).result
    return point_from(sim, rate_rps, "rate", req.slo, req.slo_target)


def plan_disaggregated(evaluation: Evaluation, result: Plan, *, kv_transfer_gbps: float = DEFAULT_KV_TRANSFER_GBPS,
                       progress: Callable[[int, int, str], None] | None = None) -> list[DisaggOption]:
    """Return, for the cheapest configurations of ``result``, the fewest disaggregated instances meeting the SLOs."""
    req = evaluation.request
    router = req.router
    if router not in DISAGGREGATED_ROUTERS:
        raise ConfigError(f"--router {router}: a disaggregated fleet routes by one of "
                          f"{', '.join(DISAGGREGATED_ROUTERS)}")
    seen: set[tuple[str, int, int]] = set()
    picked: list[tuple[Option, float]] = []
    for o, d in zip(result.options, result.details):
        key = (o.gpu, o.tensor_parallel, o.max_num_seqs or 0)
        if o.max_num_seqs is None or d.step_model is None or key in seen:
            continue
        seen.add(key)
        picked.append((o, d.price_usd_per_hour))
        if len(picked) == MAX_DISAGG_CONFIGS:
            break
    out = []
    for k, (o, price) in enumerate(picked):
        if progress is not None:
            progress(k, len(picked), f"{o.gpu} x{o.tensor_parallel}: prefill and decode instances, simulated together")
        out.append(_search(evaluation, o, price, result.rate_rps, kv_transfer_gbps, router))
    if progress is not None and picked:
        progress(len(picked), len(picked), f"{len(picked)} disaggregated configuration(s) searched")
    return out


def _search(evaluation: Evaluation, o: Option, price: float, rate: float, gbps: float, router: str) -> DisaggOption:
    """Find the fewest prefill, then decode, instances of ``o`` that meet the SLOs (see the module docstring)."""
    assert o.max_num_seqs is not None
    tries: list[DisaggTry] = []

    def meets(p: int, d: int) -> bool:
        point = disaggregated_point(evaluation, o, rate, p, d, gbps, router)
        tries.append(DisaggTry(prefill_replicas=p, decode_replicas=d, attainment=point.slo_attainment or 0.0,
                               meets_slo=bool(point.meets_slo)))
        return tries[-1].meets_slo

    start = max(1, o.replicas or 1)
    common = {"gpu": o.gpu, "tensor_parallel": o.tensor_parallel, "max_num_seqs": o.max_num_seqs,
              "kv_transfer_gbps": gbps, "colocated_replicas": o.replicas if o.meets_slo else None,
              "colocated_gpus": o.gpus_total if o.meets_slo else None, "router": router}
    if start > MAX_REPLICAS:  # no simulation holds as many of each kind: nothing tried, and the note says so
        note = (f"{start} colocated replicas, more instances of each kind than the {MAX_REPLICAS} a simulation "
                "holds: not simulated")
        return DisaggOption(prefill_replicas=None, decode_replicas=None, gpus_total=None, cost_per_hour_usd=None,
                            meets_slo=False, note=note, tries=[], **common)
    top, most = start, min(start * MAX_FLEET_REPLICAS_FACTOR, MAX_REPLICAS)
    while not meets(top, top) and top < most:  # as many of each kind as colocated replicas, then more
        top = min(most, top * 2)
    found = tries[-1].meets_slo
    if found:
        p = _fewest(lambda k: meets(k, top), top)
        d = _fewest(lambda k: meets(p, k), top)
    colocated_gpus = o.gpus_total if o.meets_slo else None
    common["tries"] = tries
    if not found:
        note = (f"even {top} prefill + {top} decode instances miss the SLOs "
                f"({tries[-1].attainment:.1%} of requests within them)")
        return DisaggOption(prefill_replicas=None, decode_replicas=None, gpus_total=None, cost_per_hour_usd=None,
                            meets_slo=False, note=note, **common)
    met = next(t for t in reversed(tries) if t.meets_slo and (t.prefill_replicas, t.decode_replicas) == (p, d))
    gpus = (p + d) * o.tensor_parallel
    if colocated_gpus is None:
        versus = "where colocated replicas meet them at no count tried"
    elif gpus == colocated_gpus:
        versus = f"as many GPUs as {o.replicas} colocated replicas"
    else:
        versus = (f"where colocated needs {o.replicas} replicas ({colocated_gpus} GPUs): "
                  f"{abs(colocated_gpus - gpus)} {'fewer' if gpus < colocated_gpus else 'more'}")
    note = (f"{p} prefill + {d} decode instances of {o.gpu} x{o.tensor_parallel} ({gpus} GPUs) meet the SLOs "
            f"({met.attainment:.1%} of requests) behind {router} over {gbps:g} GB/s, {versus}")
    return DisaggOption(prefill_replicas=p, decode_replicas=d, gpus_total=gpus, cost_per_hour_usd=gpus * price,
                        meets_slo=True, note=note, **common)


def _fewest(meets: Callable[[int], bool], top: int) -> int:
    """Return the least k in [1, top] with ``meets(k)``, by bisection; ``meets(top)`` is known to hold.

    >>> calls = []
    >>> _fewest(lambda k: calls.append(k) or k >= 5, 28), calls
    (5, [14, 7, 3, 5, 4])
    """
    low, high = 0, top  # meets(high) holds; meets(low) is taken to fail (no instance serves nothing)
    while high - low > 1:
        mid = (low + high) // 2
        if meets(mid):
            high = mid
        else:
            low = mid
    return high


def disaggregated_document(options: list[DisaggOption], kv_transfer_gbps: float) -> dict:
    """Return the disaggregated search as the plan document's ``disaggregated`` key."""
    met = [o for o in options if o.meets_slo and o.cost_per_hour_usd is not None]
    best = min(met, key=lambda o: (o.cost_per_hour_usd, o.gpus_total)) if met else None
    return {"kv_transfer_gbps": kv_transfer_gbps, "options": [o.model_dump(mode="json") for o in options],
            "best": best.model_dump(mode="json") if best is not None else None,
            "most_configurations": MAX_DISAGG_CONFIGS}


def cheaper_than_colocated(doc: dict, colocated_cost: float | None) -> str | None:
    """Say whether the best disaggregated option is cheaper than the colocated best (None: no disaggregated option)."""
    best = doc.get("best")
    if best is None:
        return None
    if colocated_cost is None or best["cost_per_hour_usd"] < colocated_cost - 1e-9:
        return "disaggregated is cheaper: " + best["note"]
    if math.isclose(best["cost_per_hour_usd"], colocated_cost):
        return "disaggregated costs the same: " + best["note"]
    return "colocated stays cheaper: " + best["note"]
