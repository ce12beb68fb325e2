"""TokenLog: each row's token arrivals kept as runs of the emission times, expanded exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.records.token_times import TokenLog, TokenRuns, gaps


@st.composite
def _appends(draw: st.DrawFn) -> tuple[int, list[tuple[list[int], list[float]]]]:
    """Rows, and appends: distinct rows receiving a token at each of one or more non-decreasing times."""
    n = draw(st.integers(1, 12))
    appends = []
    t = 0.0
    for _ in range(draw(st.integers(0, 30))):
        rows = draw(st.lists(st.integers(0, n - 1), unique=True, max_size=n))
        times = []
        for _ in range(draw(st.integers(1, 4))):
            t += draw(st.sampled_from([0.0, 0.001, 0.25, 3.0]))
            times.append(t)
        appends.append((rows, times))
    return n, appends


@settings(max_examples=200, deadline=None)
@given(_appends(), st.booleans())
def test_every_token_comes_back_to_its_row_in_order(case: tuple[int, list[tuple[list[int], list[float]]]],
                                                     named: bool) -> None:
    n, appends = case
    log = TokenLog()
    expected: list[list[float]] = [[] for _ in range(n)]
    for rows, times in appends:
        keys = [str(r) for r in rows] if named else list(rows)  # the simulator names rows by request ID
        if len(times) == 1:
            log.add_step(keys, times[0])
        else:
            log.add_run(keys, np.array(times))
        for r in rows:
            expected[r].extend(times)
    assert log.to_arrow(n).to_pylist() == [e or None for e in expected]


def test_a_row_that_gets_every_tick_is_one_run_and_a_gap_starts_another() -> None:
    log = TokenLog()
    log.add_step([0], 0.1)  # a first token
    log.add_run([0, 1], np.array([0.2, 0.3, 0.4]))
    log.add_step([0, 1], 0.5)
    assert log.runs == 2  # row 0 from 0.1 to 0.5, row 1 from 0.2
    log.add_step([2], 0.6)
    log.add_step([0], 0.7)  # row 0 skipped the tick at 0.6: a new run
    assert log.runs == 4
    assert log.to_arrow(3).to_pylist() == [[0.1, 0.2, 0.3, 0.4, 0.5, 0.7], [0.2, 0.3, 0.4, 0.5], [0.6]]


def test_expansion_in_chunks_gives_the_same_values(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(4)
    log = TokenLog()
    t = 0.0
    for _ in range(200):
        rows = rng.choice(50, size=int(rng.integers(1, 20)), replace=False).tolist()
        k = int(rng.integers(1, 6))
        times = t + np.cumsum(rng.random(k))
        t = float(times[-1])
        log.add_run(rows, times)
    whole = log.to_arrow(50).to_pylist()
    monkeypatch.setattr(TokenRuns, "_CHUNK_TOKENS", 7)  # many small chunks, each cut inside the runs' order
    assert log.to_arrow(50).to_pylist() == whole


def _log_of(case: tuple[int, list[tuple[list[int], list[float]]]]) -> TokenLog:
    log = TokenLog()
    for rows, times in case[1]:
        if len(times) == 1:
            log.add_step(list(rows), times[0])
        else:
            log.add_run(list(rows), np.array(times))
    return log


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(np.array_equal(a, b, equal_nan=True))


@settings(max_examples=200, deadline=None)
@given(_appends(), st.data())
def test_run_gaps_equal_the_gaps_of_the_expanded_times(case: tuple[int, list[tuple[list[int], list[float]]]],
                                                       data: st.DataObject) -> None:
    n = case[0]
    runs = _log_of(case).to_runs(n)
    whole = gaps(runs.expand())
    compact = runs.gaps()
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    repeated = compact.sorted_of(mask)
    assert repeated.size == whole.sorted_of(mask).size
    assert repeated[0:repeated.size].tolist() == whole.sorted_of(mask).tolist()  # the same multiset, in order
    assert _same(compact.max_gap, whole.max_gap) and _same(compact.has_times, whole.has_times)
    assert _same(compact.row_percentile(99), whole.row_percentile(99))
    lo = data.draw(st.integers(0, n))
    assert runs.expand(lo, n).to_pylist() == runs.expand().to_pylist()[lo:]


def test_a_simulation_reports_the_same_from_runs_as_from_every_token_time() -> None:
    from pathlib import Path

    from servebench.analysis.summary import SLO, build_report
    from servebench.serving.scenario import load_scenario
    from servebench.serving.simulate import simulate
    sc = load_scenario(Path(__file__).resolve().parents[1] / "sample_data" / "scenarios" / "paged_chat.yaml")
    sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"num_requests": 1500})})
    full, compact = simulate(sc), simulate(sc, token_times="runs")
    assert compact.records.token_times is None and compact.token_runs is not None
    assert compact.token_runs.expand().equals(full.records.token_times)
    assert compact.token_runs.ticks.size < full.records.token_times.values.__len__() / 10  # a float per step, not per token
    for slo in (None, SLO(ttft_s=2.0, itl_p99_s=0.05, stall_s=0.08)):
        a = build_report(full.records, full.window_start_s, full.window_end_s, slo)
        b = build_report(compact.records, compact.window_start_s, compact.window_end_s, slo,
                         token_runs=compact.token_runs)
        assert a.itl_s is not None and a.stalls is not None and a.stalls.stalled > 0
        assert a.model_dump() == b.model_dump()


@settings(max_examples=150, deadline=None)
@given(_appends(), st.lists(st.tuples(st.integers(0, 11), st.integers(1, 3)), max_size=6), st.booleans())
def test_taking_the_runs_gives_what_to_runs_gives_without_the_log_keeping_them(
        case: tuple[int, list[tuple[list[int], list[float]]]], group: list[tuple[int, int]], rows_early: bool) -> None:
    n = case[0]
    log = TokenLog(int) if rows_early else TokenLog()  # keys made rows as runs begin, or at the end
    for rows, times in case[1]:
        keys = [str(r) for r in rows]  # the simulator names rows by request ID
        if len(times) == 1:
            log.add_step(keys, times[0])
        else:
            log.add_run(keys, np.array(times))
    t = max((times[-1] for _, times in case[1]), default=0.0)
    first = 0
    for row, steps in group:  # the scheduler's cohort: group ticks, and a row's run over some of them
        log.add_group([t + 1.0 + k for k in range(steps)])
        log.add_group_run(str(row % n), first, first + steps)
        first += steps
        t += steps + 1.0
    expected = _log_of(case).to_runs(n) if not group else None
    if expected is not None:  # the same appends under integer keys: the same runs
        assert np.array_equal(log.to_runs(n).run_row, expected.run_row)
    expected = log.to_runs(n)
    taken = log.take_runs(n)
    for name in ("ticks", "run_row", "run_start", "run_len"):
        assert np.array_equal(getattr(taken, name), getattr(expected, name)), name
    assert taken.expand().to_pylist() == expected.expand().to_pylist()
    empty = log.to_runs(n)
    assert empty.ticks.size == 0 and empty.run_row.size == 0  # the log gave its ticks and runs up


@settings(max_examples=200, deadline=None)
@given(_appends(), st.data(), st.sampled_from([1, 2, 3, 7]))
def test_run_gaps_merged_a_small_block_at_a_time_equal_the_gaps_of_the_expanded_times(
        case: tuple[int, list[tuple[list[int], list[float]]]], data: st.DataObject, block: int) -> None:
    import servebench.records.token_times as token_times
    n = case[0]
    runs = _log_of(case).to_runs(n)
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    saved, token_times._GAP_BLOCK = token_times._GAP_BLOCK, block  # blocks of steps, joins and merged values
    try:
        repeated = runs.gaps().sorted_of(mask)
    finally:
        token_times._GAP_BLOCK = saved
    expected = gaps(runs.expand()).sorted_of(mask)
    assert repeated[0:repeated.size].tolist() == expected.tolist()
    assert np.all(np.diff(repeated.values) > 0) and np.all(repeated.counts > 0)  # each gap once, with its copies


@settings(max_examples=300, deadline=None)
@given(_appends(), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 3), st.integers(1, 3)), max_size=8),
       st.sampled_from([1, 2, 3, 7, 1 << 20]))
def test_each_rows_longest_gap_from_the_runs_equals_the_expanded_times(
        case: tuple[int, list[tuple[list[int], list[float]]]], group: list[tuple[int, int, int]], block: int) -> None:
    """max_gap without expanding: runs of both kinds (a cohort's, some of no tick), ranges cut at every block size."""
    import servebench.records.token_times as token_times
    n = case[0]
    log = _log_of(case)
    t = max((times[-1] for _, times in case[1]), default=0.0)
    first = 0
    for row, steps, added in group:  # a cohort member over `steps` of the group's ticks (0: it left before one)
        log.add_group([t + 0.5 * k * k for k in range(1, added + 1)])
        log.add_group_run(row % n, first, first + min(steps, added))
        first += added
        t += 0.5 * added * added + 0.125
    runs = log.to_runs(n)
    saved, token_times._GAP_BLOCK = token_times._GAP_BLOCK, block  # runs a chunk at a time, ticks a block at a time
    try:
        found = runs.gaps().max_gap
    finally:
        token_times._GAP_BLOCK = saved
    assert _same(found, gaps(runs.expand()).max_gap)
