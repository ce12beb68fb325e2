"""A measured sweep: one open-loop load run per rate against a real endpoint, read as the simulator's sweep is.

``servebench load --sweep`` parses its options, then calls :func:`measured_sweep` with a function that runs
one rate (the CLI's, which shows progress); everything else happens here: the grid, the capacity search
(the simulator's own bisection, :func:`servebench.serving.sweep.search_capacity`), the knee, and the sweep
folder (``sweep.json``, ``sweep.csv``, ``metadata.json`` and one run folder per rate, through
:mod:`servebench.records.rundir`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.analysis.summary import SLO
from servebench.load.generator import LoadResult, measured_point
from servebench.records import rundir
from servebench.serving.sweep import SweepPoint, SweepResult, capacity_from_grid, knee, search_capacity, sweep_csv
from servebench.serving.workload import WorkloadSpec

SEARCH_TOLERANCE = 0.05  # bisection stops when the bracket is within 5% of the load, as the simulator's sweep does
MAX_SEARCH_RUNS = 4  # extra measured runs the search may add (each is a whole load run against the endpoint)
NOT_OBSERVED = ("peak_active, mean_active, peak_waiting, max_kv_tokens_used, preemptions and kv_budget_tokens "
                "are server-side; a client cannot measure them (null)")

RunRate = Callable[[float, WorkloadSpec, Path], LoadResult]  # (rate, the workload at it, its run folder) -> run


@dataclass(frozen=True)
class MeasuredSweep:
    """A measured sweep as written: the result, the model served, each rate's run folder (by ``f"{rate:g}"``)
    and the files by role (``sweep``, ``csv``, ``metadata``)."""

    result: SweepResult
    model: str | None
    runs: dict[str, str]
    files: dict[str, Path]


def measured_sweep(url: str, rates: Sequence[float], base: WorkloadSpec, out: Path, run_rate: RunRate, *,
                   seed: int, slo: SLO, slo_target: float, search: bool) -> MeasuredSweep:
    """Run one open-loop load per rate into ``out``'s ``rate_<r>`` folders, find the capacity, write the sweep.

    ``rates`` are the grid in increasing order; ``base`` the workload (its rate is replaced by each one);
    ``run_rate`` sends one run and writes its run folder. With ``search`` the capacity is bisected between
    grid points with at most :data:`MAX_SEARCH_RUNS` extra runs, else read off the grid. Points whose rate
    was run once are never run again.
    """
    points: dict[float, SweepPoint] = {}
    runs: dict[str, str] = {}
    models: list[str] = []

    def run(rate: float, source: str) -> SweepPoint:
        if rate in points:
            return points[rate]
        folder = rundir.rate_folder(out, rate)
        result = run_rate(rate, base.with_rate(rate), folder)
        models.append(result.model)
        point = measured_point(result.outcomes, rate, slo, slo_target)
        point.source = source
        points[rate] = point
        runs[f"{rate:g}"] = str(folder)
        return point

    for r in rates:
        run(r, "grid")
    capacity = search_capacity(run, list(rates), points, "rate", SEARCH_TOLERANCE, MAX_SEARCH_RUNS) if search \
        else capacity_from_grid(list(rates), points)
    ordered = [points[k] for k in sorted(points)]
    model = models[-1] if models else None
    result = SweepResult(
        scenario=f"measured {model} at {url}", mode="rate", seed=seed, requests_per_point=base.num_requests, slo=slo,
        slo_target=slo_target, points=ordered, capacity=capacity, knee_load=knee(ordered), kv_budget_tokens=None)
    metadata: dict[str, Any] = {
        "kind": "servebench load --sweep", "endpoint": url, "model": model, "rates": list(rates),
        "workload": base.model_dump(mode="json", exclude_none=True), "seed": seed, "runs": runs,
        "not_observed": NOT_OBSERVED,
    }
    files = rundir.write_sweep(out, result, sweep_csv(result), metadata=metadata)
    return MeasuredSweep(result=result, model=model, runs=runs, files=files)
