"""Sweeps as Ray tasks, load from several workers (processes and Ray actors) sharing one schedule, clocks."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from asgi_server import serve_in_background
from conftest import run_cli, two_slot_scenario
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.summary import SLO
from servebench.errors import ConfigError, WorkerError
from servebench.load.generator import LagStats, LoadConfig, PlannedRequest, WorkerStats, plan_requests
from servebench.load.workers import (
    ClockOffset,
    WorkerRun,
    clock_offset,
    clock_warnings,
    merge_runs,
    partition,
    run_with_processes,
)
from servebench.serving.sweep import sweep

pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def local_ray() -> Iterator[object]:
    """A local Ray with 2 CPUs for this module, shut down (and its temporary directory removed) at the end."""
    pytest.importorskip("ray")
    from servebench.load.ray_runner import ray_session

    with ray_session(None, num_cpus=2) as cluster:
        yield cluster
    import ray
    assert not ray.is_initialized()


class Counting:
    """What the test server saw: every prompt it answered."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.prompts: list[str] = []


def streaming_app(seen: Counting) -> FastAPI:
    """An OpenAI-style server that streams max_tokens one-token chunks and counts what it answered."""
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": "tiny", "object": "model"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        with seen.lock:
            seen.prompts.append(body["prompt"])
        n = int(body["max_tokens"])

        async def events() -> Iterator[str]:
            for _ in range(n):
                yield 'data: {"choices": [{"index": 0, "text": " x"}]}\n\n'
            usage = {"prompt_tokens": len(body["prompt"].split()), "completion_tokens": n}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")
    return app


def make_plan(n: int, rate: float = 40.0) -> list[PlannedRequest]:
    return plan_requests(np.arange(n) / rate, [4] * n, [3] * n, np.random.default_rng(5))


def check_conserved(result: object, plan: list[PlannedRequest], workers: int, seen: Counting) -> None:
    """Every planned request is one record from exactly one worker; the server answered each once."""
    ids = [o.request_id for o in result.outcomes]
    assert sorted(ids) == sorted(r.request_id for r in plan) and len(set(ids)) == len(plan)
    assert Counter(seen.prompts) == Counter(r.prompt for r in plan)
    assert all(o.status == "success" for o in result.outcomes)
    parts = partition(plan, workers)
    for o in result.outcomes:  # the worker that sent it is the one its part went to
        assert o.request_id in {r.request_id for r in parts[o.worker]}
    stats = result.stats
    assert stats.planned == stats.offered == stats.sent == len(plan) and stats.not_sent_duration_limit == 0
    assert [w.worker for w in stats.workers] == list(range(workers))
    assert [w.planned for w in stats.workers] == [len(p) for p in parts]
    assert sum(w.sent for w in stats.workers) == len(plan)
    for w in stats.workers:  # one machine, one CLOCK_MONOTONIC: the true offset is 0, within the uncertainty
        assert abs(w.clock_offset_s) <= w.clock_uncertainty_s + 1e-9
        assert abs(w.clock_offset_end_s) <= w.clock_uncertainty_end_s + 1e-9
        assert w.schedule_lag_s.n == w.sent
    assert stats.schedule_lag_s.n == len(plan)
    # records keep their intended (common) start times: merged arrivals are the plan's
    assert sorted(o.intended_s for o in result.outcomes) == [r.intended_s for r in plan]


# --------------------------------------------------------------------------- the default path


def test_the_default_path_never_imports_ray(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import servebench, servebench.load.workers\n"
        "from servebench.cli.core import main\n"
        "try:\n"
        f"    main(['sweep', {str(ROOT / 'sample_data/scenarios/profile_b.yaml')!r}, '--rates', '0.5', "
        f"'--requests', '30', '--seeds', '2', '--no-search', '--json', '-o', {str(tmp_path)!r}])\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        "print('ray' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
    assert json.loads((tmp_path / "sweep.json").read_text())["spread"]["seeds"] == [6, 7]  # profile_b's seed, next


# --------------------------------------------------------------------------- seeds


def test_seeds_repeat_the_sweep_and_report_the_range_of_points_and_capacity() -> None:
    sc = two_slot_scenario("tiny", 11, 120)
    loads = [1.0, 2.0, 3.0]
    slo = SLO(ttft_s=1.0)
    result = sweep(sc, loads, slo=slo, seeds=3, tolerance=0.1)
    singles = [sweep(sc.model_copy(update={"seed": s}), loads, slo=slo, tolerance=0.1) for s in (11, 12, 13)]
    spread = result.spread
    assert spread is not None and spread.seeds == [11, 12, 13]
    # the first seed's sweep is the result itself, unchanged by the other seeds
    assert result.points == singles[0].points and result.capacity == singles[0].capacity
    assert spread.capacity_by_seed == [s.capacity.load for s in singles]
    caps = [c for c in spread.capacity_by_seed if c is not None]
    assert spread.capacity.max == max(caps) and spread.capacity.n == len(caps)
    assert spread.capacity.min == (min(caps) if len(caps) == 3 else None)
    assert len(set(spread.capacity_by_seed)) > 1  # different draws, different capacities: hence an interval
    assert [p.load for p in spread.points] == loads
    for i, p in enumerate(spread.points):
        at = [s.points[[q.load for q in s.points].index(loads[i])] for s in singles]
        assert p.seeds_meeting_slo == sum(q.meets_slo for q in at)
        assert (p.slo_attainment.min, p.slo_attainment.max) == (min(q.slo_attainment for q in at),
                                                                 max(q.slo_attainment for q in at))
        assert p.latency_p95_s.max == max(q.latency_s["p95"] for q in at)
    assert sweep(sc, loads, slo=slo, tolerance=0.1).spread is None


def test_zero_seeds_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="at least one seed"):
        sweep(two_slot_scenario("tiny", 11, 120), [1.0], seeds=0)
    code, _, err = run_cli(capsys, "sweep", str(ROOT / "sample_data/scenarios/profile_b.yaml"), "--seeds", "0",
                           "-o", str(tmp_path))
    assert code == 2 and "--seeds" in err


# --------------------------------------------------------------------------- Ray sweeps


def test_a_ray_sweep_equals_the_serial_sweep_field_for_field(local_ray: object) -> None:
    from servebench.load.ray_runner import RayRunner

    sc = two_slot_scenario("tiny", 11, 120)
    calls: list[tuple[int, int]] = []
    kwargs = dict(slo=SLO(ttft_s=1.0), seeds=2, tolerance=0.1)
    on_ray = sweep(sc, [1.0, 2.0, 3.0], runner=RayRunner(), progress=lambda d, t, p: calls.append((d, t)), **kwargs)
    serial = sweep(sc, [1.0, 2.0, 3.0], **kwargs)
    assert on_ray.model_dump() == serial.model_dump()
    assert on_ray.capacity.evaluations > 0 and on_ray.spread is not None
    # progress came point by point as tasks finished, and ended complete
    done = [d for d, _ in calls]
    assert done[:6] == list(range(1, 7)) and calls[-1][0] == calls[-1][1]


def test_sweep_ray_command_writes_what_the_serial_command_writes(local_ray: object, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    scenario = str(ROOT / "sample_data/scenarios/profile_b.yaml")
    args = ["--rates", "0.5,1", "--requests", "60", "--slo-ttft", "5", "--seeds", "2", "--json"]
    code, out, err = run_cli(capsys, "sweep", scenario, *args, "-o", str(tmp_path / "serial"))
    assert code == 0, err
    serial = json.loads(out)
    code, out, err = run_cli(capsys, "sweep", scenario, *args, "--ray", "-o", str(tmp_path / "ray"))
    assert code == 0, err
    on_ray = json.loads(out)
    assert {k: v for k, v in on_ray.items() if k != "files"} == {k: v for k, v in serial.items() if k != "files"}
    assert (tmp_path / "ray" / "sweep.csv").read_text() == (tmp_path / "serial" / "sweep.csv").read_text()
    assert serial["spread"]["seeds"] == [6, 7] and len(serial["points"]) >= 2


def test_an_error_inside_a_ray_task_is_servebench_s_own_one_line(local_ray: object) -> None:
    from servebench.load.ray_runner import RayRunner
    from servebench.serving.sweep import PointTask, SweepJob

    job = SweepJob(two_slot_scenario("tiny", 11, 120), "users", SLO(), 0.95, 10)
    with pytest.raises(ConfigError, match="whole number of users"):
        list(RayRunner().run(job, [PointTask(1.5, 11)]))


# --------------------------------------------------------------------------- the schedule and the clocks


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 60), workers=st.integers(1, 8))
def test_dealing_the_plan_keeps_every_arrival_once_and_in_order(n: int, workers: int) -> None:
    plan = [PlannedRequest(f"r{i}", i * 0.1, "x", 1, 1) for i in range(n)]
    if workers > n:
        with pytest.raises(ConfigError, match="more workers"):
            partition(plan, workers)
        return
    parts = partition(plan, workers)
    merged = sorted((r for p in parts for r in p), key=lambda r: r.intended_s)
    assert merged == plan
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert all([r.intended_s for r in p] == sorted(r.intended_s for r in p) for p in parts)


@settings(max_examples=40, deadline=None)
@given(offset=st.floats(-1e6, 1e6), delays=st.lists(st.tuples(st.floats(0, 0.01), st.floats(0, 0.01)),
                                                      min_size=1, max_size=8))
def test_the_clock_offset_is_within_half_the_best_round_trip(offset: float, delays: list[tuple[float, float]]) -> None:
    """A worker clock = ours - offset, read after an outbound delay and before a return delay."""
    t = [100.0]
    pings = iter(delays)
    current: list[tuple[float, float]] = []

    def now() -> float:
        return t[0]

    def ping() -> float:
        out, back = next(pings)
        current[:] = [(out, back)]
        t[0] += out
        reading = t[0] - offset
        t[0] += back
        return reading

    got = clock_offset(ping, now, pings=len(delays))
    assert got.uncertainty_s == pytest.approx(min(a + b for a, b in delays) / 2, abs=1e-9)
    assert abs(got.offset_s - offset) <= got.uncertainty_s + 1e-6 * max(1.0, abs(offset))


def _worker_stats(drift_s: float, uncertainty_s: float = 0.001, late_s: float = 0.0) -> WorkerStats:
    lag = LagStats(n=1, p50_s=0.001, p99_s=0.001, max_s=0.001, mean_s=0.001)
    return WorkerStats(worker=1, host="h", pid=1, planned=1, offered=1, sent=1, completed=1, peak_in_flight=1,
                       waited_for_slot=0, schedule_lag_s=lag, start_late_s=late_s, clock_offset_s=5.0,
                       clock_uncertainty_s=uncertainty_s, clock_offset_end_s=5.0 + drift_s,
                       clock_uncertainty_end_s=uncertainty_s, clock_drift_s=drift_s)


def test_drift_beyond_the_pings_and_late_starts_are_warned() -> None:
    assert clock_warnings([_worker_stats(0.0015)]) == []
    drift = clock_warnings([_worker_stats(-0.003)])
    assert len(drift) == 1 and "worker 1 (h)" in drift[0] and "-0.003 s" in drift[0] and "0.002 s" in drift[0]
    coarse = clock_warnings([_worker_stats(0.0, uncertainty_s=0.05)])
    assert len(coarse) == 1 and "within 0.05 s" in coarse[0]
    assert "1 by 0.2 s" in clock_warnings([_worker_stats(0.0, late_s=0.2)])[0]


def test_a_failed_worker_fails_the_run_by_name() -> None:
    run = WorkerRun(worker=1, host="h", pid=9, planned=1, outcomes=[], peak_in_flight=0, waited_for_slot=0,
                    start_late_s=0.0, started_utc="", error="LoadError: cannot reach")
    zero = ClockOffset(0.0, 0.0)
    with pytest.raises(WorkerError, match=r"worker 1 \(h\) failed: LoadError: cannot reach"):
        merge_runs(LoadConfig(url="http://127.0.0.1:1"), 1, [run], [zero], [zero], "m")


# --------------------------------------------------------------------------- load from several workers


def test_two_worker_processes_share_one_schedule_and_conserve_every_request() -> None:
    seen = Counting()
    plan = make_plan(40)
    with serve_in_background(streaming_app(seen)) as url:
        result = run_with_processes(LoadConfig(url=url, deadline_s=20), plan, 2, "tiny")
    check_conserved(result, plan, 2, seen)
    assert len({w.pid for w in result.stats.workers}) == 2
    assert result.stats.max_in_flight == 2 * 256


def test_two_ray_actors_share_one_schedule_and_conserve_every_request(local_ray: object) -> None:
    from servebench.load.ray_runner import run_with_actors

    seen = Counting()
    plan = make_plan(30)
    with serve_in_background(streaming_app(seen)) as url:
        result = run_with_actors(LoadConfig(url=url, deadline_s=20), plan, 2, "tiny", local_ray)
    check_conserved(result, plan, 2, seen)
    with pytest.raises(ConfigError, match="has 2 CPUs"):
        run_with_actors(LoadConfig(url="http://127.0.0.1:1"), plan, 3, "tiny", local_ray)


def test_load_command_with_workers_writes_records_that_name_their_worker(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    seen = Counting()
    out = tmp_path / "run"
    with serve_in_background(streaming_app(seen)) as url:
        code, out_text, err = run_cli(capsys, "load", url, "--rate", "40", "--requests", "24", "--output-tokens", "3",
                                      "--workers", "2", "--json", "-o", str(out))
    assert code == 0, err
    doc = json.loads(out_text)
    gen = doc["generator"]
    assert gen["planned"] == gen["offered"] == 24 and len(seen.prompts) == 24
    assert [w["worker"] for w in gen["workers"]] == [0, 1] and [w["planned"] for w in gen["workers"]] == [12, 12]
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    sends = [json.loads(line) for line in (out / "sends.jsonl").read_text().splitlines()]
    assert len(records) == 24 and Counter(r["worker"] for r in records) == {0: 12, 1: 12}
    assert [s["worker"] for s in sends] == [r["worker"] for r in records]
    meta = json.loads((out / "metadata.json").read_text())
    assert "clock_uncertainty_s" in meta["clock"] and len(meta["generator"]["workers"]) == 2
    # the records read back as a record set, and the worker column splits the report
    code, out_text, err = run_cli(capsys, "summarize", str(out), "--slice-by", "worker", "--json")
    assert code == 0, err
    summary = json.loads(out_text)
    assert summary["extra_columns"] == ["worker"] and summary["offered"] == 24


def test_workers_refuse_a_closed_loop_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "load", "http://127.0.0.1:9", "--users", "2", "--workers", "2", "-o",
                           str(tmp_path))
    assert code == 2
    assert err.startswith("error: --workers and --ray share one open-loop schedule") and err.count("\n") == 1
