"""trace stats: percentiles, the busiest window, prefix reuse and LRU hit rates, each against a plain reference."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from conftest import SAMPLE_DATA
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.analysis.prefix_reuse import COLD, hit_tokens, stack_depths
from servebench.analysis.trace_stats import CAPACITIES_TOKENS, peak_rate_rps, token_stats, trace_stats
from servebench.records.traces import Trace, read_trace


def tiny_trace(blocks: list[list[int]], prompts: list[int], block_tokens: int = 512,
               arrivals: list[float] | None = None) -> Trace:
    offsets = np.concatenate(([0], np.cumsum([len(b) for b in blocks]))).astype(np.int64)
    n = len(blocks)
    return Trace(source="tiny", format="mooncake",
                 arrival_s=np.asarray(arrivals if arrivals is not None else np.arange(n), dtype=np.float64),
                 prompt_tokens=np.asarray(prompts, dtype=np.int64), output_tokens=np.ones(n, dtype=np.int64),
                 row=np.arange(1, n + 1), hash_offsets=offsets,
                 hash_values=np.asarray([b for bs in blocks for b in bs], dtype=np.int64), block_tokens=block_tokens)


# --- plain references ------------------------------------------------------------------------------------------

def plain_nearest_rank(values: list[int], q: int) -> int:
    ordered = sorted(values)
    rank = -(-q * len(ordered) // 100)  # ceil(q n / 100) in integers
    return ordered[max(rank, 1) - 1]


def lru_simulation(blocks: list[list[int]], prompts: list[int], block_tokens: int, capacity_blocks: int) -> int:
    """Replay an LRU block cache with an OrderedDict: a request hits its leading cached blocks, then
    references its blocks tail first (head most recent). Return the prompt tokens served."""
    cache: OrderedDict[int, None] = OrderedDict()
    served = 0
    for request, prompt in zip(blocks, prompts):
        for j, block in enumerate(request):
            if block not in cache:
                break
            served += min(block_tokens, max(0, prompt - j * block_tokens))
        for block in reversed(request):
            cache[block] = None
            cache.move_to_end(block)
            while len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return served


def seen_simulation(blocks: list[list[int]], prompts: list[int], block_tokens: int) -> int:
    """The prompt tokens an unbounded cache serves: an LRU cache that never evicts."""
    return lru_simulation(blocks, prompts, block_tokens, capacity_blocks=sum(len(b) for b in blocks))


requests_st = st.lists(st.lists(st.integers(0, 12), max_size=7), min_size=1, max_size=25)


# --- token lengths and rates ----------------------------------------------------------------------------------

@given(st.lists(st.integers(0, 10 ** 6), min_size=1, max_size=300))
def test_token_percentiles_are_the_nearest_rank(values):
    stats = token_stats(np.asarray(values))
    assert (stats.p50, stats.p90, stats.p99) == tuple(plain_nearest_rank(values, q) for q in (50, 90, 99))
    assert stats.max == max(values) and np.isclose(stats.mean, sum(values) / len(values))


def test_token_percentiles_edge_cases():
    assert token_stats(np.array([7])) == token_stats(np.array([7]))
    one = token_stats(np.array([7]))
    assert (one.p50, one.p90, one.p99, one.max) == (7, 7, 7, 7)
    ten = token_stats(np.arange(1, 11))  # p90 of 10 values is the 9th
    assert (ten.p50, ten.p90, ten.p99) == (5, 9, 10)


@given(st.lists(st.floats(0, 400, allow_nan=False), min_size=1, max_size=80))
def test_peak_rate_is_the_busiest_half_open_minute(times):
    arrival = np.sort(np.asarray(times))
    got = peak_rate_rps(arrival, 60.0)
    if arrival[-1] - arrival[0] < 60:
        assert got is None
    else:
        most = max(sum(1 for u in arrival if t <= u < t + 60) for t in arrival)
        assert got == most / 60


def test_rates_of_a_short_trace():
    stats = trace_stats(tiny_trace([[1]], [10]))
    assert stats.requests == 1 and stats.duration_s == 0.0 and stats.rate_rps is None and stats.peak_rate_rps is None
    stats = trace_stats(tiny_trace([[1], [2], [3]], [10, 10, 10], arrivals=[0.0, 30.0, 90.0]))
    assert stats.rate_rps == 3 / 90 and stats.peak_rate_rps == 2 / 60


# --- prefix reuse ---------------------------------------------------------------------------------------------

def test_reusable_token_share_by_hand():
    # A: blocks 1 2 3, 1200 tokens (512 + 512 + 176): nothing seen before.
    # B: blocks 1 2 4, 1100 tokens: 1 and 2 seen, 4 not: 1,024 tokens.
    # C: blocks 5 1, 600 tokens: 5 not seen, so nothing after it either (1 is not leading): 0.
    # D: blocks 1 2 3, 700 tokens: all seen, but the prompt ends in the second block: 700.
    trace = tiny_trace([[1, 2, 3], [1, 2, 4], [5, 1], [1, 2, 3]], [1200, 1100, 600, 700])
    prefix = trace_stats(trace).prefix
    assert prefix.block_tokens == 512
    assert prefix.reusable_token_share == (1024 + 700) / (1200 + 1100 + 600 + 700)


def test_stack_depths_by_hand():
    # requests [7 8] [7 9] [8]: the tail is referenced first, so after request 2 the stack is 7, 9, 8
    assert stack_depths(np.array([0, 2, 4, 5]), np.array([7, 8, 7, 9, 8])).tolist() == [COLD, COLD, 1, COLD, 3]


@settings(max_examples=300, deadline=None)
@given(requests_st, st.data())
def test_lru_hit_rates_match_an_ordered_dict_simulation(blocks, data):
    block_tokens = data.draw(st.sampled_from([1, 4, 512]))
    prompts = [data.draw(st.integers(0, (len(b) + 1) * block_tokens)) for b in blocks]
    capacity_blocks = data.draw(st.lists(st.integers(0, 15), min_size=1, max_size=5))
    capacities = [c * block_tokens + data.draw(st.integers(0, block_tokens - 1)) for c in capacity_blocks]
    trace = tiny_trace(blocks, prompts, block_tokens)
    reusable, hits = hit_tokens(trace.hash_offsets, trace.hash_values, trace.prompt_tokens, block_tokens, capacities)
    assert hits == [lru_simulation(blocks, prompts, block_tokens, c // block_tokens) for c in capacities]
    assert reusable == seen_simulation(blocks, prompts, block_tokens)


@settings(max_examples=100, deadline=None)
@given(requests_st)
def test_hit_rates_grow_with_capacity_up_to_the_reusable_share(blocks):
    prompts = [512 * len(b) for b in blocks]
    reusable, hits = hit_tokens(*_lists(blocks), np.asarray(prompts), 512, [512 * c for c in range(0, 16)])
    assert hits == sorted(hits) and hits[0] == 0 and hits[-1] <= reusable
    assert hits[-1] == reusable  # 15 blocks hold every distinct block (at most 13)


def _lists(blocks):
    offsets = np.concatenate(([0], np.cumsum([len(b) for b in blocks]))).astype(np.int64)
    return offsets, np.asarray([b for bs in blocks for b in bs], dtype=np.int64)


def test_no_prefix_without_hashes():
    assert trace_stats(read_trace(SAMPLE_DATA / "traces" / "azure_code_2023_300.csv")).prefix is None


def test_mooncake_excerpt_against_the_simulation():
    trace = read_trace(SAMPLE_DATA / "traces" / "mooncake_conversation_300.jsonl")
    prefix = trace_stats(trace).prefix
    blocks = [trace.hash_values[a:b].tolist() for a, b in zip(trace.hash_offsets[:-1], trace.hash_offsets[1:])]
    prompts = trace.prompt_tokens.tolist()
    total = sum(prompts)
    assert [h.capacity_tokens for h in prefix.hit_rate_by_capacity] == list(CAPACITIES_TOKENS)
    for h in prefix.hit_rate_by_capacity[:6]:
        assert h.token_hit_rate == lru_simulation(blocks, prompts, 512, h.capacity_tokens // 512) / total
    assert prefix.reusable_token_share == seen_simulation(blocks, prompts, 512) / total
    assert prefix.hit_rate_by_capacity[-1].token_hit_rate == prefix.reusable_token_share
