"""The measured sweep as a library function (servebench.load.sweep): grid, capacity search and the sweep folder,
with a stand-in for the endpoint whose latency grows with the rate."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from servebench.analysis.summary import SLO
from servebench.load.client import HttpOutcome
from servebench.load.sweep import MAX_SEARCH_RUNS, NOT_OBSERVED, measured_sweep
from servebench.records.rundir import METADATA, SWEEP, SWEEP_CSV
from servebench.serving.workload import ArrivalSpec, ClassSpec, LengthSpec, WorkloadSpec

REQUESTS = 20
URL = "http://127.0.0.1:9"


def _latency_s(rate: float) -> float:
    return 0.1 + 0.05 * rate  # meets a 0.25 s latency SLO up to 3 requests/s


class FakeEndpoint:
    """Answer every request of a run at once, with a latency set by the run's rate; remember the runs asked for."""

    def __init__(self) -> None:
        self.calls: list[tuple[float, float | None, Path]] = []

    def __call__(self, rate: float, spec: WorkloadSpec, folder: Path) -> SimpleNamespace:
        self.calls.append((rate, spec.arrival.rate_rps if spec.arrival else None, folder))
        folder.mkdir(parents=True)  # a real run writes its run folder; a second run of one rate would fail here
        lat = _latency_s(rate)
        outcomes = [HttpOutcome(request_id=f"r{i}", intended_s=i / rate, status="success", sent_s=i / rate,
                                first_token_s=i / rate + lat / 2, end_s=i / rate + lat, prompt_tokens=8,
                                output_tokens=4) for i in range(spec.num_requests or 0)]
        return SimpleNamespace(outcomes=outcomes, model="fake-model")


@pytest.fixture
def base() -> WorkloadSpec:
    fixed = ClassSpec(prompt=LengthSpec(kind="fixed", value=8), output=LengthSpec(kind="fixed", value=4))
    return WorkloadSpec(arrival=ArrivalSpec(kind="poisson", rate_rps=1.0), classes=[fixed], num_requests=REQUESTS)


def test_grid_only_runs_each_rate_once_and_writes_the_sweep_folder(tmp_path: Path, base: WorkloadSpec) -> None:
    endpoint = FakeEndpoint()
    out = tmp_path / "sweep"
    swept = measured_sweep(URL, [1.0, 2.0, 4.0, 8.0], base, out, endpoint, seed=3, slo=SLO(latency_s=0.25),
                           slo_target=0.95, search=False)
    assert [(r, spec_rate) for r, spec_rate, _ in endpoint.calls] == [(1.0, 1.0), (2.0, 2.0), (4.0, 4.0), (8.0, 8.0)]
    assert [folder for *_, folder in endpoint.calls] == [out / "rate_1", out / "rate_2", out / "rate_4", out / "rate_8"]
    result = swept.result
    assert [p.load for p in result.points] == [1.0, 2.0, 4.0, 8.0]
    assert [p.meets_slo for p in result.points] == [True, True, False, False]
    assert result.capacity.load == 2.0 and result.capacity.upper == 4.0 and result.capacity.evaluations == 0
    assert result.scenario == f"measured fake-model at {URL}" and result.requests_per_point == REQUESTS
    assert result.seed == 3 and result.mode == "rate" and result.kv_budget_tokens is None
    assert swept.model == "fake-model"
    assert swept.runs == {"1": str(out / "rate_1"), "2": str(out / "rate_2"), "4": str(out / "rate_4"),
                          "8": str(out / "rate_8")}
    assert swept.files == {"sweep": out / SWEEP, "csv": out / SWEEP_CSV, "metadata": out / METADATA}
    assert json.loads((out / SWEEP).read_text()) == json.loads(result.model_dump_json())
    meta = json.loads((out / METADATA).read_text())
    assert meta == {"kind": "servebench load --sweep", "endpoint": URL, "model": "fake-model",
                    "rates": [1.0, 2.0, 4.0, 8.0], "workload": base.model_dump(mode="json", exclude_none=True),
                    "seed": 3, "runs": swept.runs, "not_observed": NOT_OBSERVED}


def test_search_adds_at_most_its_runs_between_the_grid_points_and_marks_them(tmp_path: Path,
                                                                            base: WorkloadSpec) -> None:
    endpoint = FakeEndpoint()
    swept = measured_sweep(URL, [1.0, 2.0, 4.0, 8.0], base, tmp_path / "out", endpoint, seed=0,
                           slo=SLO(latency_s=0.25), slo_target=0.95, search=True)
    rates = [r for r, _, _ in endpoint.calls]
    assert rates[:4] == [1.0, 2.0, 4.0, 8.0] and len(set(rates)) == len(rates)
    searched = rates[4:]
    assert 1 <= len(searched) <= MAX_SEARCH_RUNS and all(2.0 < r < 4.0 for r in searched)
    cap = swept.result.capacity
    assert 2.0 <= cap.load <= 3.0 < cap.upper <= 4.0  # the stand-in meets the SLO up to 3 requests/s
    by_load = {p.load: p for p in swept.result.points}
    assert sorted(by_load) == sorted(rates) and [p.load for p in swept.result.points] == sorted(rates)
    assert {r for r, p in by_load.items() if p.source == "search"} == set(searched)
    assert set(swept.runs) == {f"{r:g}" for r in rates}
