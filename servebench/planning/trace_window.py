"""Sizing for a trace: its busiest minute as the planner's workload (``servebench plan --trace FILE``).

The rules (``docs/planner.md``, "Sizing for a trace"):

* **The window** is the trace's busiest 60 s, ``[t, t + 60)`` with the most arrivals (the window of
  ``trace stats``' ``peak_rate_rps``; the earliest of equals), or the whole trace when it spans less.
* **The rate to serve** is the window's requests over its length: the peak rate, not the mean.
* **A replica's capacity** is found by replaying the window's requests, with their own bursts, lengths
  and prefix blocks, at speedups: a replica that meets the SLOs at speedup ``s`` serves ``s`` times the
  window's rate. The planner searches in requests per second as it does for a drawn workload and turns
  each load into the speedup that offers it (:func:`speedup_for`).
* **Prefix reuse**: with prefix caching the engine computes only what its cache does not serve, so the
  throughput bound and the unloaded check count each prompt less the tokens an unbounded cache serves
  within the window (:func:`computed_prompt_tokens`), which no real cache beats: the bound stays a bound.
  The cache starts cold at the window's start, so the simulated reuse is at most the trace's.
"""

from __future__ import annotations

import numpy as np

from servebench.analysis.prefix_reuse import COLD, block_tokens_served, leading_depths, stack_depths
from servebench.analysis.trace_stats import PEAK_WINDOW_S, busiest_window
from servebench.errors import ConfigError
from servebench.serving.trace_replay import read_cached
from servebench.serving.workload import TraceSpec, Workload, WorkloadSpec, replay_trace


def busiest_minute(path: str, fmt: str = "auto") -> TraceSpec:
    """Return the replay of a trace's busiest 60 s (the whole trace when it spans less)."""
    trace = read_cached(path, fmt)
    busiest = busiest_window(trace.arrival_s, PEAK_WINDOW_S)
    if busiest is None:
        return TraceSpec(path=path, format=fmt)
    return TraceSpec(path=path, format=fmt, start_s=busiest[0], duration_s=PEAK_WINDOW_S)


def window_requests(spec: TraceSpec) -> Workload:
    """Return the requests of a trace replay at speedup 1 (its window, unchanged)."""
    return replay_trace(WorkloadSpec(trace=spec.with_speedup(1.0)))


def window_rate_rps(spec: TraceSpec) -> float:
    """Return a window's requests per second at speedup 1: over ``duration_s`` when given, else over the span
    of its arrivals (``requests - 1`` gaps, as a sweep counts its offered rate).

    Raises ConfigError when every request of the window arrives at one instant (no rate to scale).
    """
    requests = window_requests(spec)
    n = len(requests)
    if spec.duration_s is not None:
        return n / spec.duration_s
    span_s = float(requests.arrival_s[-1] - requests.arrival_s[0])
    if n < 2 or span_s <= 0:
        raise ConfigError(f"trace {spec.path}: its {n} replayed requests arrive at one instant, so they have no "
                          "rate; give the rate to serve with --rate")
    return (n - 1) / span_s


def speedup_for(load_rps: float, window_rps: float) -> float:
    """Return the speedup at which a window offered at ``window_rps`` offers ``load_rps``.

    >>> speedup_for(6.0, 4.0)
    1.5
    """
    return load_rps / window_rps


def computed_prompt_tokens(requests: Workload) -> np.ndarray:
    """Return each prompt's tokens less those an unbounded prefix cache serves within these requests.

    A request is served its leading blocks seen in an earlier request of the window (trace stats' rule);
    without block IDs every token is computed.
    """
    prompts = requests.prompt_tokens
    blocks = requests.trace_blocks
    if blocks is None or blocks.values.size == 0:
        return prompts.copy()
    needed = leading_depths(blocks.offsets, stack_depths(blocks.offsets, blocks.values))
    tokens = block_tokens_served(blocks.offsets, prompts, blocks.block_tokens)
    owner = np.repeat(np.arange(len(requests)), np.diff(blocks.offsets))
    served = np.bincount(owner, weights=np.where(needed != COLD, tokens, 0), minlength=len(requests))
    return prompts - served.astype(np.int64)
