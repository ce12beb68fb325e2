"""Nearest-rank percentiles with exact ranks, and the coverage of their confidence intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from servebench.analysis.percentiles import estimate, nearest_rank, percentile, rank_interval
from servebench.errors import ConfigError


def test_p95_of_one_to_twenty_is_nineteen():
    assert percentile(list(range(1, 21)), 95) == 19


@pytest.mark.parametrize("q, n, rank", [
    (95, 20, 19), (90, 10, 9), (7, 100, 7), (99.9, 1000, 999), (50, 1, 1), (50, 2, 1), (51, 2, 2),
    (100, 5, 5), (0.001, 5, 1), (99, 100, 99), (33.3, 1000, 333), (95, 1, 1),
])
def test_nearest_rank_is_exact(q, n, rank):
    assert nearest_rank(q, n) == rank


def test_float_products_would_get_these_ranks_wrong():
    # the reasons for exact arithmetic: the float product lands just above an integer
    assert math.ceil(0.07 * 100) == 8 and nearest_rank(7, 100) == 7
    assert math.ceil(99.9 / 100 * 1000) == 1000 and nearest_rank(99.9, 1000) == 999


@pytest.mark.parametrize("values, expected", [([], None), ([4.0], 4.0), ([2.0, 1.0], 2.0)])
def test_zero_one_and_two_values(values, expected):
    assert percentile(values, 95) == expected


@pytest.mark.parametrize("q", [0, -1, 100.5, math.nan, True])
def test_percentile_out_of_range_is_rejected(q):
    with pytest.raises(ConfigError):
        percentile([1.0, 2.0], q)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.floats(allow_nan=False, allow_infinity=True, width=32), min_size=1, max_size=60),
       st.sampled_from([1, 7, 25, 50, 90, 95, 99, 99.9, 100]))
def test_selection_matches_sorting_and_leaves_input_alone(values, q):
    arr = np.array(values)
    before = arr.copy()
    k = max(0, math.ceil(q * len(values) / 100 - 1e-9) - 1)
    assert percentile(arr, q) == sorted(values)[k]
    assert np.array_equal(arr, before)
    assert estimate(arr, [q])[0].value == percentile(arr, q)


@pytest.mark.parametrize("n", [20, 50, 100, 300, 1000, 5000])
@pytest.mark.parametrize("q", [50, 90, 95, 99])
def test_rank_interval_covers_at_least_the_confidence(n, q):
    ri = rank_interval(q, n, 0.95)
    p = q / 100
    # P(X_(l) <= xi) = P(B >= l), P(X_(u) >= xi) = P(B <= u - 1) with B ~ Binomial(n, p)
    miss_low = binom.cdf(ri.lower_rank - 1, n, p) if ri.lower_rank else 0.0
    miss_high = 1 - binom.cdf(ri.upper_rank - 1, n, p) if ri.upper_rank else 0.0
    assert miss_low <= 0.025 + 1e-12 and miss_high <= 0.025 + 1e-12
    # and it is the tightest such interval: one rank inwards would miss more than allowed
    if ri.lower_rank and ri.lower_rank < n:
        assert binom.cdf(ri.lower_rank, n, p) > 0.025
    if ri.upper_rank and ri.upper_rank > 1:
        assert 1 - binom.cdf(ri.upper_rank - 2, n, p) > 0.025


def test_small_samples_cannot_bound_high_percentiles():
    assert rank_interval(99, 100).upper_rank is None
    assert rank_interval(99, 1000).upper_rank is not None
    est = estimate(np.arange(1.0, 101.0), [50, 99])
    assert est[0].ci_low < est[0].value < est[0].ci_high
    assert est[1].ci_high is None and est[1].ci_low <= est[1].value


def test_estimate_of_nothing_is_none():
    (e,) = estimate(np.array([]), [95])
    assert e.value is None and e.ci_low is None and e.ci_high is None and e.n == 0


@pytest.mark.parametrize("n", [1, 2, 5, 20, 50, 300, 1001, 65_537, 1_000_000, 10_000_000])
@pytest.mark.parametrize("q", [50, 90, 95, 99, 99.9])
def test_rank_interval_matches_scipy_stats_binomial_quantiles(n, q):
    p, tail = q / 100, 0.025
    lower = int(binom.ppf(tail, n, p))
    if binom.cdf(lower, n, p) > tail:
        lower -= 1
    upper = int(binom.ppf(1 - tail, n, p)) + 1
    ri = rank_interval(q, n)
    assert ri.lower_rank == (lower + 1 if 0 <= lower < n else None)
    assert ri.upper_rank == (upper if upper <= n else None)
