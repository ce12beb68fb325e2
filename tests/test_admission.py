"""Tests for the scheduler's admission controls: shedding by queue wait, per-tenant caps, fair scheduling."""

from __future__ import annotations

import pytest
from accounting import check_accounting
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from servebench.serving.scheduler import (
    ERR_DEADLINE,
    ERR_QUEUE_WAIT,
    AdmissionSpec,
    Outcome,
    Request,
    Scheduler,
    SchedulerConfig,
    TenantLimit,
)


def drive(sched: Scheduler, arrivals: list[Request], dt: float = 1.0, max_steps: int = 10_000,
          check: bool = True) -> list[Outcome]:
    """Feed arrivals at their times and step with a fixed step time until idle; check invariants each step."""
    pending = sorted(arrivals, key=lambda r: r.arrival_s)
    out: list[Outcome] = []
    t = 0.0
    for _ in range(max_steps):
        while pending and pending[0].arrival_s <= t:
            r = pending.pop(0)
            o = sched.add_request(r, t)
            if o is not None:
                out.append(o)
        out += sched.expire(t)
        if not sched.has_work and not pending:
            break
        plan = sched.step(t)
        out += plan.ended
        if check:
            check_accounting(sched)
        t += dt
        out += sched.on_step_done(plan, t)
    return out


def req(rid: str, arrival: float = 0.0, prompt: int = 10, out: int = 5, tenant: str | None = None,
        **kw: object) -> Request:
    return Request(rid, arrival, prompt, out, output_tokens=out, tenant=tenant, **kw)  # type: ignore[arg-type]


def test_shedding_removes_a_request_waiting_past_the_limit() -> None:
    # one seat: r0 runs 0..5, r1 waits; shedding at 2 s ends it as rejected at arrival + 2 with its seat freed
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100, max_num_seqs=1, admission=AdmissionSpec(max_queue_wait_s=2.0),
                                  timeout_s=30))
    outs = {o.request_id: o for o in drive(s, [req("r0"), req("r1", arrival=0.5)], dt=1.0)}
    assert outs["r0"].status == "success"
    r1 = outs["r1"]
    assert (r1.status, r1.error, r1.admitted, r1.output_tokens) == ("rejected", ERR_QUEUE_WAIT, None, 0)
    assert r1.end == pytest.approx(3.0)  # the first expire at or after 0.5 + 2


def test_without_shedding_the_same_request_times_out_after_holding_its_slot() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100, max_num_seqs=1, timeout_s=3.0))
    outs = {o.request_id: o for o in drive(s, [req("r0", out=8), req("r1", arrival=0.5)], dt=1.0)}
    assert (outs["r1"].status, outs["r1"].error) == ("timeout", ERR_DEADLINE)


def test_next_deadline_includes_the_shedding_time() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100, admission=AdmissionSpec(max_queue_wait_s=2.0), timeout_s=10.0))
    s.add_request(req("a", arrival=1.0), 1.0)
    assert s.next_deadline() == 3.0
    s.on_step_done(s.step(1.5), 2.0)  # admitted: no longer sheddable
    assert s.next_deadline() == 11.0


def test_a_client_deadline_names_its_own_error() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100, max_num_seqs=1))
    s.add_request(req("a", out=50), 0.0)
    s.add_request(req("b", timeout_s=2.0, deadline_error="client_deadline"), 0.0)
    outs = {o.request_id: o for o in drive(s, [], dt=1.0)}
    assert (outs["b"].status, outs["b"].error) == ("timeout", "client_deadline")


def test_a_capped_tenant_does_not_hold_back_the_others() -> None:
    cfg = SchedulerConfig(kv_budget_tokens=1000, max_num_seqs=8, tenants={"heavy": TenantLimit(max_running=2)})
    s = Scheduler(cfg)
    for i in range(5):
        s.add_request(req(f"h{i}", tenant="heavy"), 0.0)
    s.add_request(req("l0", tenant="light"), 0.0)
    plan = s.step(0.0)
    assert plan.admitted == ["h0", "h1", "l0"]
    assert s.tenant_running("heavy") == 2 and s.num_waiting == 3


def test_fair_serves_a_light_tenant_before_a_heavy_backlog() -> None:
    cfg = SchedulerConfig(kv_budget_tokens=1000, max_num_seqs=1, scheduling="fair")
    s = Scheduler(cfg)
    for i in range(4):
        s.add_request(req(f"h{i}", tenant="heavy"), 0.0)
    s.add_request(req("l0", tenant="light", arrival=0.5), 0.5)
    order = [o.request_id for o in drive(s, [], dt=1.0)]
    assert order.index("l0") == 1  # after the heavy request already running, ahead of h1..h3
    fcfs = Scheduler(SchedulerConfig(kv_budget_tokens=1000, max_num_seqs=1))
    for i in range(4):
        fcfs.add_request(req(f"h{i}", tenant="heavy"), 0.0)
    fcfs.add_request(req("l0", tenant="light", arrival=0.5), 0.5)
    assert [o.request_id for o in drive(fcfs, [], dt=1.0)][-1] == "l0"


def test_fair_shares_follow_weights_over_a_backlog() -> None:
    cfg = SchedulerConfig(kv_budget_tokens=10_000, max_num_seqs=1, scheduling="fair",
                          tenants={"a": TenantLimit(weight=3.0), "b": TenantLimit(weight=1.0)})
    s = Scheduler(cfg)
    for i in range(40):
        s.add_request(req(f"a{i}", tenant="a", out=1), 0.0)
        s.add_request(req(f"b{i}", tenant="b", out=1), 0.0)
    first = [o.request_id[0] for o in drive(s, [], dt=1.0)][:20]
    assert first.count("a") == 15 and first.count("b") == 5


def test_an_idle_tenant_banks_no_credit() -> None:
    cfg = SchedulerConfig(kv_budget_tokens=10_000, max_num_seqs=1, scheduling="fair")
    s = Scheduler(cfg)
    for i in range(10):
        s.add_request(req(f"a{i}", tenant="a", out=1), 0.0)
    drive(s, [], dt=1.0)  # a is charged 10 requests; b was idle all along
    arrivals = [req(f"a{i}", tenant="a", out=1, arrival=20.0) for i in range(10, 16)]
    arrivals += [req(f"b{i}", tenant="b", out=1, arrival=20.0) for i in range(6)]
    s2_order = [o.request_id[0] for o in drive(s, arrivals, dt=1.0)]
    assert s2_order[:6] == list("ababab")  # b, new, starts level with a instead of taking six turns in a row


def test_bad_admission_config_raises() -> None:
    with pytest.raises(ValidationError, match="max_queue_wait_s"):
        SchedulerConfig(kv_budget_tokens=10, admission={"max_queue_wait_s": 0})
    with pytest.raises(ValidationError, match="scheduling"):
        SchedulerConfig(kv_budget_tokens=10, scheduling="lottery")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="max_running"):
        TenantLimit(max_running=0)
    with pytest.raises(ValidationError, match="weight"):
        TenantLimit(weight=0)
    with pytest.raises(ValidationError, match="weight"):
        SchedulerConfig(kv_budget_tokens=10, tenants={"a": {"weight": float("inf")}})


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 12), st.integers(1, 30),
                          st.integers(1, 12)), min_size=1, max_size=40),
       st.sampled_from(["reserve", "paged"]), st.sampled_from(["fcfs", "fair"]),
       st.sampled_from([None, 1.5, 4.0]), st.integers(1, 3), st.sampled_from([None, 3]))
def test_tenant_caps_hold_and_every_request_ends_once(
        reqs: list[tuple[str | None, int, int, int]], policy: str, scheduling: str, wait_s: float | None,
        cap_a: int, max_waiting: int | None) -> None:
    cfg = SchedulerConfig(kv_budget_tokens=96, policy=policy, block_size_tokens=8, max_num_seqs=4,  # type: ignore[arg-type]
                          scheduling=scheduling, max_waiting=max_waiting,  # type: ignore[arg-type]
                          admission=None if wait_s is None else AdmissionSpec(max_queue_wait_s=wait_s),
                          tenants={"a": TenantLimit(max_running=cap_a, weight=2.0), "b": TenantLimit(max_running=1)})
    s = Scheduler(cfg)
    arrivals = [req(str(i), arrival=float(t) / 2, prompt=p, out=o, tenant=tenant)
                for i, (tenant, t, p, o) in enumerate(reqs)]
    outs = drive(s, arrivals, dt=0.5)  # check_accounting each step: caps hold, counts agree, KV within budget
    assert sorted(o.request_id for o in outs) == sorted(r.request_id for r in arrivals)
    for o in outs:
        if o.error == ERR_QUEUE_WAIT:
            assert wait_s is not None and o.admitted is None and o.end - o.start >= wait_s
