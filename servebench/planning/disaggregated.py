"""Disaggregated configurations in the plan: ``servebench plan --disaggregated`` (docs/planner.md).

For the cheapest configurations the plan found (GPU type, tensor parallelism and ``max_num_seqs``, each
instance one replica's GPUs), the search simulates prefill and decode instances of it together
(``servebench.serving.disagg``) at the planned rate and looks for the fewest instances that meet the
SLOs. It starts at the colocated count (the verified one when the fleet was simulated), tries the splits
nearest the workload's prefill share of engine time (``prefill_share``) and, when one meets the SLOs, one
instance fewer, down to two; when none does, one more, up to ``MAX_FLEET_REPLICAS_FACTOR`` times the start.
Each simulation offers the fleet check's request count (``requests_per_simulation`` per instance, at most
``MAX_FLEET_REQUESTS``); a configuration takes at most ``MAX_DISAGG_SIMULATIONS`` of them.

Every instance costs what a colocated replica does (its GPUs at the option's price); prompts' KV crosses each
prefill instance's link at ``kv_transfer_gbps`` GB/s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pydantic import BaseModel, Field

from servebench.capacity.stepmodel import StepModel
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
from servebench.serving.scenario import DISAGGREGATED_ROUTERS, FleetSpec
from servebench.serving.sweep import SweepPoint, point_from, scenario_at

MAX_DISAGG_CONFIGS = 3  # configurations the disaggregated search tries, the cheapest colocated options first
MAX_DISAGG_SIMULATIONS = 12  # fleet simulations per configuration, at most
SPLITS_PER_COUNT = 3  # splits tried at one instance count: the estimated one and its two neighbours
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


def prefill_share(step: StepModel, prompt_tokens: float, output_tokens: float, batch: int) -> float:
    """Return the share of engine time a request spends on its prompt: the search's first split.

    Its decode steps are shared by ``batch`` sequences (the fixed cost split among them).

    >>> round(prefill_share(StepModel(base_s=0.006, per_prefill_token_s=4e-5, per_decode_seq_s=1e-4), 2000, 28, 32), 3)
    0.912
    """
    prefill = step.per_prefill_token_s * prompt_tokens + step.per_prefill_seq_s
    kv_read = prompt_tokens + output_tokens / 2  # a decoding sequence's mean context
    per_step = step.base_s / max(batch, 1) + step.per_decode_seq_s + step.per_kv_token_s * kv_read
    decode = max(output_tokens - 1, 0) * per_step
    total = prefill + decode
    return prefill / total if total > 0 else 0.5


def splits(instances: int, share: float) -> list[int]:
    """Return the prefill counts to try among ``instances``: nearest ``share`` first, then its neighbours.

    >>> splits(4, 0.96), splits(4, 0.5), splits(2, 0.1)
    ([3, 2], [2, 1, 3], [1])
    """
    first = min(instances - 1, max(1, round(instances * share)))
    out = [first]
    for step in (-1, 1):
        p = first + step
        if 1 <= p <= instances - 1 and len(out) < SPLITS_PER_COUNT:
            out.append(p)
    return out


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
    router = req.router if req.router in DISAGGREGATED_ROUTERS else "least_outstanding"
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
    """Find the fewest instances of ``o`` that meet the SLOs disaggregated (see the module docstring)."""
    assert o.max_num_seqs is not None
    step = _option_scenario(evaluation, o).step_model.to_model()
    share = prefill_share(step, evaluation.mean_prompt_tokens, evaluation.mean_output_tokens, o.max_num_seqs)
    start = max(2, o.replicas or 2)
    most = start * MAX_FLEET_REPLICAS_FACTOR
    tries: list[DisaggTry] = []
    best: DisaggTry | None = None
    n, direction = start, 0
    while 2 <= n <= most and len(tries) < MAX_DISAGG_SIMULATIONS:
        met = None
        for p in splits(n, share):
            if len(tries) >= MAX_DISAGG_SIMULATIONS:
                break
            point = disaggregated_point(evaluation, o, rate, p, n - p, gbps, router)
            tries.append(DisaggTry(prefill_replicas=p, decode_replicas=n - p, attainment=point.slo_attainment or 0.0,
                                   meets_slo=bool(point.meets_slo)))
            if tries[-1].meets_slo:
                met = tries[-1]
                break
        if direction == 0:
            direction = -1 if met is not None else 1
        if met is not None:
            best = met
            if direction > 0:
                break  # counting up: the first count that meets them is the fewest
        elif direction < 0:
            break  # counting down: the count above was the fewest
        n += direction
    colocated_gpus = o.gpus_total if o.meets_slo else None
    if best is None:
        note = (f"no split of {start} to {n - 1 if direction > 0 else start} instances tried met the SLOs "
                f"({len(tries)} simulations; the best had {max(t.attainment for t in tries):.1%} within them)"
                if tries else "not simulated")
        return DisaggOption(gpu=o.gpu, tensor_parallel=o.tensor_parallel, max_num_seqs=o.max_num_seqs,
                            prefill_replicas=None, decode_replicas=None, kv_transfer_gbps=gbps, gpus_total=None,
                            cost_per_hour_usd=None, meets_slo=False,
                            colocated_replicas=o.replicas if o.meets_slo else None, colocated_gpus=colocated_gpus,
                            router=router, tries=tries, note=note)
    instances = best.prefill_replicas + best.decode_replicas
    gpus = instances * o.tensor_parallel
    if colocated_gpus is None:
        versus = "where colocated replicas meet them at no count tried"
    elif gpus < colocated_gpus:
        versus = f"where colocated needs {o.replicas} replicas ({colocated_gpus} GPUs): {colocated_gpus - gpus} fewer"
    elif gpus == colocated_gpus:
        versus = f"as many GPUs as {o.replicas} colocated replicas"
    else:
        versus = f"where colocated needs {o.replicas} replicas ({colocated_gpus} GPUs): {gpus - colocated_gpus} more"
    note = (f"{best.prefill_replicas} prefill + {best.decode_replicas} decode instances of {o.gpu} x{o.tensor_parallel}"
            f" ({gpus} GPUs) meet the SLOs ({best.attainment:.1%} of requests) behind {router} over {gbps:g} GB/s, "
            f"{versus}")
    return DisaggOption(gpu=o.gpu, tensor_parallel=o.tensor_parallel, max_num_seqs=o.max_num_seqs,
                        prefill_replicas=best.prefill_replicas, decode_replicas=best.decode_replicas,
                        kv_transfer_gbps=gbps, gpus_total=gpus, cost_per_hour_usd=gpus * price, meets_slo=True,
                        colocated_replicas=o.replicas if o.meets_slo else None, colocated_gpus=colocated_gpus,
                        router=router, tries=tries, note=note)


def disaggregated_document(options: list[DisaggOption], kv_transfer_gbps: float) -> dict:
    """Return the disaggregated search as the plan document's ``disaggregated`` key."""
    met = [o for o in options if o.meets_slo and o.cost_per_hour_usd is not None]
    best = min(met, key=lambda o: (o.cost_per_hour_usd, o.gpus_total)) if met else None
    return {"kv_transfer_gbps": kv_transfer_gbps, "options": [o.model_dump(mode="json") for o in options],
            "best": best.model_dump(mode="json") if best is not None else None,
            "most_configurations": MAX_DISAGG_CONFIGS, "most_simulations_per_configuration": MAX_DISAGG_SIMULATIONS}


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
