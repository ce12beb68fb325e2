"""The exact sum behind every mean in a report: equal to math.fsum, independent of order and of chunking."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from servebench.analysis.exact_sum import exact_total, mean_of

finite = st.floats(allow_nan=False, allow_infinity=False)
spread = arrays(np.float64, st.integers(0, 300), elements=finite)


@settings(max_examples=300, deadline=None)
@given(spread)
def test_exact_total_is_the_exact_sum(values):
    exact = sum((Fraction(v) for v in values.tolist()), Fraction(0))
    assert exact_total(values) == exact
    if values.size:
        assert mean_of(exact_total(values), values.size) == float(exact / values.size)


@settings(max_examples=200, deadline=None)
@given(spread, st.randoms(use_true_random=False), st.integers(1, 299))
def test_any_order_and_any_chunking_give_the_same_total(values, rnd, cut):
    shuffled = values.copy()
    rnd.shuffle(shuffled)
    assert exact_total(shuffled) == exact_total(values)
    assert exact_total(values[:cut]) + exact_total(values[cut:]) == exact_total(values)


def test_input_is_left_as_it_was_and_blocks_add_up():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.lognormal(-2, 3, 300_000), -rng.exponential(1e-9, 1000)])  # past one block
    before = values.copy()
    total = exact_total(values)
    assert np.array_equal(values, before)
    assert float(total) == math.fsum(values.tolist())  # fsum: the correctly rounded sum
    assert abs(mean_of(total, values.size) - float(values.mean())) <= 4 * np.spacing(values.mean())


def test_values_at_float64s_ends_are_still_exact():
    values = np.array([1e308, -1e308, 5e-324, 1.0, 1.7e308, -1.7e308, 2.5e-320])
    assert exact_total(values) == sum(map(Fraction, values.tolist()), Fraction(0))


def test_an_infinite_value_is_refused():
    with pytest.raises(ValueError, match="infinity or NaN"):
        exact_total(np.array([1.0, math.inf]))


positive = arrays(np.float64, st.integers(1, 300),
                  elements=st.one_of(st.floats(min_value=0.0, max_value=1e300, allow_subnormal=True),
                                     st.floats(min_value=1e-6, max_value=1e3)))  # report times, and float64's ends


@settings(max_examples=300, deadline=None)
@given(positive)
def test_positive_values_take_fewer_passes_to_the_same_exact_sum(values):
    from servebench.analysis.exact_sum import _any_total, _levels_of_positive, _positive_total
    exact = sum((Fraction(v) for v in values.tolist()), Fraction(0))
    assert exact_total(values) == exact
    levels = _levels_of_positive(values)
    if levels is not None:  # every value normal or zero, some above zero: the levels are known without a search
        assert _positive_total(values, *levels) == exact == _any_total(values)


def test_report_times_take_the_fast_path_past_one_block():
    from servebench.analysis.exact_sum import _levels_of_positive
    rng = np.random.default_rng(20)
    values = np.concatenate([rng.lognormal(-2, 2, 600_000), np.zeros(1000)])  # zeros: no queue wait
    assert _levels_of_positive(values[:2**18]) is not None
    assert float(exact_total(values)) == math.fsum(values.tolist())
    assert exact_total(values) == exact_total(values[::-1].copy())
