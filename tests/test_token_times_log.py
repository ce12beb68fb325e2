"""TokenLog: each row's token arrivals kept as runs of the emission times, expanded exactly."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.records.token_times import TokenLog


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
                                                     sized: bool) -> None:
    n, appends = case
    log = TokenLog(n if sized else 0)  # an unsized log grows as rows come
    expected: list[list[float]] = [[] for _ in range(n)]
    for rows, times in appends:
        if len(times) == 1:
            log.add_step(list(rows), times[0])
        else:
            log.add_run(list(rows), np.array(times))
        for r in rows:
            expected[r].extend(times)
    assert log.to_arrow(n).to_pylist() == [e or None for e in expected]


def test_a_row_that_gets_every_tick_is_one_run_and_a_gap_starts_another() -> None:
    log = TokenLog(3)
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
    log = TokenLog(50)
    t = 0.0
    for _ in range(200):
        rows = rng.choice(50, size=int(rng.integers(1, 20)), replace=False).tolist()
        k = int(rng.integers(1, 6))
        times = t + np.cumsum(rng.random(k))
        t = float(times[-1])
        log.add_run(rows, times)
    whole = log.to_arrow(50).to_pylist()
    monkeypatch.setattr(TokenLog, "_CHUNK_TOKENS", 7)  # many small chunks, each cut inside the runs' order
    assert log.to_arrow(50).to_pylist() == whole
