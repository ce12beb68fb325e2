"""Active-request counts over time by a sweep line (a departure comes before an arrival at equal times)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timeline:
    """Peak number of open intervals and how long, inside the window, that peak was held."""

    peak: int
    time_at_peak_s: float
    share_at_peak: float


def active_timeline(start: np.ndarray, end: np.ndarray, window_start: float, window_end: float,
                    *, overwrite: bool = False) -> Timeline:
    """Return the peak of simultaneously open [start, end) intervals and the time spent at it.

    First tries buckets (see ``_peak_by_buckets``), which sorts only the few events that could be
    at the peak; when too many could, falls back to the full sweep (``_peak_by_sorting``).
    ``overwrite`` lets the full sweep sort the caller's arrays in place (fresh copies: saves memory).

    >>> active_timeline(np.array([0., 1, 2]), np.array([2., 3, 4]), 0, 4)
    Timeline(peak=2, time_at_peak_s=2.0, share_at_peak=0.5)
    """
    window_s = float(window_end - window_start)
    if start.size == 0:
        return Timeline(0, window_s, 1.0)
    found = _peak_by_buckets(start, end)
    peak, held_from, held_to = found if found is not None else _peak_by_sorting(start, end, overwrite)
    if peak <= 0:
        return Timeline(0, window_s, 1.0)
    time_at_peak = float(np.sum(np.clip(held_to, window_start, window_end)
                                - np.clip(held_from, window_start, window_end)))
    return Timeline(peak, time_at_peak, float(time_at_peak / window_s))


_EVENTS_PER_BUCKET = 4
_MAX_EXACT_SHARE = 0.2  # of all events; above it the full sweep is cheaper


def _peak_by_buckets(start: np.ndarray, end: np.ndarray) -> tuple[int, np.ndarray, np.ndarray] | None:
    """Return the peak and the spans [from, to) held at it, or None when too many events could be at it.

    Events go into equal-width time buckets without sorting (bucketing is monotone in time, so
    every event of an earlier bucket comes first). Counting arrivals and departures per bucket
    gives the exact count open as each bucket begins; a bucket can hold the peak only if that
    count plus its arrivals reaches the highest such count. Only the events of those buckets
    (and of the next non-empty bucket after each, where a held peak ends) are sorted and walked.
    """
    t0, t1 = float(start.min()), float(end.max())  # end >= start row by row, so these bound everything
    n_buckets = max(1, start.size // _EVENTS_PER_BUCKET)
    scale = n_buckets / (t1 - t0) if t1 > t0 else 0.0
    if not (math.isfinite(scale) and scale > 0):
        return None

    def bucket_of(times: np.ndarray) -> np.ndarray:
        b = times - t0
        b *= scale
        return b.astype(np.int32 if n_buckets < 2**31 - 2 else np.int64)  # half the memory of intp

    b_start, b_end = bucket_of(start), bucket_of(end)
    size = n_buckets + 2  # t1 lands in bucket n_buckets, give or take rounding
    arrivals = np.bincount(b_start, minlength=size)
    departures = np.bincount(b_end, minlength=size)
    open_before = np.zeros(arrivals.size, dtype=np.int64)
    np.cumsum(arrivals[:-1] - departures[:-1], out=open_before[1:])
    candidate = (arrivals > 0) & (open_before + arrivals >= open_before.max())
    nonempty = np.flatnonzero(arrivals + departures)
    picked = candidate.copy()
    following = np.searchsorted(nonempty, np.flatnonzero(candidate), side="right")
    picked[nonempty[np.minimum(following, nonempty.size - 1)]] = True
    from_start, from_end = picked[b_start], picked[b_end]
    n_picked = int(np.count_nonzero(from_start)) + int(np.count_nonzero(from_end))
    if n_picked > _MAX_EXACT_SHARE * 2 * start.size:
        return None
    times = np.concatenate([end[from_end], start[from_start]])
    is_arrival = np.concatenate([np.zeros(n_picked - int(np.count_nonzero(from_start)), dtype=np.int8),
                                 np.ones(int(np.count_nonzero(from_start)), dtype=np.int8)])
    order = np.lexsort((is_arrival, times))  # by time, a departure before an arrival at equal times
    times, is_arrival = times[order], is_arrival[order]
    bucket = np.concatenate([b_end[from_end], b_start[from_start]])[order]
    walked = np.cumsum(is_arrival.astype(np.int64) * 2 - 1)
    run_start = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    walked_before = np.r_[0, walked][run_start]
    run = np.cumsum(np.r_[True, bucket[1:] != bucket[:-1]]) - 1
    level = open_before[bucket] + walked - walked_before[run]
    peak = int(level.max())
    if peak <= 0:
        return peak, times[:0], times[:0]
    at_peak = np.flatnonzero(level == peak)  # always arrivals; the next event is a departure, picked too
    return peak, times[at_peak], times[at_peak + 1]


def _peak_by_sorting(start: np.ndarray, end: np.ndarray, overwrite: bool) -> tuple[int, np.ndarray, np.ndarray]:
    """Return the peak and the spans held at it with two sorts and a binary search, no merged event list.

    After the i-th arrival (sorted), the count open is (i + 1) minus the departures at or before
    it, and while at the peak the next event must be a departure, so the time held is the next
    departure minus that arrival.
    """
    s = start if _ascending(start) else _sorted(start, overwrite)  # records usually arrive in start order
    e = _sorted(end, overwrite)
    active = _count_at_or_before(e, s)  # departures so far, turned into the count open in place
    np.subtract(np.arange(1, s.size + 1), active, out=active)
    peak = int(active.max())
    if peak <= 0:
        return peak, s[:0], s[:0]
    at_peak = np.flatnonzero(active == peak)
    del active
    return peak, s[at_peak], e[at_peak + 1 - peak]  # the next departure: index "gone"


_SEARCH_BLOCK = 4096


def _count_at_or_before(haystack: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """Return, for each needle (both arrays sorted), how many haystack values are <= it.

    ``np.searchsorted`` in blocks of needles: each block searches only the stretch of haystack its
    first and last needle bound, which stays in cache (1.5x faster at ten million values).
    """
    out = np.empty(needles.size, dtype=np.intp)
    firsts = needles[::_SEARCH_BLOCK]
    lasts = needles[_SEARCH_BLOCK - 1::_SEARCH_BLOCK]
    lo = np.searchsorted(haystack, firsts, side="right")
    hi = np.append(np.searchsorted(haystack, lasts, side="right"), haystack.size)
    for k, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        block = slice(k * _SEARCH_BLOCK, (k + 1) * _SEARCH_BLOCK)
        out[block] = np.searchsorted(haystack[a:b], needles[block], side="right")
        out[block] += a
    return out


def _sorted(values: np.ndarray, overwrite: bool) -> np.ndarray:
    if overwrite:
        values.sort()
        return values
    return np.sort(values)


def _ascending(values: np.ndarray) -> bool:
    return values.size < 2 or bool(np.all(values[1:] >= values[:-1]))


def active_counts(start: np.ndarray, end: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Return how many [start, end) intervals are open at each of ``times`` (for plotting)."""
    s = np.sort(start)
    e = np.sort(end)
    return np.searchsorted(s, times, side="right") - np.searchsorted(e, times, side="right")
