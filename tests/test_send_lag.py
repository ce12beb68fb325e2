"""One send-lag rule for the engine's arrival thread and the load generator."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.load.client import HttpOutcome
from servebench.load.generator import LagStats, lag_warning
from servebench.serving.send_lag import lag_threshold_s, sent_late


def test_threshold_is_ten_ms_or_five_percent_of_the_median() -> None:
    assert lag_threshold_s(None) == 0.010
    assert lag_threshold_s(0.1) == 0.010  # 5% of 100 ms is 5 ms: the floor holds
    assert lag_threshold_s(2.0) == pytest.approx(0.1)
    assert not sent_late(0.010, None) and sent_late(0.0101, None)  # above, not at, the threshold


@settings(max_examples=80, deadline=None, derandomize=True)
@given(lag_ms=st.integers(0, 200), median_ms=st.integers(1, 3000))
def test_engine_run_and_load_generator_call_the_same_lag_late(lag_ms: int, median_ms: int) -> None:
    pytest.importorskip("torch")
    from servebench.serving.engine.runner import arrival_lag_note

    lag_s, median_s = lag_ms / 1000, median_ms / 1000
    records = [{"status": "success", "start": 0.0, "first_token": median_s, "end": median_s}]  # median TTFT
    engine_late = arrival_lag_note(lag_s, lag_s, records) is not None
    outcomes = [HttpOutcome(request_id="r", intended_s=0.0, status="success", sent_s=0.0, end_s=median_s)]
    stats = LagStats(n=1, p50_s=lag_s, p99_s=lag_s, max_s=lag_s, mean_s=lag_s)  # median latency
    load_late = lag_warning(stats, outcomes, "open") is not None
    assert engine_late == load_late == sent_late(lag_s, median_s)
