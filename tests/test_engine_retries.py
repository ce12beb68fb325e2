"""Retrying clients, shedding and tenant caps in a real engine run (tiny model on the CPU)."""

from __future__ import annotations

from collections import defaultdict

import pytest

torch = pytest.importorskip("torch")

from servebench.records.schema import parse_objects  # noqa: E402
from servebench.records.table import validate  # noqa: E402
from servebench.serving.engine.model import Decoder, preset  # noqa: E402
from servebench.serving.engine.runner import run_workload  # noqa: E402
from servebench.serving.retry import BackoffSpec, ClientSpec  # noqa: E402
from servebench.serving.scheduler import AdmissionSpec, SchedulerConfig, TenantLimit  # noqa: E402
from servebench.serving.workload import ArrivalSpec, ClassSpec, LengthSpec, WorkloadSpec  # noqa: E402

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def model() -> Decoder:
    return Decoder(preset("tiny"), seed=7)


def burst(n: int, classes: list[ClassSpec] | None = None) -> WorkloadSpec:
    return WorkloadSpec(arrival=ArrivalSpec(kind="constant", rate_rps=1000.0), num_requests=n, classes=classes or [
        ClassSpec(name="chat", prompt=LengthSpec(kind="fixed", value=16), output=LengthSpec(kind="fixed", value=20))])


def test_engine_attempts_are_records_that_never_overlap_or_pass_the_deadline(model: Decoder) -> None:
    cfg = SchedulerConfig(kv_budget_tokens=4096, max_num_seqs=1, max_waiting=1)  # a burst mostly bounces
    client = ClientSpec(max_attempts=3, deadline_s=30.0, backoff=BackoffSpec(base_s=0.01, max_s=0.05))
    run = run_workload(model, cfg, burst(8), seed=2, warmup_steps=0, client=client)
    recs = run.records
    validate(parse_objects(recs, "run", strict_keys=True), 0.0, max(r["end"] for r in recs) + 1)
    by: dict[str, list[dict]] = defaultdict(list)
    for r in recs:
        by[r["logical_id"]].append(r)
    assert len(by) == 8 and len({r["request_id"] for r in recs}) == len(recs)
    assert len(recs) > 8  # rejected attempts came back: amplification above 1
    for rows in by.values():
        rows.sort(key=lambda r: r["attempt"])
        assert [r["attempt"] for r in rows] == list(range(1, len(rows) + 1))
        for a, b in zip(rows, rows[1:]):
            assert a["status"] != "success" and b["start"] >= a["end"]
        assert all(r["start"] < rows[0]["start"] + 30.0 for r in rows)


def test_engine_tenant_cap_and_shedding(model: Decoder) -> None:
    classes = [ClassSpec(tenant="batch", weight=3, prompt=LengthSpec(kind="fixed", value=16),
                         output=LengthSpec(kind="fixed", value=30)),
               ClassSpec(tenant="chat", prompt=LengthSpec(kind="fixed", value=16), output=LengthSpec(kind="fixed", value=5))]
    cfg = SchedulerConfig(kv_budget_tokens=4096, max_num_seqs=4, scheduling="fair", admission=AdmissionSpec(max_queue_wait_s=30.0),
                          tenants={"batch": TenantLimit(max_running=2)})
    recs = run_workload(model, cfg, burst(16, classes), seed=4, warmup_steps=0).records
    assert {r["slice"] for r in recs} == {"batch", "chat"}
    spans = sorted((r["admitted"], 1) for r in recs if r["slice"] == "batch" and "admitted" in r)
    spans += sorted((r["end"], -1) for r in recs if r["slice"] == "batch" and "admitted" in r)
    running = peak = 0
    for _, d in sorted(spans, key=lambda x: (x[0], x[1])):
        running += d
        peak = max(peak, running)
    assert peak <= 2


def test_the_time_limit_note_counts_user_requests_never_sent_not_attempts(model: Decoder) -> None:
    import re
    cfg = SchedulerConfig(kv_budget_tokens=4096, max_num_seqs=1, max_waiting=1)  # most attempts bounce and retry
    client = ClientSpec(max_attempts=5, backoff=BackoffSpec(base_s=0.005, jitter="none"))
    workload = WorkloadSpec(arrival=ArrivalSpec(kind="constant", rate_rps=20.0), num_requests=40, classes=[
        ClassSpec(prompt=LengthSpec(kind="fixed", value=16), output=LengthSpec(kind="fixed", value=200))])
    run = run_workload(model, cfg, workload, seed=3, warmup_steps=0, max_wall_s=0.5, client=client)
    first_attempts = sum(r["attempt"] == 1 for r in run.records)
    assert len(run.records) > first_attempts  # retries were sent, so attempts and user requests differ
    match = re.search(r"(\d+) requests never sent", " ".join(run.notes))
    assert match is not None and int(match.group(1)) == 40 - first_attempts
