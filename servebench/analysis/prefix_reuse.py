"""Prefix-block reuse of a trace: the tokens an unbounded cache would serve, and an LRU block cache's hit rates.

The model, for every capacity at once:

* A request hits its *leading* blocks that are in the cache when it arrives, up to the first that is not
  (a prefix cache matches a prefix; a block after a miss is recomputed). A hit block serves its tokens:
  ``block_tokens``, fewer for a partial last block, never more than the prompt.
* Then every block of the request is referenced, tail first, so the head is the most recent: a shared
  prefix outlives the tails hanging off it, as vLLM frees a finished request's blocks in reverse order and
  SGLang's radix tree evicts leaves first. A cache of C tokens keeps the ``C // block_tokens`` most recently
  referenced blocks (a partial block takes a whole one).

How: LRU is a stack algorithm (Mattson et al., 1970). A cache of k blocks holds exactly the top k of one
LRU stack, so a block is in every cache of at least ``depth`` blocks, where ``depth`` is its place in the
stack when the request arrives (1 = most recent), and a leading block ``j`` hits wherever the largest depth
among blocks ``0..j`` fits. One pass gives every capacity's hit rate: 0.11 s of CPU for all 13 capacities on
the Mooncake conversation trace (288,500 block references), where a simulation per capacity (an
``OrderedDict`` of blocks, the tests' reference) takes 0.08 s each, 1 s for 13 (``benchmarks/traces.py``).

The depths themselves are counted without a loop. Number the references in time order; for a block last
referenced at time ``a`` before a request that starts at time ``b``, its depth is the number of blocks whose
latest reference before ``b`` is at ``a`` or later: the references in ``[a, b)`` minus those referenced again
before ``b``. That count, "references at ``a`` or later whose next reference comes before ``b``", is a
range-rank query over the next-reference times, answered for all references together by a wavelet matrix
(one numpy pass per bit of the time: ``log2`` of the references, 19 on the conversation trace).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

COLD = np.iinfo(np.int64).max  # the depth of a block never referenced before: no cache holds it


def stack_depths(offsets: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Return each block reference's LRU stack depth when its request arrives (``COLD`` if never seen).

    ``offsets`` (requests + 1) and ``values`` are the requests' block IDs in arrival order, as Arrow lists.

    >>> stack_depths(np.array([0, 2, 4, 5]), np.array([7, 8, 7, 9, 8])).tolist() == [COLD, COLD, 1, COLD, 3]
    True
    """
    n = int(values.size)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    request = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    # time of each reference: requests in order, each one's blocks tail first
    time = offsets[request] + offsets[request + 1] - 1 - np.arange(n)
    by_time = np.empty(n, dtype=np.asarray(values).dtype)
    by_time[time] = values
    time_request = np.empty(n, dtype=np.int64)
    time_request[time] = request
    # same block, in time order: the previous and the next reference of each
    order = np.argsort(by_time, kind="stable")
    same = by_time[order[1:]] == by_time[order[:-1]]
    later, earlier = order[1:][same], order[:-1][same]
    next_time = np.full(n, n, dtype=np.int64)
    next_time[earlier] = later
    # the reference before this request: a block named twice in one request takes its first naming's
    group_start = np.ones(n, dtype=bool)
    group_start[1:] = ~same | (time_request[order[1:]] != time_request[order[:-1]])
    prev_sorted = np.full(n, -1, dtype=np.int64)
    prev_sorted[1:][same] = order[:-1][same]
    first_of_group = np.maximum.accumulate(np.where(group_start, np.arange(n), 0))
    before = np.empty(n, dtype=np.int64)
    before[order] = prev_sorted[first_of_group]
    seen = before >= 0
    start = offsets[time_request]
    a, b = before[seen], start[seen]
    depth_by_time = np.full(n, COLD, dtype=np.int64)
    depth_by_time[seen] = (b - a) - _WaveletMatrix(next_time).count_less(a, np.full(a.size, n), b)
    return depth_by_time[time]


def leading_depths(offsets: np.ndarray, depths: np.ndarray) -> np.ndarray:
    """Return, for each block, the largest depth among its request's blocks up to it (the cache it needs).

    >>> leading_depths(np.array([0, 3, 5]), np.array([2, 1, 5, 4, 3])).tolist()
    [2, 2, 5, 4, 4]
    """
    if depths.size == 0:
        return depths
    request = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    capped = np.minimum(depths, depths.size + 1)  # COLD becomes one more than any real depth
    span = np.int64(depths.size + 2)
    running = np.maximum.accumulate(request * span + capped) - request * span  # restarts at each request
    return np.where(running > depths.size, COLD, running)


def block_tokens_served(offsets: np.ndarray, prompt_tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    """Return the prompt tokens in each block: ``block_tokens``, fewer in a partial last one, 0 past the prompt.

    >>> block_tokens_served(np.array([0, 3]), np.array([1000]), 512).tolist()
    [512, 488, 0]
    """
    lengths = np.diff(offsets)
    request = np.repeat(np.arange(lengths.size), lengths)
    position = np.arange(int(offsets[-1])) - np.repeat(offsets[:-1], lengths)
    return np.clip(np.asarray(prompt_tokens, dtype=np.int64)[request] - position * block_tokens, 0, block_tokens)


def hit_tokens(offsets: np.ndarray, values: np.ndarray, prompt_tokens: np.ndarray, block_tokens: int,
               capacities_tokens: Sequence[int]) -> tuple[int, list[int]]:
    """Return the prompt tokens an unbounded cache serves, and those an LRU cache of each capacity serves.

    >>> hit_tokens(np.array([0, 2, 4]), np.array([1, 2, 1, 3]), np.array([1024, 700]), 512, [0, 512, 10**6])
    (512, [0, 512, 512])
    """
    needed = leading_depths(offsets, stack_depths(offsets, values))
    tokens = block_tokens_served(offsets, prompt_tokens, block_tokens)
    reusable = int(tokens[needed != COLD].sum())
    order = np.argsort(needed, kind="stable")
    cumulative = np.concatenate(([0], np.cumsum(tokens[order])))
    sorted_needed = needed[order]
    hits = [int(cumulative[np.searchsorted(sorted_needed, int(cap) // block_tokens, side="right")])
            for cap in capacities_tokens]
    return reusable, hits


class _WaveletMatrix:
    """Count, for many ranges at once, the values below a bound (non-negative integers), one pass per bit."""

    def __init__(self, values: np.ndarray) -> None:
        self.bits = max(1, int(values.max()).bit_length())
        self.zeros_before: list[np.ndarray] = []  # per level, from the top bit: zeros among the first i values
        self.zeros: list[int] = []
        current = values
        for level in reversed(range(self.bits)):
            one = ((current >> level) & 1).astype(bool)
            zeros_before = np.zeros(current.size + 1, dtype=np.int64)
            np.cumsum(~one, out=zeros_before[1:])
            self.zeros_before.append(zeros_before)
            self.zeros.append(int(zeros_before[-1]))
            current = np.concatenate((current[~one], current[one]))  # stable: zeros first

    def count_less(self, lo: np.ndarray, hi: np.ndarray, bound: np.ndarray) -> np.ndarray:
        """Return, for each i, how many of ``values[lo[i]:hi[i]]`` are below ``bound[i]`` (< 2 ** bits)."""
        lo, hi = lo.astype(np.int64), hi.astype(np.int64)
        count = np.zeros(lo.size, dtype=np.int64)
        for i, level in enumerate(reversed(range(self.bits))):
            zeros_before = self.zeros_before[i]
            zl, zh = zeros_before[lo], zeros_before[hi]
            one = ((bound >> level) & 1).astype(bool)
            count += np.where(one, zh - zl, 0)  # bound has a 1 here: every value with a 0 is below it
            lo = np.where(one, self.zeros[i] + lo - zl, zl)
            hi = np.where(one, self.zeros[i] + hi - zh, zh)
        return count
