"""When a sender's lateness matters: one rule for the engine's arrival thread and the load generator.

Both senders stamp each record with the *intended* arrival, so their own delay stays inside the
measured times; the rule says when that delay is large enough to report. A run's p99 send lag
(actual minus intended send time) counts as late above 10 ms or 5% of a median the run measured
(the engine compares with the median success TTFT, the load generator with the median success
latency), whichever is larger.
"""

from __future__ import annotations

LAG_FLOOR_S = 0.010  # lateness below this never matters
LAG_SHARE = 0.05  # nor lateness below this share of the run's median


def lag_threshold_s(median_s: float | None) -> float:
    """Return the p99 send lag above which a sender was late: 10 ms, or 5% of ``median_s`` when larger.

    >>> lag_threshold_s(None), lag_threshold_s(0.1), lag_threshold_s(1.0)
    (0.01, 0.01, 0.05)
    """
    return max(LAG_FLOOR_S, LAG_SHARE * median_s) if median_s is not None else LAG_FLOOR_S


def sent_late(lag_p99_s: float | None, median_s: float | None) -> bool:
    """Return True when a p99 send lag is above :func:`lag_threshold_s` (False when nothing was sent).

    >>> sent_late(0.04, 1.0), sent_late(0.06, 1.0), sent_late(0.011, None), sent_late(None, 1.0)
    (False, True, True, False)
    """
    return lag_p99_s is not None and lag_p99_s > lag_threshold_s(median_s)
