"""Tests for the pure scheduler: admission, chunked prefill, KV policies, preemption, exits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from servebench.errors import ConfigError
from servebench.records.schema import parse_objects
from servebench.records.table import validate
from servebench.serving.scheduler import (
    ERR_CANCELLED,
    ERR_DEADLINE,
    ERR_PREEMPTED_QUEUE_FULL,
    ERR_QUEUE_FULL,
    ERR_TOO_LARGE,
    Outcome,
    Request,
    Scheduler,
    SchedulerConfig,
)


def run(sched: Scheduler, dt: float = 0.1, t: float = 0.0, max_steps: int = 10_000) -> tuple[list[Outcome], float]:
    """Step the scheduler with a fixed step time until it is idle."""
    out: list[Outcome] = []
    for _ in range(max_steps):
        if not sched.has_work:
            break
        plan = sched.step(t)
        out += plan.ended
        t += dt
        out += sched.on_step_done(plan, t)
        out += sched.expire(t)
    return out, t


def req(rid: str, prompt: int = 10, out: int = 5, arrival: float = 0.0, **kw: object) -> Request:
    return Request(rid, arrival, prompt, kw.pop("cap", out), output_tokens=out, **kw)  # type: ignore[arg-type]


def test_single_request_timing() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100))
    assert s.add_request(req("a", prompt=10, out=3), 0.0) is None
    (o,), t = run(s, dt=1.0)
    assert (o.status, o.admitted, o.first_token, o.end, o.output_tokens) == ("success", 0.0, 1.0, 3.0, 3)
    assert s.kv_tokens_used == 0 and s.kv_tokens_held == 0


def test_held_tokens_follow_compute_not_reservation() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100))
    s.add_request(req("a", prompt=10, out=5), 0.0)
    p = s.step(0.0)
    assert (s.kv_tokens_used, s.kv_tokens_held) == (15, 0)
    s.on_step_done(p, 1.0)
    assert s.kv_tokens_held == 10  # the prompt; the first sampled token's KV comes with the next step
    s.on_step_done(s.step(1.0), 2.0)
    assert s.kv_tokens_held == 11


def test_reserve_admits_only_what_fits() -> None:
    # each needs 10 + 5 = 15 tokens; 40 tokens hold two
    s = Scheduler(SchedulerConfig(kv_budget_tokens=40, policy="reserve"))
    for i in range(3):
        s.add_request(req(f"r{i}"), 0.0)
    plan = s.step(0.0)
    assert plan.admitted == ["r0", "r1"]
    assert plan.kv_tokens_used == 30 and plan.waiting == 1


def test_max_num_seqs_limits_running() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=10_000, max_num_seqs=2))
    for i in range(3):
        s.add_request(req(f"r{i}"), 0.0)
    assert s.step(0.0).admitted == ["r0", "r1"]


def test_chunked_prefill_respects_token_budget() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=10_000, max_num_batched_tokens=8))
    s.add_request(req("a", prompt=20, out=2), 0.0)
    chunks = []
    t = 0.0
    while s.has_work:
        plan = s.step(t)
        assert plan.batched_tokens <= 8
        chunks.append(plan.prefill_tokens)
        t += 1
        s.on_step_done(plan, t)
    assert chunks == [8, 8, 4, 0]


def test_whole_prompt_too_long_is_rejected() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=10_000, max_num_batched_tokens=8, chunked_prefill=False))
    o = s.add_request(req("a", prompt=20), 0.0)
    assert o is not None and o.status == "rejected"


def test_full_queue_rejects() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=10_000, max_waiting=2))
    outs = [s.add_request(req(f"r{i}"), 0.0) for i in range(3)]
    assert outs[:2] == [None, None]
    assert outs[2] is not None and (outs[2].status, outs[2].error) == ("rejected", ERR_QUEUE_FULL)
    assert outs[2].admitted is None and outs[2].output_tokens == 0


def test_request_larger_than_budget_is_rejected() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100))
    o = s.add_request(req("big", prompt=99, out=5), 0.0)
    assert o is not None and o.error == ERR_TOO_LARGE


def test_deadline_times_out_and_frees_kv() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100, timeout_s=2.5))
    s.add_request(req("a", out=50), 0.0)
    assert s.next_deadline() == 2.5
    outs, _ = run(s, dt=1.0)
    (o,) = outs
    assert (o.status, o.error, o.end, o.output_tokens) == ("timeout", ERR_DEADLINE, 3.0, 3)
    assert s.kv_tokens_used == 0 and not s.has_work


def test_cancel_frees_kv_and_admits_next() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=20, policy="reserve"))
    s.add_request(req("a"), 0.0)
    s.add_request(req("b"), 0.0)
    plan = s.step(0.0)
    assert plan.admitted == ["a"] and s.kv_tokens_used == 15
    s.on_step_done(plan, 1.0)
    o = s.cancel("a", 1.0)
    assert o is not None and (o.status, o.error, o.output_tokens) == ("cancelled", ERR_CANCELLED, 1)
    assert s.kv_tokens_used == 0
    assert s.step(1.0).admitted == ["b"]
    assert s.cancel("nope", 1.0) is None


def test_cancel_in_flight_is_ignored_on_commit() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100))
    s.add_request(req("a"), 0.0)
    plan = s.step(0.0)
    s.cancel("a", 0.5)
    assert s.on_step_done(plan, 1.0) == []


def test_paged_preempts_newest_and_recomputes() -> None:
    # 4 blocks of 16; two requests of prompt 20 grow past what fits together
    s = Scheduler(SchedulerConfig(kv_budget_tokens=64, policy="paged", max_num_batched_tokens=64))
    s.add_request(req("old", prompt=20, out=30), 0.0)
    s.add_request(req("new", prompt=20, out=30), 0.0)
    t, preempted, used = 0.0, [], []
    outs: list[Outcome] = []
    while s.has_work:
        plan = s.step(t)
        preempted += plan.preempted
        used.append(plan.kv_tokens_used)
        t += 1
        outs += s.on_step_done(plan, t)
    assert preempted and set(preempted) == {"new"}
    assert max(used) <= 64
    by_id = {o.request_id: o for o in outs}
    assert by_id["new"].preemptions >= 1 and by_id["old"].preemptions == 0
    assert all(o.status == "success" and o.output_tokens == 30 for o in outs)
    # the recomputed request kept its first admission and first token
    assert by_id["new"].admitted == 0.0 and by_id["new"].first_token == 1.0


def test_eos_from_caller_finishes() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100))
    s.add_request(Request("a", 0.0, 5, 50), 0.0)
    p1 = s.step(0.0)
    s.on_step_done(p1, 1.0)
    p2 = s.step(1.0)
    (o,) = s.on_step_done(p2, 2.0, finished={"a"})
    assert o.status == "success" and o.output_tokens == 2


def test_decode_run_commits_many_steps() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=1000, policy="paged"))
    s.add_request(req("a", prompt=10, out=40), 0.0)
    s.add_request(req("b", prompt=10, out=20), 0.0)
    s.on_step_done(s.step(0.0), 1.0)
    plan = s.step(1.0)
    k = s.max_decode_steps(plan)
    assert k == 19
    s.extend(plan, k)
    assert plan.kv_tokens_used == 64  # b's 29 computed tokens and a's 29: two blocks each
    (o,) = s.on_step_done(plan, 20.0)
    assert o.request_id == "b" and o.output_tokens == 20
    assert s.kv_tokens_used == 32  # a holds 10 + 20 - 1 computed tokens: two blocks


def test_outcomes_are_valid_records() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=40, max_waiting=1, timeout_s=3.0))
    outs = [s.add_request(req(f"r{i}", out=50), 0.0) for i in range(3)]
    done = [o for o in outs if o is not None]
    more, t = run(s)
    table = validate(parse_objects([o.to_record() for o in done + more]), 0.0, t)
    assert len(table) == 3


def test_bad_config_raises() -> None:
    with pytest.raises(ValidationError, match="policy"):
        SchedulerConfig(kv_budget_tokens=10, policy="lru")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="kv_budget_tokens 10 holds no 16-token block"):
        SchedulerConfig(kv_budget_tokens=10, policy="paged")
    with pytest.raises(ValidationError, match="max_waiting\n  Input should be greater than or equal to 1"):
        SchedulerConfig(kv_budget_tokens=10, max_waiting=0)  # would reject every request
    with pytest.raises(ValidationError, match="max_queue_wait_s"):
        SchedulerConfig(kv_budget_tokens=10, max_queue_wait_s=2.0)  # shedding is admission.max_queue_wait_s


def test_recompute_longer_than_step_budget_is_split_without_chunking() -> None:
    # found by hypothesis: a preempted sequence must recompute prompt + 200 generated tokens, more
    # than max_num_batched_tokens; with chunked prefill off it used to wait forever
    s = Scheduler(SchedulerConfig(kv_budget_tokens=1400, policy="paged", max_num_seqs=3,
                                  max_num_batched_tokens=512, chunked_prefill=False))
    for i, (p, o) in enumerate([(51, 223), (335, 243), (335, 228)]):
        s.add_request(req(f"r{i}", prompt=p, out=o), 0.0)
    outs, _ = run(s, dt=0.03)
    assert sorted(o.request_id for o in outs) == ["r0", "r1", "r2"]
    assert all(o.status == "success" for o in outs) and sum(o.preemptions for o in outs) >= 1


def test_preempted_into_a_full_queue_fails_and_the_bound_holds() -> None:
    # 4 blocks of 16; "old" and "new" both run and outgrow them; "late" fills the one-place queue,
    # so "new", preempted, has nowhere to wait: it fails at once with its tokens kept as wasted work
    s = Scheduler(SchedulerConfig(kv_budget_tokens=64, policy="paged", max_waiting=1))
    s.add_request(req("old", prompt=20, out=30), 0.0)
    s.on_step_done(s.step(0.0), 1.0)
    s.add_request(req("new", prompt=20, out=30, arrival=1.0), 1.0)
    s.on_step_done(s.step(1.0), 2.0)
    assert s.kv_tokens_used == 64  # two blocks each: nothing free
    assert s.add_request(req("late", prompt=4, out=2, arrival=2.0), 2.0) is None
    t, outs, ended_plans = 2.0, [], []
    while s.has_work:
        plan = s.step(t)
        assert s.num_waiting <= 1 and plan.waiting <= 1
        if plan.ended:
            ended_plans.append(plan)
        outs += plan.ended
        t += 1
        outs += s.on_step_done(plan, t)
    (plan,) = ended_plans
    (failed,) = plan.ended
    assert plan.preempted == ["new"] and failed.request_id == "new"
    assert (failed.status, failed.error, failed.preemptions) == ("failed", ERR_PREEMPTED_QUEUE_FULL, 1)
    assert failed.admitted == 1.0 and failed.first_token == 2.0 and failed.end == plan.now_s
    assert failed.output_tokens >= 1  # generated before it was dropped: wasted output
    by_id = {o.request_id: o for o in outs}
    assert sorted(by_id) == ["late", "new", "old"] and len(outs) == 3
    assert by_id["old"].status == by_id["late"].status == "success"
    assert s.kv_tokens_used == 0 and s.kv_tokens_held == 0
    validate(parse_objects([o.to_record() for o in outs]), 0.0, t)


def test_preempted_with_room_in_the_queue_goes_back_to_its_front() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=64, policy="paged", max_waiting=2))
    s.add_request(req("old", prompt=20, out=30), 0.0)
    s.on_step_done(s.step(0.0), 1.0)
    s.add_request(req("new", prompt=20, out=30, arrival=1.0), 1.0)
    s.on_step_done(s.step(1.0), 2.0)
    s.add_request(req("late", prompt=4, out=2, arrival=2.0), 2.0)
    outs, _ = run(s, dt=1.0, t=2.0)
    assert {o.request_id: o.status for o in outs} == {"old": "success", "new": "success", "late": "success"}
    assert next(o for o in outs if o.request_id == "new").preemptions >= 1


def test_zero_output_tokens_is_refused_not_a_one_token_success() -> None:
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100))
    with pytest.raises(ConfigError, match="output_tokens 0 must be >= 1"):
        s.add_request(req("a", out=0, cap=5), 0.0)
    assert not s.has_work


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 24), st.integers(16, 64), st.sampled_from([None, 2.0, 6.0])),
                min_size=10, max_size=30),
       st.integers(1, 3), st.integers(1, 6), st.sampled_from([None, 16, 48]), st.booleans(),
       st.integers(3, 6), st.sets(st.integers(0, 29), max_size=3))
def test_waiting_never_exceeds_max_waiting_and_every_request_ends_once(
        reqs: list[tuple[int, int, int, float | None]], max_waiting: int, max_num_seqs: int,
        max_batched: int | None, chunked: bool, blocks: int, cancels: set[int]) -> None:
    """Paged KV tight enough to preempt (short prompts, long outputs, arrivals spread out so the queue
    refills while sequences grow): after every call the queue holds at most max_waiting."""
    cfg = SchedulerConfig(kv_budget_tokens=16 * blocks, policy="paged", max_waiting=max_waiting,
                          max_num_seqs=max_num_seqs, max_num_batched_tokens=max_batched, chunked_prefill=chunked)
    s = Scheduler(cfg)
    by_tick: dict[int, list[int]] = {}
    for i, (tick, *_rest) in enumerate(reqs):
        by_tick.setdefault(tick, []).append(i)
    ended: list[Outcome] = []
    preemptions = 0
    t = 0.0
    for tick in range(2_000):
        t = float(tick)
        for i in by_tick.get(tick, []):
            _, prompt, out, timeout = reqs[i]
            o = s.add_request(Request(f"r{i}", t, prompt, out, output_tokens=out, timeout_s=timeout), t)
            ended += [o] if o is not None else []
            assert s.num_waiting <= max_waiting
        if tick == 3:
            ended += [o for i in sorted(cancels) if (o := s.cancel(f"r{i}", t)) is not None]
        plan = s.step(t)
        assert s.num_waiting <= max_waiting and plan.waiting <= max_waiting
        assert s.kv_tokens_used <= cfg.kv_budget_tokens
        preemptions += len(plan.preempted)
        ended += plan.ended
        ended += s.on_step_done(plan, t + 1.0)
        ended += s.expire(t + 1.0)
        assert s.num_waiting <= max_waiting
        if tick > max(by_tick) and not s.has_work:
            break
    assert not s.has_work, "the scheduler never drained"
    ids = [o.request_id for o in ended]
    assert sorted(ids) == sorted(f"r{i}" for i in range(len(reqs)))  # each request ends exactly once
    assert s.kv_tokens_used == 0 and s.kv_tokens_held == 0
    assert sum(o.preemptions for o in ended) == preemptions
    for o in ended:
        if o.error == ERR_PREEMPTED_QUEUE_FULL:
            assert o.status == "failed" and o.admitted is not None
        if o.status == "success":
            assert o.output_tokens == reqs[int(o.request_id[1:])][2]
    validate(parse_objects([o.to_record() for o in ended]), 0.0, t + 1.0)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(prompt=st.integers(0, 300), cap=st.integers(1, 300), budget=st.integers(16, 600),
       policy=st.sampled_from(["reserve", "paged"]), block=st.sampled_from([1, 7, 16]))
def test_a_request_is_too_large_exactly_when_the_capacity_model_says_it_cannot_fit(
        prompt: int, cap: int, budget: int, policy: str, block: int) -> None:
    from servebench.capacity import kv
    from servebench.serving import scheduler
    assert scheduler.Policy is kv.Policy  # one definition
    cfg = SchedulerConfig(kv_budget_tokens=max(budget, block), policy=policy, block_size_tokens=block)  # type: ignore[arg-type]
    o = Scheduler(cfg).add_request(req("a", prompt=prompt, out=cap), 0.0)
    too_large = kv.tokens_per_request(prompt, cap, policy, block_size=block) > cfg.kv_budget_tokens  # type: ignore[arg-type]
    assert (o is not None and o.error == ERR_TOO_LARGE) == too_large


def test_output_target_is_the_drawn_output_capped_at_the_output_cap() -> None:
    assert Request("a", 0.0, 10, 5, output_tokens=9).output_target_tokens == 5
    assert Request("a", 0.0, 10, 5, output_tokens=3).output_target_tokens == 3
    assert Request("a", 0.0, 10, 5).output_target_tokens == 5  # until the cap (or EOS)
    s = Scheduler(SchedulerConfig(kv_budget_tokens=100))
    s.add_request(Request("a", 0.0, 10, 5, output_tokens=9), 0.0)
    (o,), _ = run(s)
    assert (o.status, o.output_tokens) == ("success", 5)  # the scheduler ends it at that target


@pytest.mark.parametrize("cls", [Request, Outcome])
def test_hand_written_init_sets_every_field_and_stays_frozen(cls: type) -> None:
    """Request's and Outcome's own __init__ (the dataclass's is slow: object.__setattr__ a field) sets each field,
    positionally and by name, keeps the defaults, and leaves the instance frozen, comparable and replaceable."""
    import dataclasses

    fields = dataclasses.fields(cls)
    values = {f.name: f"value {i}" for i, f in enumerate(fields)}
    by_position = cls(*values.values())
    assert dataclasses.asdict(by_position) == values
    assert cls(**values) == by_position and hash(cls(**values)) == hash(by_position)
    required = {f.name: values[f.name] for f in fields if f.default is dataclasses.MISSING}
    assert dataclasses.asdict(cls(**required)) == {
        f.name: values[f.name] if f.default is dataclasses.MISSING else f.default for f in fields}
    assert dataclasses.replace(by_position, slice="other").slice == "other"
    with pytest.raises(dataclasses.FrozenInstanceError):
        by_position.slice = "other"  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(bs=st.integers(1, 64), residues=st.lists(st.integers(0, 10_000), max_size=12),
       clock=st.integers(0, 10_000), steps=st.integers(1, 200))
def test_cohort_blocks_count_each_members_new_blocks(bs: int, residues: list[int], clock: int, steps: int) -> None:
    """The cohort's blocks for ``steps`` tokens, from its sorted residues by two bisections, are the sum over members
    of the blocks each one's computed tokens grow into (a member holds its blocks exactly)."""
    sched = Scheduler(SchedulerConfig(policy="paged", kv_budget_tokens=bs * 100, block_size_tokens=bs))
    sched._residues = sorted(r % bs for r in residues)
    sched._clock = clock
    expected = sum(-(-(r + clock + steps) // bs) - -(-(r + clock) // bs) for r in sched._residues)
    assert sched._cohort_blocks(steps) == expected
