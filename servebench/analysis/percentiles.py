"""Nearest-rank percentiles with exact rank arithmetic, and distribution-free confidence intervals."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from typing import Iterable, Sequence

import numpy as np
from scipy.special import bdtr

from servebench.errors import ConfigError


def _exact(q: float | int | Fraction) -> Fraction:
    if isinstance(q, bool):
        raise ConfigError(f"percentile must be a number, got {q!r}")
    if isinstance(q, Fraction):
        return q
    if isinstance(q, int):
        return Fraction(q)
    if not math.isfinite(q):
        raise ConfigError(f"percentile must be a finite number, got {q!r}")
    # repr gives the shortest decimal that round-trips, so 99.9 means 999/10, not the binary neighbour.
    return Fraction(repr(float(q)))


def nearest_rank(q: float | int | Fraction, n: int) -> int:
    """Return the 1-based nearest rank ceil(q * n / 100) for percentile q in (0, 100].

    >>> nearest_rank(95, 20), nearest_rank(7, 100), nearest_rank(99.9, 1000), nearest_rank(90, 10)
    (19, 7, 999, 9)
    """
    exact_q = _exact(q)
    if not (0 < exact_q <= 100):
        raise ConfigError(f"percentile must be in (0, 100], got {q}")
    if n < 1:
        raise ConfigError("nearest rank needs at least one value")
    return max(1, math.ceil(exact_q * n / 100))


def percentile(values: Sequence[float] | np.ndarray, q: float | int = 95) -> float | None:
    """Return the nearest-rank q-th percentile of ``values``, or None when there are none.

    Uses O(n) selection (``numpy.partition``) and never reorders the caller's data.

    >>> percentile(list(range(1, 21)), 95)
    19.0
    >>> percentile([], 95) is None
    True
    """
    arr = np.asarray(values, dtype=np.float64)
    n = arr.size
    if n == 0:
        return None
    k = nearest_rank(q, n) - 1
    return float(np.partition(arr, k)[k])


@dataclass(frozen=True)
class RankInterval:
    """1-based order-statistic ranks bounding a quantile; None where the sample cannot bound it."""

    lower_rank: int | None
    upper_rank: int | None
    confidence: float


def _binomial_quantile(prob: float, n: int, p: float) -> int:
    """Return the smallest k in [0, n] with P(Binomial(n, p) <= k) >= prob, by bisection on the exact CDF.

    scipy.special's CDF alone, not scipy.stats: importing scipy.stats costs the CLI half a second.

    >>> _binomial_quantile(0.5, 10, 0.5), _binomial_quantile(0.975, 1000, 0.95)
    (5, 963)
    """
    lo, hi = -1, n  # P(B <= -1) = 0 < prob <= 1 = P(B <= n)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if bdtr(mid, n, p) >= prob:
            hi = mid
        else:
            lo = mid
    return hi


@lru_cache(maxsize=4096)  # a report asks for the same (q, n) in several views
def rank_interval(q: float | int, n: int, confidence: float = 0.95) -> RankInterval:
    """Return order-statistic ranks (l, u) with P(X_(l) <= xi_q <= X_(u)) >= confidence.

    Distribution-free: the number of samples below the true quantile is Binomial(n, q/100).
    A bound is None when even the extreme order statistic is not confident enough, which is
    how a user sees that p99 of 50 requests has no upper bound.
    """
    if not (0 < confidence < 1):
        raise ConfigError(f"confidence must be in (0, 1), got {confidence}")
    if n < 1:
        return RankInterval(None, None, confidence)
    p = float(_exact(q) / 100)
    tail = (1 - confidence) / 2
    # P(X_(l) <= xi) = P(B >= l): choose the largest l with P(B <= l - 1) <= tail.
    lower = _binomial_quantile(tail, n, p)
    if bdtr(lower, n, p) > tail:
        lower -= 1
    lower_rank = lower + 1 if lower >= 0 else None
    # P(X_(u) >= xi) = P(B <= u - 1): the smallest u with P(B <= u - 1) >= 1 - tail.
    upper_rank = _binomial_quantile(1 - tail, n, p) + 1
    if upper_rank > n:
        upper_rank = None
    if lower_rank is not None and lower_rank > n:
        lower_rank = None
    return RankInterval(lower_rank, upper_rank, confidence)


@dataclass(frozen=True)
class PercentileEstimate:
    """A nearest-rank percentile with its distribution-free confidence interval."""

    q: float
    value: float | None
    ci_low: float | None
    ci_high: float | None
    n: int


def estimate(values: np.ndarray, qs: Sequence[float | int], confidence: float = 0.95) -> list[PercentileEstimate]:
    """Return each percentile in ``qs`` with its confidence interval, partitioning a copy once.

    ``np.partition`` at the dozen ranks a report reads (each percentile and both ends of its interval)
    takes half the CPU of a sort or less (``benchmarks/fast_paths.py`` case ``sort_vs_partition``).
    """
    values = np.array(values, dtype=np.float64)
    return estimate_sorted(select_ranks(values, estimate_ranks(tuple(qs), values.size, confidence)), qs, confidence)


@lru_cache(maxsize=4096)
def estimate_ranks(qs: tuple[float | int, ...], n: int, confidence: float = 0.95) -> frozenset[int]:
    """Return every 1-based rank ``estimate_sorted`` reads for n values: each percentile and its interval's ends.

    >>> sorted(estimate_ranks((50,), 100))
    [40, 50, 61]
    """
    out: set[int] = set()
    if n:
        for q in qs:
            ri = rank_interval(q, n, confidence)
            out.update(r for r in (nearest_rank(q, n), ri.lower_rank, ri.upper_rank) if r is not None)
    return frozenset(out)


def select_ranks(values: np.ndarray, ranks: Iterable[int]) -> np.ndarray:
    """Reorder ``values`` in place so that each 1-based rank (and the last) holds its order statistic; return it.

    Ranks past the end (the failure-aware view's infinities) are skipped. The result answers
    ``estimate_sorted`` and ``values[-1]`` (the maximum) as a sorted copy would. It is a partition
    at those ranks, or a sort where this CPU sorts faster (:func:`sort_is_cheaper`).
    """
    if values.size < 2:
        return values
    if sort_is_cheaper():
        values.sort()
        return values
    values.partition(sorted({r - 1 for r in ranks if 1 <= r <= values.size} | {values.size - 1}))
    return values


_CALIBRATION_VALUES = 1 << 17


@lru_cache(maxsize=1)
def sort_is_cheaper() -> bool:
    """Whether a sort costs less than a partition at a report's ranks on this CPU, timed once per process.

    Both give the same order statistics; which is faster depends on the CPU: numpy's SIMD sort made a
    sort 2x faster than the partition on one machine, and the partition was 3.9x faster on another
    (``benchmarks/fast_paths.py``, case ``sort_vs_partition``). Best of five runs each, on 131,072 values.
    """
    values = np.random.default_rng(0).random(_CALIBRATION_VALUES)
    n = values.size
    kth = sorted({r - 1 for q in (50, 90, 95, 99) for k in (0, n // 10)
                  for r in estimate_ranks((q,), n + k) if r <= n} | {n - 1})
    sort_s = partition_s = math.inf
    for _ in range(5):
        work = values.copy()
        t0 = time.perf_counter()
        work.sort()
        sort_s = min(sort_s, time.perf_counter() - t0)
        work = values.copy()
        t0 = time.perf_counter()
        work.partition(kth)
        partition_s = min(partition_s, time.perf_counter() - t0)
    return sort_s < partition_s


def estimate_sorted(ordered: np.ndarray, qs: Sequence[float | int], confidence: float = 0.95,
                    *, infinite: int = 0) -> list[PercentileEstimate]:
    """Like ``estimate`` for values already sorted ascending, followed by ``infinite`` values of +inf.

    The failure-aware view counts every non-success as +inf: its sorted values are the successes'
    sorted values and then the infinities, so it needs no sort of its own.

    >>> [(e.value, e.ci_low, e.ci_high) for e in estimate_sorted(np.arange(1.0, 101.0), [50], infinite=100)]
    [(100.0, 86.0, inf)]
    """
    n = ordered.size + infinite
    if n == 0:
        return [PercentileEstimate(float(q), None, None, None, 0) for q in qs]

    def at(rank: int | None) -> float | None:
        if rank is None:
            return None
        return float(ordered[rank - 1]) if rank <= ordered.size else math.inf

    out = []
    for q in qs:
        ri = rank_interval(q, n, confidence)
        out.append(PercentileEstimate(q=float(q), value=at(nearest_rank(q, n)), ci_low=at(ri.lower_rank),
                                      ci_high=at(ri.upper_rank), n=n))
    return out

