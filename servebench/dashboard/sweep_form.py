"""What the Load sweep page asks of a scenario: what its load is, the grid offered first, and its workload.

A scenario that replays a trace is swept by its speedup, as ``servebench sweep`` sweeps it: its requests,
their bursts and lengths come from the trace, so it has no mix of request classes to edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servebench.errors import ConfigError
from servebench.formatting import fmt
from servebench.serving.engine.sweep_validation import replay_rate_rps
from servebench.serving.scenario import Scenario
from servebench.serving.sweep import Mode, default_speedups, sweep_mode

RATE_GRID = "0.25, 0.5, 0.75, 1, 1.25, 1.5, 2"  # requests/s: the page's first grid for drawn arrivals
USERS_GRID = "1, 2, 4, 8, 16, 32"
SLO_TTFT_MS = 5000.0  # the page's first TTFT limit: 5 s, typed in ms as every TTFT limit on the dashboard
SPEEDUP_POINTS = 6  # a trace's first grid: this many speedups from 0.25x to 2.5x its own (default_speedups)


@dataclass(frozen=True)
class LoadAxis:
    """How the page asks for a scenario's loads: the sweep's mode, the input's label and its first grid."""

    mode: Mode
    label: str
    default_loads: str


def load_axis(scenario: Scenario) -> LoadAxis:
    """Return how the page sweeps ``scenario``: a trace by its speedup, open loop by rate, closed loop by users.

    >>> from servebench.serving.scenario import parse_scenario
    >>> load_axis(parse_scenario({"server": {"kv_budget_tokens": 10}, "step_model": {},
    ...     "workload": {"closed_loop": {"users": 2}, "num_requests": 4,
    ...                  "classes": [{"prompt": {"value": 1}, "output": {"value": 1}}]}})).label
    'Concurrent users'
    """
    mode = sweep_mode(scenario, users=scenario.workload.closed_loop is not None)
    if mode == "speedup":
        grid = ", ".join(f"{x:g}" for x in default_speedups(scenario, SPEEDUP_POINTS))
        return LoadAxis(mode, "Trace speedups (x the trace's own arrival rate)", grid)
    if mode == "users":
        return LoadAxis(mode, "Concurrent users", USERS_GRID)
    return LoadAxis(mode, "Offered loads (requests/s)", RATE_GRID)


def replay_caption(scenario: Scenario) -> str | None:
    """Say where a trace replay's requests come from, in place of a mix to edit (None: it draws its requests)."""
    trace = scenario.workload.trace
    if trace is None:
        return None
    try:
        rate_rps, requests = replay_rate_rps(scenario)
        rate = f"{requests:,} requests at {fmt(rate_rps)} requests/s at speedup 1"
    except ConfigError:  # every request at one instant: no rate to say
        rate = "its requests at one instant"
    return (f"The trace {Path(trace.path).name} gives every request ({rate}): its arrival times, divided by the "
            "speedup swept below, and its prompt and output tokens, so there is no mix to edit.")
