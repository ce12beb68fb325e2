"""Tests for workload generation: arrival processes, length distributions, class mixing, seeding."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from servebench.errors import ConfigError
from servebench.serving.workload import (
    ArrivalSpec,
    ClassSpec,
    ClosedLoopSpec,
    LengthSpec,
    WorkloadSpec,
    arrival_times,
    closed_loop_plan,
    generate_arrivals,
    generate_workload,
)

FIXED = ClassSpec(prompt=LengthSpec(kind="fixed", value=100), output=LengthSpec(kind="fixed", value=20))


def spec(arrival: ArrivalSpec, n: int | None = 2000, duration: float | None = None,
         classes: list[ClassSpec] | None = None) -> WorkloadSpec:
    return WorkloadSpec(arrival=arrival, num_requests=n, duration_s=duration, classes=classes or [FIXED])


def test_same_seed_same_workload() -> None:
    s = spec(ArrivalSpec(kind="gamma", rate_rps=3, cv=2), classes=[
        ClassSpec(name="a", weight=2, prompt=LengthSpec(kind="lognormal", median=300, sigma=0.7),
                  output=LengthSpec(kind="uniform", low=5, high=50)), FIXED])
    a = generate_arrivals(s, np.random.default_rng(5))
    b = generate_arrivals(s, np.random.default_rng(5))
    c = generate_arrivals(s, np.random.default_rng(6))
    assert a == b and a != c


def test_poisson_rate_and_first_arrival() -> None:
    t = arrival_times(ArrivalSpec(kind="poisson", rate_rps=4.0), 20_000, None, np.random.default_rng(1))
    assert t[0] == 0.0 and np.all(np.diff(t) >= 0)
    gaps = np.diff(t)
    assert gaps.mean() == pytest.approx(0.25, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)


def test_gamma_burstiness_sets_cv() -> None:
    for cv in (0.5, 3.0):
        t = arrival_times(ArrivalSpec(kind="gamma", rate_rps=2.0, cv=cv), 20_000, None, np.random.default_rng(2))
        gaps = np.diff(t)
        assert gaps.mean() == pytest.approx(0.5, rel=0.06)
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)


def test_constant_spacing_and_duration_stop() -> None:
    t = arrival_times(ArrivalSpec(kind="constant", rate_rps=2.0), None, 10.0, np.random.default_rng(0))
    assert t.tolist() == [0.5 * i for i in range(20)]


def test_duration_bounds_poisson() -> None:
    t = arrival_times(ArrivalSpec(kind="poisson", rate_rps=50.0), None, 100.0, np.random.default_rng(3))
    assert t.max() < 100.0 and t.size == pytest.approx(5000, rel=0.05)


def test_poisson_scales_with_rate_under_one_seed() -> None:
    # common random numbers: the same seed at twice the rate gives exactly half the times
    a = arrival_times(ArrivalSpec(kind="poisson", rate_rps=1.0), 100, None, np.random.default_rng(9))
    b = arrival_times(ArrivalSpec(kind="poisson", rate_rps=2.0), 100, None, np.random.default_rng(9))
    np.testing.assert_allclose(b, a / 2)


def test_replay_keeps_gaps_and_speeds_up() -> None:
    arr = ArrivalSpec(kind="replay", start_s=[10.0, 11.0, 13.0, 17.0])
    assert arrival_times(arr, None, None, np.random.default_rng(0)).tolist() == [0.0, 1.0, 3.0, 7.0]
    s = spec(arr, n=None).with_rate(3 / 7 * 2)  # twice the original mean rate
    assert generate_workload(s, np.random.default_rng(0)).arrival_s.tolist() == pytest.approx([0.0, 0.5, 1.5, 3.5])


def test_class_mix_follows_weights() -> None:
    hint = ClassSpec(name="hint", weight=3, prompt=LengthSpec(value=1000), output=LengthSpec(value=200))
    review = ClassSpec(name="review", weight=1, prompt=LengthSpec(value=7800), output=LengthSpec(value=200))
    wl = generate_workload(spec(ArrivalSpec(rate_rps=1), n=8000, classes=[hint, review]), np.random.default_rng(4))
    share = np.mean(wl.class_index == 0)
    assert share == pytest.approx(0.75, abs=0.02)
    assert set(wl.prompt_tokens[wl.class_index == 1].tolist()) == {7800}
    specs = wl.to_specs()
    assert {s.slice for s in specs} == {"hint", "review"}


def test_length_distributions_respect_bounds() -> None:
    rng = np.random.default_rng(8)
    u = LengthSpec(kind="uniform", low=3, high=5).draw(5000, rng)
    assert set(u.tolist()) == {3, 4, 5}
    ln = LengthSpec(kind="lognormal", median=100, sigma=1.0, min_tokens=10, max_tokens=500).draw(5000, rng)
    assert ln.min() >= 10 and ln.max() <= 500 and np.median(ln) == pytest.approx(100, rel=0.1)
    emp = LengthSpec(kind="empirical", values=[7, 9]).draw(1000, rng)
    assert set(emp.tolist()) == {7, 9}


def test_output_cap_defaults_to_largest_output() -> None:
    c = ClassSpec(prompt=LengthSpec(value=10), output=LengthSpec(kind="uniform", low=1, high=64))
    wl = generate_workload(spec(ArrivalSpec(rate_rps=1), n=500, classes=[c]), np.random.default_rng(0))
    assert set(wl.max_output_tokens.tolist()) == {64}
    capped = ClassSpec(prompt=LengthSpec(value=10), output=LengthSpec(kind="uniform", low=1, high=64), max_output_tokens=32)
    wl = generate_workload(spec(ArrivalSpec(rate_rps=1), n=500, classes=[capped]), np.random.default_rng(0))
    assert wl.output_tokens.max() == 32 and set(wl.max_output_tokens.tolist()) == {32}


def test_closed_loop_plan() -> None:
    s = WorkloadSpec(closed_loop=ClosedLoopSpec(users=4, think_s=2.0, think="exponential"), num_requests=100,
                     classes=[FIXED])
    plan = closed_loop_plan(s, np.random.default_rng(1))
    assert plan.users == 4 and len(plan.requests) == 100
    assert plan.think_s[:4].tolist() == [0.0] * 4 and plan.think_s[4:].mean() == pytest.approx(2.0, rel=0.3)
    assert s.with_users(8).closed_loop.users == 8  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="closed-loop"):
        s.with_rate(2.0)


def test_invalid_specs_raise() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        WorkloadSpec(classes=[FIXED], num_requests=3)
    with pytest.raises(ValidationError, match="rate_rps"):
        ArrivalSpec(kind="poisson")
    with pytest.raises(ValidationError, match="low"):
        LengthSpec(kind="uniform", low=5, high=1)
    with pytest.raises(ValidationError, match="num_requests"):
        WorkloadSpec(arrival=ArrivalSpec(rate_rps=1), classes=[FIXED])
    with pytest.raises(ConfigError, match="over"):
        arrival_times(ArrivalSpec(rate_rps=1e6), None, 1e6, np.random.default_rng(0))
