"""The sweep line: peak concurrency and time at the peak, against a brute-force event walk."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis import timeline
from servebench.analysis.timeline import active_counts, active_timeline, sorted_without


def brute_force(intervals, ws, we):
    events = sorted([(e, 0) for _, e in intervals] + [(s, 1) for s, _ in intervals])  # departures first
    active = peak = 0
    level_at = []
    for t, kind in events:
        active += 1 if kind else -1
        level_at.append((t, active))
        peak = max(peak, active)
    time_at_peak = 0.0
    for (t, level), (t_next, _) in zip(level_at, level_at[1:]):
        if level == peak and peak > 0:
            time_at_peak += min(max(t_next, ws), we) - min(max(t, ws), we)
    return peak, time_at_peak


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 6)), min_size=1, max_size=40))
def test_matches_brute_force_with_ties(pairs):
    intervals = [(float(s), float(s + d)) for s, d in pairs]
    start = np.array([s for s, _ in intervals])
    end = np.array([e for _, e in intervals])
    tl = active_timeline(start, end, 0.0, 26.0)
    peak, time_at_peak = brute_force(intervals, 0.0, 26.0)
    assert tl.peak == peak
    if peak:
        assert tl.time_at_peak_s == pytest.approx(time_at_peak)
        assert tl.share_at_peak == pytest.approx(time_at_peak / 26.0)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.floats(-50, 50), st.floats(0, 3)), min_size=1, max_size=300))
def test_float_intervals_match_brute_force_and_inputs_are_left_as_they_are(pairs):
    start = np.array([s for s, _ in pairs])
    end = start + np.array([d for _, d in pairs])
    peak, time_at_peak = brute_force(list(zip(start.tolist(), end.tolist())), -60.0, 60.0)
    given_start, given_end = start.copy(), end.copy()
    tl = active_timeline(start, end, -60.0, 60.0)
    assert np.array_equal(start, given_start) and np.array_equal(end, given_end)
    assert tl.peak == peak
    if peak:
        assert tl.time_at_peak_s == pytest.approx(time_at_peak)


def test_a_departure_comes_before_an_arrival_at_equal_times():
    tl = active_timeline(np.array([0.0, 1.0]), np.array([1.0, 2.0]), 0, 2)
    assert tl.peak == 1 and tl.time_at_peak_s == 2.0


def test_zero_length_requests_never_count_as_active():
    tl = active_timeline(np.array([3.0, 3.0]), np.array([3.0, 3.0]), 0, 10)
    assert tl.peak == 0


def test_active_counts_at_times():
    counts = active_counts(np.array([0.0, 1.0, 1.0]), np.array([2.0, 3.0, 1.5]), np.array([0.5, 1.0, 1.7, 2.0]))
    assert counts.tolist() == [1, 3, 2, 1]


def test_peak_past_one_block_matches_the_direct_count() -> None:
    """More records than the sweep's block (2**20): the peak and its time equal a direct count."""
    rng = np.random.default_rng(3)
    n = (1 << 20) * 2 + 17
    start = np.sort(rng.uniform(0, 100, n))
    end = start + rng.exponential(0.05, n)
    end[n - 5:] = start[n - 5:] + 50  # the peak forms late, in the last block
    s, e = np.sort(start), np.sort(end)
    direct = np.arange(1, n + 1) - np.searchsorted(e, s, side="right")
    tl = active_timeline(start, end, 0.0, 200.0)
    assert tl.peak == int(direct.max())
    at = np.flatnonzero(direct == tl.peak)
    assert tl.time_at_peak_s == pytest.approx(float(np.sum(np.clip(e[at + 1 - tl.peak], 0, 200) - np.clip(s[at], 0, 200))))


def _direct(start, end, ws, we):
    """Peak and time at it from the count after every arrival (what the block bound may skip)."""
    s, e = np.sort(start), np.sort(end)
    level = np.arange(1, s.size + 1) - np.searchsorted(e, s, side="right")
    peak = int(level.max())
    at = np.flatnonzero(level == peak)
    return peak, float(np.sum(np.clip(e[at + 1 - peak], ws, we) - np.clip(s[at], ws, we)))


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.integers(2_000, 8_000), st.integers(0, 3_000), st.integers(1, 300), st.sampled_from([2, 8, 64]),
       st.integers(0, 2**32 - 1))
def test_blocks_bounded_from_their_first_arrival_find_the_direct_peak(n, burst, steps, block, seed):
    """Records on a coarse time grid (ties at every step), on a plateau or with a burst: the direct peak and time.

    Small blocks make the bounded search run on thousands of records, not only on millions.
    """
    rng = np.random.default_rng(seed)
    start = np.concatenate([rng.integers(0, 1_000, n), rng.integers(500, 500 + steps, burst)]).astype(float)
    end = start + rng.integers(0, 30, start.size)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(timeline, "_HEAD_EVERY", block)
        tl = active_timeline(start, end, 0.0, 1_100.0)
    assert (tl.peak, tl.time_at_peak_s) == _direct(start, end, 0.0, 1_100.0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 3.5]) | st.floats(-5, 5), min_size=1, max_size=60),
       st.data())
def test_sorted_without_equals_sorting_what_stays(values, data):
    """Taking some values out of a sorted array is the sort of the values that stay, repeats included."""
    arr = np.array(values)
    gone = np.array(data.draw(st.lists(st.integers(0, arr.size - 1), unique=True, max_size=arr.size)), dtype=np.int64)
    stays = np.ones(arr.size, dtype=bool)
    stays[gone] = False
    ordered = np.sort(arr)
    before = ordered.copy()
    got = sorted_without(ordered, arr[gone])
    assert np.array_equal(got, np.sort(arr[stays]))
    assert np.array_equal(ordered, before)  # the input is left as it was
