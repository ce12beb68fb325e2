"""Active-request counts over time by a sweep line (a departure comes before an arrival at equal times)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timeline:
    """Peak number of open intervals and how long, inside the window, that peak was held."""

    peak: int
    time_at_peak_s: float
    share_at_peak: float


def active_timeline(start: np.ndarray, end: np.ndarray, window_start: float, window_end: float) -> Timeline:
    """Return the peak of simultaneously open [start, end) intervals and the time spent at it.

    >>> active_timeline(np.array([0., 1, 2]), np.array([2., 3, 4]), 0, 4)
    Timeline(peak=2, time_at_peak_s=2.0, share_at_peak=0.5)
    """
    s = start if ascending(start) else np.sort(start)  # records usually arrive in start order
    return sorted_timeline(s, np.sort(end), window_start, window_end)


def sorted_timeline(start: np.ndarray, end: np.ndarray, window_start: float, window_end: float) -> Timeline:
    """``active_timeline`` of starts and ends each already sorted ascending (a report merged from its slices').

    >>> sorted_timeline(np.array([0., 1, 2]), np.array([2., 3, 4]), 0, 4)
    Timeline(peak=2, time_at_peak_s=2.0, share_at_peak=0.5)
    """
    window_s = float(window_end - window_start)
    if start.size == 0:
        return Timeline(0, window_s, 1.0)
    peak, held_from, held_to = _peak_by_sorting(start, end)
    if peak <= 0:
        return Timeline(0, window_s, 1.0)
    time_at_peak = float(np.sum(np.clip(held_to, window_start, window_end)
                                - np.clip(held_from, window_start, window_end)))
    return Timeline(peak, time_at_peak, float(time_at_peak / window_s))


def sorted_without(ordered: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Return sorted ``ordered`` less one copy of each value in ``removed`` (values it holds), still sorted.

    The ends of the admitted records are every end but the few never admitted: taking those out of
    the sorted ends costs a search per removed value and one copy, not a second sort.

    >>> sorted_without(np.array([1., 2, 2, 3, 5]), np.array([2., 5]))
    array([1., 2., 3.])
    """
    if removed.size == 0:
        return ordered.copy()
    return np.delete(ordered, _positions(ordered, removed))


def _positions(ordered: np.ndarray, removed: np.ndarray) -> np.ndarray:
    """Positions in ``ordered`` of one copy of each removed value: the k-th repeat of a value takes its k-th copy."""
    removed = np.sort(removed)
    first = np.searchsorted(ordered, removed, side="left")
    run_starts = np.flatnonzero(np.r_[True, removed[1:] != removed[:-1]])
    within = np.arange(removed.size) - np.repeat(run_starts, np.diff(np.r_[run_starts, removed.size]))
    return first + within


_BLOCK = 1 << 20
_HEAD_EVERY = 64  # arrivals per block whose first arrival is counted exactly before any other


def _peak_by_sorting(s: np.ndarray, e: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """Return the peak and the spans held at it, from sorted starts and ends by binary searches.

    After the i-th arrival (sorted), the count open is (i + 1) minus the departures at or before
    it, and while at the peak the next event must be a departure, so the time held is the next
    departure minus that arrival. Each block of 64 arrivals is first bounded from its first
    arrival's count (no arrival in it can be more than 64 above it), and only blocks that could
    reach the highest exact count so far are searched in full: on ten million records a few
    dozen blocks, about 18x less CPU than searching every arrival (``benchmarks/fast_paths.py``,
    case ``peak_blocks``). Where many blocks could (a flat plateau), every arrival is searched.
    """
    n = s.size
    heads = np.arange(0, n, _HEAD_EVERY)
    gone = np.searchsorted(e, s[heads], side="right")
    highest_seen = int((heads + 1 - gone).max())
    bound = np.minimum(heads + _HEAD_EVERY, n) - gone  # arrivals up to the block's end, minus departures so far
    candidates = heads[bound >= highest_seen]
    if candidates.size * _HEAD_EVERY <= n // 8:
        index = (candidates[:, None] + np.arange(_HEAD_EVERY)).ravel()
        index = index[index < n]
        level = index + 1 - np.searchsorted(e, s[index], side="right")
        peak = int(level.max())
        at_peak = index[level == peak]
    else:
        peak, at_peak = _peak_of_every_arrival(s, e)
    if peak <= 0:
        return peak, s[:0], s[:0]
    return peak, s[at_peak], e[at_peak + 1 - peak]  # the next departure: index "gone"


def _peak_of_every_arrival(s: np.ndarray, e: np.ndarray) -> tuple[int, np.ndarray]:
    """Return the peak and the arrivals at it, counting the open intervals after every arrival."""
    active = np.searchsorted(e, s, side="right")  # departures so far, turned into the count open in place
    for lo in range(0, s.size, _BLOCK):  # in blocks: one small arange reused, not a fresh one per record
        hi = min(lo + _BLOCK, s.size)
        np.subtract(np.arange(lo + 1, hi + 1), active[lo:hi], out=active[lo:hi])
    peak = int(active.max())
    return peak, np.flatnonzero(active == peak)


def ascending(values: np.ndarray) -> bool:
    """Whether values never decrease (records usually arrive in start order: no sort needed)."""
    return values.size < 2 or bool(np.all(values[1:] >= values[:-1]))


def active_counts(start: np.ndarray, end: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Return how many [start, end) intervals are open at each of ``times`` (for plotting)."""
    s = np.sort(start)
    e = np.sort(end)
    return np.searchsorted(s, times, side="right") - np.searchsorted(e, times, side="right")
