"""The capacity planner's cost against traffic, per GPU type and overall: data in, data out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from servebench.planning.planner import Evaluation, price


@dataclass(frozen=True)
class CostCurves:
    """The cheapest cost per hour meeting the SLOs at each traffic level (None: no configuration meets them)."""

    rates_rps: list[float]
    by_gpu: dict[str, list[float | None]]  # GPU types in name order
    cheapest: list[float | None]
    planned_rate_rps: float


def cost_curves(evaluation: Evaluation, rates_rps: Sequence[float], planned_rate_rps: float) -> CostCurves:
    """Return the cheapest cost per hour meeting the SLOs at each rate, for each GPU type and for any.

    Uses the capacities already found (no new simulation): replicas = ceil(rate / (capacity x
    (1 - headroom))) for each configuration simulated for this plan.
    """
    gpus = sorted({c.gpu for c in evaluation.configs if c.capacity_rps > 0})
    plans = [price(evaluation, r) for r in rates_rps]
    by_gpu = {}
    for gpu in gpus:
        costs = [[o.cost_per_hour_usd for o in p.options if o.gpu == gpu and o.meets_slo] for p in plans]
        by_gpu[gpu] = [min(c) if c else None for c in costs]
    return CostCurves(list(rates_rps), by_gpu, [p.best.cost_per_hour_usd if p.best else None for p in plans],
                      planned_rate_rps)
