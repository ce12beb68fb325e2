"""Values streamed in chunks, reduced as numpy reduces them in one array: numpy's pairwise sum, picked ranks, peaks.

The DuckDB engine (``servebench.analysis.duckdb_report``) streams each distribution sorted, out of
core, and must report what the in-memory report computes from one numpy array: the same nearest
ranks and interval ranks (``servebench.analysis.percentiles``) and the same mean, the exact sum's
correctly rounded mean (``servebench.analysis.exact_sum``): :class:`SortedSink` keeps both.
:class:`PairwiseSum` reproduces numpy's pairwise sum chunk by chunk, for a sum the report takes in
row order. :class:`PeakWalk` is the running sum of start and end events behind peak concurrency
(``servebench.analysis.timeline``).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from servebench.analysis.contract import REPORT_QUANTILES
from servebench.analysis.exact_sum import exact_total, mean_of
from servebench.analysis.percentiles import estimate_ranks, nearest_rank, rank_interval
from servebench.analysis.summary import Concurrency, Distribution, Percentile

_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE: pairwise summation's leaves hold at most this many values


@lru_cache(maxsize=256)
def pairwise_plan(n: int) -> tuple[np.ndarray, np.ndarray, tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]]:
    """Return numpy's pairwise-summation tree for n values: leaf offsets and sizes, and its levels.

    numpy sums a contiguous float64 array by halves (rounded down to a multiple of 8) until a block
    has at most 128 values, which it sums with eight accumulators. Each level is (sizes, is_leaf,
    leaf index); children of a level's inner nodes are the next level's nodes, two each, in order.
    """
    levels = []
    sizes = np.array([n], dtype=np.int64)
    offsets = np.zeros(1, dtype=np.int64)
    leaf_offsets, leaf_sizes = [], []
    while sizes.size:
        leaf = sizes <= _PW_BLOCK
        levels.append((sizes, leaf, offsets))
        leaf_offsets.append(offsets[leaf])
        leaf_sizes.append(sizes[leaf])
        inner, inner_off = sizes[~leaf], offsets[~leaf]
        half = inner // 2
        half -= half % 8
        sizes = np.stack([half, inner - half], axis=1).ravel()
        offsets = np.stack([inner_off, inner_off + half], axis=1).ravel()
    all_off = np.concatenate(leaf_offsets)
    order = np.argsort(all_off, kind="stable")
    sorted_off, sorted_size = all_off[order], np.concatenate(leaf_sizes)[order]
    out_levels = tuple((s, lf, np.searchsorted(sorted_off, off[lf])) for s, lf, off in levels)
    return sorted_off, sorted_size, out_levels


def leaf_sums(values: np.ndarray, offsets: np.ndarray, size: int) -> np.ndarray:
    """Sum blocks of ``size`` values starting at ``offsets`` as numpy's pairwise leaf does (eight accumulators)."""
    block = values[offsets[:, None] + np.arange(size)]
    if size < 8:
        res = np.zeros(offsets.size)
        for i in range(size):
            res += block[:, i]
        return res
    whole = size - size % 8
    r = block[:, :8].copy()
    for i in range(8, whole, 8):
        r += block[:, i:i + 8]
    res = ((r[:, 0] + r[:, 1]) + (r[:, 2] + r[:, 3])) + ((r[:, 4] + r[:, 5]) + (r[:, 6] + r[:, 7]))
    for i in range(whole, size):
        res += block[:, i]
    return res


def combine_pairwise(n: int, sums_of_leaves: np.ndarray) -> float:
    """Add leaf sums up numpy's tree for n values; return the total as ``np.add.reduce`` gives it."""
    _, _, levels = pairwise_plan(n)
    below: np.ndarray | None = None
    for sizes, leaf, leaf_index in reversed(levels):
        sums = np.empty(sizes.size)
        sums[leaf] = sums_of_leaves[leaf_index]
        if below is not None:
            sums[~leaf] = below[0::2] + below[1::2]
        below = sums
    assert below is not None
    return 0.0 + float(below[0])


def pairwise_sum(values: np.ndarray) -> float:
    """Return ``values.sum()`` as numpy computes it, from the values in one array (for tests and chunks).

    >>> v = np.random.default_rng(1).random(1000); pairwise_sum(v) == float(v.sum())
    True
    """
    offsets, sizes, _ = pairwise_plan(values.size)
    sums = np.empty(offsets.size)
    for size in np.unique(sizes).tolist():
        at = sizes == size
        sums[at] = leaf_sums(values, offsets[at], size)
    return combine_pairwise(values.size, sums)


class PairwiseSum:
    """Take n values chunk by chunk, in the order numpy would hold them, and sum them as ``ndarray.sum`` does."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self._offsets, self._sizes, _ = pairwise_plan(n) if n else (np.zeros(0, np.int64), np.zeros(0, np.int64), ())
        self._leaf_sums = np.empty(self._offsets.size)
        self._next_leaf = 0
        self._pending = np.empty(0)
        self._pending_start = 0

    def feed(self, chunk: np.ndarray) -> None:
        """Take the next values."""
        if chunk.size == 0:
            return
        self.seen += chunk.size
        buf = np.concatenate([self._pending, chunk]) if self._pending.size else chunk
        end = self._pending_start + buf.size
        k0 = self._next_leaf
        k1 = int(np.searchsorted(self._offsets + self._sizes, end, side="right"))
        if k1 > k0:
            offs, sizes = self._offsets[k0:k1] - self._pending_start, self._sizes[k0:k1]
            for size in np.unique(sizes).tolist():
                at = sizes == size
                self._leaf_sums[k0:k1][at] = leaf_sums(buf, offs[at], size)
            done = int(self._offsets[k1 - 1] + self._sizes[k1 - 1])
            self._pending = buf[done - self._pending_start:].copy()
            self._pending_start = done
            self._next_leaf = k1
        else:
            self._pending = buf.copy() if buf is chunk else buf

    def total(self) -> float:
        """numpy's sum of every value fed (all n must have been)."""
        if self.seen != self.n:
            raise RuntimeError(f"expected {self.n} values, got {self.seen}")
        return combine_pairwise(self.n, self._leaf_sums) if self.n else 0.0


class SortedSink:
    """Take one group's values in ascending order, chunk by chunk; keep the wanted ranks, the last value and the exact sum."""

    def __init__(self, n: int, ranks: set[int]) -> None:
        self.n = n
        self.seen = 0
        self.ranks = sorted(r for r in ranks if 1 <= r <= n)
        self.picked: dict[int, float] = {}
        self.last: float | None = None
        self._total = Fraction(0)
        self._finite = True

    def feed(self, chunk: np.ndarray) -> None:
        """Take the next values in order."""
        if chunk.size == 0:
            return
        lo, hi = self.seen, self.seen + chunk.size
        for r in self.ranks:
            if lo < r <= hi:
                self.picked[r] = float(chunk[r - 1 - lo])
        self.last = float(chunk[-1])
        self.seen = hi
        if self._finite and np.isfinite(self.last):
            self._total += exact_total(chunk)
        else:
            self._finite = False  # ascending: every later value is infinite too, and no mean is reported

    def total(self) -> Fraction:
        """The exact sum of every value fed (all n must have been, each finite)."""
        if self.seen != self.n or not self._finite:
            raise RuntimeError(f"expected {self.n} finite values, got {self.seen}")
        return self._total


def distribution(sink: SortedSink, infinite: int = 0) -> Distribution:
    """Build a Distribution as ``summary._distribution`` does, from a sink fed the sorted values."""
    finite_n = sink.n
    n = finite_n + infinite
    if n == 0:
        pcts = [Percentile(q=float(qq), value=None, ci_low=None, ci_high=None) for qq in REPORT_QUANTILES]
        return Distribution(n=0, percentiles=pcts, max=None, mean=None)

    def at(rank: int | None) -> float | None:
        if rank is None:
            return None
        return sink.picked[rank] if rank <= finite_n else math.inf

    pcts = []
    for qq in REPORT_QUANTILES:
        ri = rank_interval(qq, n)
        pcts.append(Percentile(q=float(qq), value=at(nearest_rank(qq, n)), ci_low=at(ri.lower_rank),
                               ci_high=at(ri.upper_rank)))
    finite = finite_n > 0 and infinite == 0 and sink.last is not None and math.isfinite(sink.last)
    mean = mean_of(sink.total(), finite_n) if finite else None
    return Distribution(n=n, percentiles=pcts, max=math.inf if infinite else sink.last if finite_n else None,
                        mean=mean)


def ranks_for(n: int) -> set[int]:
    """Every 1-based rank a distribution of n values reads: each percentile and both ends of its interval."""
    return set(estimate_ranks(REPORT_QUANTILES, n))


class PeakWalk:
    """A running sum over one group's events in order: the peak, and the spans [event, next event) at it."""

    def __init__(self) -> None:
        self.level = 0
        self.peak: int | None = None
        self.held_from: list[np.ndarray] = []
        self.held_to: list[np.ndarray] = []
        self.pending = False  # the last time seen was at the peak; its span ends at the next time

    def feed(self, t: np.ndarray, d: np.ndarray) -> None:
        """Take the next events: times ``t`` and +1 (arrival) or -1 (departure) in ``d``."""
        level = np.cumsum(d, dtype=np.int64)
        level += self.level
        self.level = int(level[-1])
        top = int(level.max())
        if self.pending and (self.peak is None or top <= self.peak):
            self.held_to.append(t[:1])
        self.pending = False
        if self.peak is None or top > self.peak:
            self.peak, self.held_from, self.held_to = top, [], []
        if top == self.peak:
            at = np.flatnonzero(level == top)
            self.held_from.append(t[at])
            inner = at[at + 1 < t.size]
            self.held_to.append(t[inner + 1])
            self.pending = bool(at[-1] == t.size - 1)

    def result(self, window_start: float, window_end: float) -> Concurrency:
        """The peak and the time at it within the window (a peak of 0 holds the whole window)."""
        window_s = float(window_end - window_start)
        if self.peak is None or self.peak <= 0:
            return Concurrency(peak=0, share_of_window_at_peak=1.0, time_at_peak_s=window_s)
        held_from, held_to = np.concatenate(self.held_from), np.concatenate(self.held_to)
        time_at = float(np.sum(np.clip(held_to, window_start, window_end) - np.clip(held_from, window_start, window_end)))
        return Concurrency(peak=self.peak, share_of_window_at_peak=float(time_at / window_s), time_at_peak_s=time_at)


__all__ = ["PairwiseSum", "PeakWalk", "SortedSink", "distribution", "pairwise_sum", "ranks_for"]
