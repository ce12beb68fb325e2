"""What a trace asks of a server: request count and rate, its busiest minute, token lengths, prefix reuse.

The rules (``docs/traces.md`` compares them with the papers):

* ``duration_s`` is the last arrival after the first; ``rate_rps`` is requests / duration (None for a
  trace of one instant).
* ``peak_rate_rps`` is the most arrivals in any half-open 60 s window ``[t, t + 60)``, over 60 s (a busiest
  window starts at an arrival). None when the trace spans less than 60 s: its busiest minute is unknown.
* Token lengths: mean, nearest-rank p50, p90, p99 (``percentiles.nearest_rank``) and max, over every
  request, failed ones included (a trace is the traffic offered).
* ``prefix`` (traces with block hashes only, else None): ``reusable_token_share`` is the share of prompt
  tokens an unbounded cache serves (a request's leading blocks already seen, capped at its prompt), and
  ``hit_rate_by_capacity`` an LRU block cache's share at 1, 2, 3 and 5 x 10^k tokens from 10^5 to 10^8
  (``prefix_reuse`` gives the model and how all capacities come from one pass).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from servebench.analysis.percentiles import nearest_rank
from servebench.analysis.prefix_reuse import hit_tokens
from servebench.records.traces import Trace

PEAK_WINDOW_S = 60.0
CAPACITIES_TOKENS: tuple[int, ...] = tuple(m * 10 ** k for k in range(5, 8) for m in (1, 2, 3, 5)) + (10 ** 8,)


@dataclass(frozen=True)
class TokenStats:
    """A token-length distribution: mean, nearest-rank percentiles and max."""

    mean: float
    p50: int
    p90: int
    p99: int
    max: int


@dataclass(frozen=True)
class CacheHitRate:
    """The share of prompt tokens an LRU block cache of this size serves."""

    capacity_tokens: int
    token_hit_rate: float | None


@dataclass(frozen=True)
class PrefixStats:
    """Prefix reuse of a trace with block hashes."""

    block_tokens: int
    reusable_token_share: float | None
    hit_rate_by_capacity: list[CacheHitRate]


@dataclass(frozen=True)
class TraceStats:
    """What a capacity planner needs from a trace; the fields are ``trace stats --json``'s keys, in order."""

    requests: int
    duration_s: float
    rate_rps: float | None
    prompt_tokens: TokenStats
    output_tokens: TokenStats
    peak_rate_rps: float | None
    prefix: PrefixStats | None


def token_stats(values: np.ndarray) -> TokenStats:
    """Return mean, nearest-rank p50/p90/p99 and max of token counts (at least one).

    >>> token_stats(np.arange(1, 11))
    TokenStats(mean=5.5, p50=5, p90=9, p99=10, max=10)
    """
    n = int(values.size)
    ranks = [nearest_rank(q, n) - 1 for q in (50, 90, 99)]
    part = np.partition(np.asarray(values, dtype=np.int64), sorted(set(ranks + [n - 1])))
    return TokenStats(mean=float(values.mean()), p50=int(part[ranks[0]]), p90=int(part[ranks[1]]),
                      p99=int(part[ranks[2]]), max=int(part[n - 1]))


def busiest_window(arrival_s: np.ndarray, window_s: float = PEAK_WINDOW_S) -> tuple[float, int] | None:
    """Return the start and the arrivals of the busiest window ``[t, t + window_s)`` (the earliest of equals),
    or None if the trace is shorter than the window. ``arrival_s`` is sorted; a busiest window starts at an
    arrival.

    >>> busiest_window(np.array([0.0, 1.0, 2.0, 61.5, 62.0, 63.0, 100.0]), 60.0)
    (61.5, 4)
    """
    if arrival_s.size == 0 or arrival_s[-1] - arrival_s[0] < window_s:
        return None
    inside = np.searchsorted(arrival_s, arrival_s + window_s, side="left") - np.arange(arrival_s.size)
    first = int(np.argmax(inside))
    return float(arrival_s[first]), int(inside[first])


def peak_rate_rps(arrival_s: np.ndarray, window_s: float = PEAK_WINDOW_S) -> float | None:
    """Return the most arrivals in any window ``[t, t + window_s)``, per second; None if the trace is shorter.

    ``arrival_s`` is sorted.

    >>> peak_rate_rps(np.array([0.0, 1.0, 2.0, 61.5, 100.0]), 60.0)
    0.05
    """
    busiest = busiest_window(arrival_s, window_s)
    return None if busiest is None else busiest[1] / window_s


def prefix_stats(trace: Trace, capacities_tokens: tuple[int, ...] = CAPACITIES_TOKENS) -> PrefixStats | None:
    """Return the trace's prefix reuse and LRU hit rates, or None for a trace without block hashes."""
    if trace.hash_offsets is None or trace.hash_values is None or trace.block_tokens is None:
        return None
    total = int(trace.prompt_tokens.sum())
    reusable, hits = hit_tokens(trace.hash_offsets, trace.hash_values, trace.prompt_tokens, trace.block_tokens,
                                capacities_tokens)
    return PrefixStats(
        block_tokens=trace.block_tokens,
        reusable_token_share=reusable / total if total else None,
        hit_rate_by_capacity=[CacheHitRate(capacity_tokens=int(c), token_hit_rate=h / total if total else None)
                              for c, h in zip(capacities_tokens, hits)])


def trace_stats(trace: Trace) -> TraceStats:
    """Return what a capacity planner needs from a trace (at least one request, in arrival order)."""
    duration_s = float(trace.arrival_s[-1] - trace.arrival_s[0])
    return TraceStats(requests=len(trace), duration_s=duration_s,
                      rate_rps=len(trace) / duration_s if duration_s > 0 else None,
                      prompt_tokens=token_stats(trace.prompt_tokens), output_tokens=token_stats(trace.output_tokens),
                      peak_rate_rps=peak_rate_rps(trace.arrival_s), prefix=prefix_stats(trace))
