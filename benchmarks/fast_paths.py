"""Measure every hand-written fast path a servebench docstring or comment claims, against the plain call.

Each case times the hand-written version and the plain library call on the same data, in this one run,
alternating the two, and checks that both give the same result; ``ratio`` is plain CPU time /
hand-written CPU time (each the best of ``--repeat``), so 3.0 means the hand-written version takes a
third of the time. The rule (issue 15): a
fast path stays only where it buys 2x or more, and a docstring quotes no speed-up this file does not
measure. Fast paths that bought less were replaced by the plain call; their old code is kept here (the
``_old_*`` functions) so the measurement that dropped them can be repeated.

  case               servebench now        what is compared
  null_mask          hand-written (kept)   records.arrow_masks.null_mask (validity bitmap unpacked with
                                           numpy) vs pyarrow is_null().to_numpy(); 10M rows, 8 chunks
  bool_values        plain call (dropped)  the old bitmap unpacking vs pyarrow fill_null().to_numpy()
  blocked_search     plain call (dropped)  analysis.timeline's old blocked np.searchsorted vs one call;
                                           10M sorted arrivals against 10M sorted departures
  peak_buckets       plain sweep (dropped) analysis.timeline's old time buckets (sort only the events near
                                           the peak) vs the two-sort sweep; 10M Poisson arrivals
  peak_blocks        hand-written (kept)   analysis.timeline's peak from blocks of 64 arrivals bounded by their
                                           first arrival's count vs counting after every arrival (one
                                           np.searchsorted); 10M Poisson arrivals, sorted
  index_select_2d    plain call (dropped)  engine.model.paged_attention's old index_select on a 2-D view
                                           of the KV cache vs indexing the 3-D cache (torch, CPU, 1 thread)
  flush_denormals    hand-written (kept)   engine.model.denormals_flushed vs not: a matmul over denormal
                                           weights, as random weights produce (torch, CPU, 1 thread)
  sort_vs_partition  a choice              analysis.percentiles and the report partition at the ranks a
                                           distribution reads (np.partition); the alternative is one sort;
                                           1M values. Which is faster depends on the CPU: numpy's SIMD sort
                                           made the sort 2x faster on one machine, 3.9x slower on another
  list_dictionary    writer option         records.loaders.encode_records writes list columns without
                                           dictionary pages: reading 1M rows of token_times (12M floats)
                                           written without vs with them

Results: benchmarks/results/fast_paths.json (machine, load, and per case: both CPU times, the ratio, the
claim, what servebench uses, and whether the results matched). A kept fast path under 2x, or a dropped
one at 2x or more, is printed as a warning.

    python benchmarks/fast_paths.py [--repeat 5] [--only NAME,...]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
KEPT, DROPPED, CHOICE = "hand-written (kept)", "plain call (hand-written one dropped)", "not a fast path (a choice)"


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """Return fn's result and the CPU seconds it took (this process, every thread)."""
    t0 = time.process_time()
    out = fn()
    return out, time.process_time() - t0


def compare(name: str, uses: str, claim: str, fast: Callable[[], Any], plain: Callable[[], Any],
            same: Callable[[Any, Any], bool], repeat: int) -> dict[str, Any]:
    """Time the hand-written version and the plain call, alternating (so a change in the machine's load hits
    both), keep each one's best CPU time, check they agree, and return the row."""
    fast_s = plain_s = float("inf")
    fast_out = plain_out = None
    for _ in range(repeat):
        fast_out, t = timed(fast)
        fast_s = min(fast_s, t)
        plain_out, t = timed(plain)
        plain_s = min(plain_s, t)
    ratio = plain_s / fast_s if fast_s > 0 else None
    row = {"servebench_uses": uses, "claim": claim, "hand_written_cpu_s": fast_s, "plain_cpu_s": plain_s,
           "ratio": ratio, "same_result": bool(same(fast_out, plain_out))}
    print(f"{name:18s} hand-written {fast_s * 1e3:9.2f} ms  plain {plain_s * 1e3:9.2f} ms  ratio {ratio:.2f}x"
          f"  same={row['same_result']}  ({uses})")
    if ratio is not None and ((uses == KEPT and ratio < 2) or (uses == DROPPED and ratio >= 2)):
        print(f"  warning: {name} measures {ratio:.2f}x; the 2x rule now says the other way")
    return row


def bool_column(n: int, chunks: int, seed: int = 3) -> pa.ChunkedArray:
    rng = np.random.default_rng(seed)
    values = rng.random(n) < 0.5
    nulls = rng.random(n) < 0.05
    return pa.chunked_array([pa.array(v, mask=m) for v, m in zip(np.array_split(values, chunks),
                                                                 np.array_split(nulls, chunks))])


def case_null_mask(repeat: int) -> dict[str, Any]:
    from servebench.records.arrow_masks import null_mask
    arr = bool_column(10_000_000, 8)
    return compare("null_mask", KEPT, "module docstring: 2.3x to 3.6x (it said 'tens of times' before)",
                   lambda: null_mask(arr), lambda: pc.is_null(arr).to_numpy(),
                   np.array_equal, repeat)


def _old_bool_values(arr: pa.ChunkedArray, null_as: bool) -> np.ndarray:
    """arrow_masks.bool_values as it was: each chunk's value bitmap unpacked with numpy."""
    from servebench.records.arrow_masks import _bits, chunks_of, join_masks, null_mask
    parts = []
    for chunk in chunks_of(arr):
        values = _bits(chunk.buffers()[1], chunk.offset, len(chunk))
        if chunk.null_count:
            values = np.where(null_mask(chunk), null_as, values)
        parts.append(values)
    return join_masks(parts)


def case_bool_values(repeat: int) -> dict[str, Any]:
    from servebench.records.arrow_masks import bool_values
    arr = bool_column(10_000_000, 8)
    return compare("bool_values", DROPPED, "'tens of times faster' (arrow_masks docstring, removed)",
                   lambda: _old_bool_values(arr, True), lambda: bool_values(arr, null_as=True),
                   np.array_equal, repeat)


def _old_blocked_searchsorted(haystack: np.ndarray, needles: np.ndarray, block: int = 4096) -> np.ndarray:
    """timeline._count_at_or_before as it was: each block of needles searches only its stretch of haystack."""
    out = np.empty(needles.size, dtype=np.intp)
    lo = np.searchsorted(haystack, needles[::block], side="right")
    hi = np.append(np.searchsorted(haystack, needles[block - 1::block], side="right"), haystack.size)
    for k, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
        sl = slice(k * block, (k + 1) * block)
        out[sl] = np.searchsorted(haystack[a:b], needles[sl], side="right")
        out[sl] += a
    return out


def poisson_spans(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    start = np.cumsum(rng.exponential(0.001, n))
    return start, start + rng.lognormal(0, 0.5, n)


def case_blocked_search(repeat: int) -> dict[str, Any]:
    start, end = poisson_spans(10_000_000, 7)
    end = np.sort(end)
    return compare("blocked_search", DROPPED, "'1.5x faster at ten million values' (timeline, removed)",
                   lambda: _old_blocked_searchsorted(end, start), lambda: np.searchsorted(end, start, side="right"),
                   np.array_equal, repeat)


def _old_peak_by_buckets(start: np.ndarray, end: np.ndarray, events_per_bucket: int = 4,
                         max_exact_share: float = 0.2) -> tuple[int, np.ndarray, np.ndarray] | None:
    """timeline._peak_by_buckets as it was: count per time bucket, then sort and walk only the buckets
    that could hold the peak (and the next non-empty one after each); None when too many could."""
    t0, t1 = float(start.min()), float(end.max())
    n_buckets = max(1, start.size // events_per_bucket)
    scale = n_buckets / (t1 - t0) if t1 > t0 else 0.0
    if not (math.isfinite(scale) and scale > 0):
        return None

    def bucket_of(times: np.ndarray) -> np.ndarray:
        b = times - t0
        b *= scale
        return b.astype(np.int32 if n_buckets < 2**31 - 2 else np.int64)

    b_start, b_end = bucket_of(start), bucket_of(end)
    size = n_buckets + 2
    arrivals = np.bincount(b_start, minlength=size)
    departures = np.bincount(b_end, minlength=size)
    open_before = np.zeros(arrivals.size, dtype=np.int64)
    np.cumsum(arrivals[:-1] - departures[:-1], out=open_before[1:])
    candidate = (arrivals > 0) & (open_before + arrivals >= open_before.max())
    nonempty = np.flatnonzero(arrivals + departures)
    picked = candidate.copy()
    following = np.searchsorted(nonempty, np.flatnonzero(candidate), side="right")
    picked[nonempty[np.minimum(following, nonempty.size - 1)]] = True
    from_start, from_end = picked[b_start], picked[b_end]
    n_picked = int(np.count_nonzero(from_start)) + int(np.count_nonzero(from_end))
    if n_picked > max_exact_share * 2 * start.size:
        return None
    times = np.concatenate([end[from_end], start[from_start]])
    is_arrival = np.concatenate([np.zeros(n_picked - int(np.count_nonzero(from_start)), dtype=np.int8),
                                 np.ones(int(np.count_nonzero(from_start)), dtype=np.int8)])
    order = np.lexsort((is_arrival, times))
    times, is_arrival = times[order], is_arrival[order]
    bucket = np.concatenate([b_end[from_end], b_start[from_start]])[order]
    walked = np.cumsum(is_arrival.astype(np.int64) * 2 - 1)
    run_start = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
    walked_before = np.r_[0, walked][run_start]
    run = np.cumsum(np.r_[True, bucket[1:] != bucket[:-1]]) - 1
    level = open_before[bucket] + walked - walked_before[run]
    peak = int(level.max())
    if peak <= 0:
        return peak, times[:0], times[:0]
    at_peak = np.flatnonzero(level == peak)
    return peak, times[at_peak], times[at_peak + 1]


def case_peak_buckets(repeat: int) -> dict[str, Any]:
    from servebench.analysis import timeline
    start, end = poisson_spans(10_000_000, 11)

    def buckets() -> tuple[int, float]:
        found = _old_peak_by_buckets(start, end)
        assert found is not None, "the bucket path gave up on this data"
        return found[0], float(np.sum(found[2] - found[1]))

    def sweep() -> tuple[int, float]:
        peak, held_from, held_to = timeline._peak_by_sorting(np.sort(start), np.sort(end))
        return peak, float(np.sum(held_to - held_from))

    return compare("peak_buckets", DROPPED, "none in numbers ('sorts only the few events that could be at the peak')",
                   buckets, sweep, lambda a, b: a == b, repeat)


def case_peak_blocks(repeat: int) -> dict[str, Any]:
    from servebench.analysis import timeline
    start, end = poisson_spans(10_000_000, 13)
    s, e = np.sort(start), np.sort(end)

    def every_arrival() -> tuple[int, np.ndarray, np.ndarray]:
        peak, at = timeline._peak_of_every_arrival(s, e)
        return peak, s[at], e[at + 1 - peak]

    def same(a: tuple, b: tuple) -> bool:
        return a[0] == b[0] and np.array_equal(a[1], b[1]) and np.array_equal(a[2], b[2])

    return compare("peak_blocks", KEPT, "timeline._peak_by_sorting: 'about 18x less CPU than searching every "
                   "arrival' (ten million records)", lambda: timeline._peak_by_sorting(s, e), every_arrival,
                   same, repeat)


def case_index_select_2d(repeat: int) -> dict[str, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    from servebench.serving.engine.model import AttentionGroup
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(17)
    slots, kv_heads, head_dim, batch, length = 65_536, 8, 64, 32, 1024
    cache = torch.randn(slots, kv_heads, head_dim, generator=gen)
    keys = torch.randint(0, slots, (batch, length), generator=gen)
    group = AttentionGroup(rows=torch.zeros(batch, 1, dtype=torch.long), keys=keys,
                           mask=torch.ones(batch, 1, length, dtype=torch.bool))

    def old_two_d() -> Any:  # paged_attention as it was: index_select on the cache flattened to 2-D
        return cache.flatten(1).index_select(0, group.keys.flatten()).view(batch, length, kv_heads, -1)

    def plain() -> Any:  # paged_attention now
        return cache[group.keys]

    return compare("index_select_2d", DROPPED, "'gathers several times faster than advanced indexing of the 3-D "
                   "cache' (engine.model.paged_attention, removed)", old_two_d, plain,
                   lambda a, b: bool(torch.equal(a, b)), repeat)


def case_flush_denormals(repeat: int) -> dict[str, Any] | None:
    try:
        import torch
    except ImportError:
        return None
    from servebench.serving.engine.model import denormals_flushed
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(19)
    weights = torch.randn(512, 512, generator=gen) * 1e-39  # denormal float32
    x = torch.randn(64, 512, generator=gen)

    def flushed() -> Any:
        with denormals_flushed():
            return [x @ weights for _ in range(20)][-1]

    def plain() -> Any:
        return [x @ weights for _ in range(20)][-1]

    # the outputs differ by design (flushed to zero vs tiny values); "same" here: both below 1e-30
    return compare("flush_denormals", KEPT, "'x86 arithmetic on them is many times slower' "
                   "(engine.model.denormals_flushed)", flushed, plain,
                   lambda a, b: bool(a.abs().max() < 1e-30 and b.abs().max() < 1e-30), repeat)


def case_sort_vs_partition(repeat: int) -> dict[str, Any]:
    from servebench.analysis.percentiles import nearest_rank, rank_interval
    rng = np.random.default_rng(5)
    values = rng.lognormal(0, 1, 1_000_000)
    n = values.size
    ranks = sorted({r - 1 for q in (50, 90, 95, 99, 99.9)
                    for r in (nearest_rank(q, n), rank_interval(q, n).lower_rank, rank_interval(q, n).upper_rank)
                    if r is not None})
    return compare("sort_vs_partition", CHOICE, "percentiles.estimate and summary._select: a partition at the "
                   "dozen ranks against a sort (the report sorted until the partition measured 3.9x faster "
                   "on an AMD EPYC; on an earlier machine the sort had measured 2x faster)",
                   lambda: np.partition(values, ranks)[ranks], lambda: np.sort(values)[ranks], np.array_equal,
                   repeat)


def case_list_dictionary(repeat: int) -> dict[str, Any]:
    rng = np.random.default_rng(13)
    n, per = 1_000_000, 12
    flat = np.cumsum(rng.exponential(0.03, n * per))
    column = pa.ListArray.from_arrays(pa.array(np.arange(0, n * per + 1, per, dtype=np.int32)), pa.array(flat))
    table = pa.table({"token_times": column})
    files = {}
    for dictionary in (False, True):
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf, use_dictionary=dictionary)
        files[dictionary] = buf.getvalue()
    return compare("list_dictionary", CHOICE, "loaders.encode_records comment: dictionary pages cost reading "
                   "time (it said 'about 2x')", lambda: pq.read_table(pa.BufferReader(files[False])),
                   lambda: pq.read_table(pa.BufferReader(files[True])), lambda a, b: a.equals(b), repeat)


CASES: dict[str, Callable[[int], dict[str, Any] | None]] = {
    "null_mask": case_null_mask, "bool_values": case_bool_values, "blocked_search": case_blocked_search,
    "peak_buckets": case_peak_buckets, "peak_blocks": case_peak_blocks, "index_select_2d": case_index_select_2d,
    "flush_denormals": case_flush_denormals, "sort_vs_partition": case_sort_vs_partition,
    "list_dictionary": case_list_dictionary,
}


def _cpu_model() -> str:
    """The CPU's model name (Linux), since which of two exact methods is faster can depend on it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", default="", help="comma-separated case names")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    machine = {"python": platform.python_version(), "processor": platform.machine(), "cpu": _cpu_model(),
               "cpus": os.cpu_count(), "load_avg_1min": os.getloadavg()[0], "numpy": np.__version__,
               "pyarrow": pa.__version__,
               "note": "CPU time of this process, best of the repeats; ratio = plain / hand-written, both measured "
                       "in this run"}
    path = RESULTS / "fast_paths.json"
    results: dict[str, Any] = {"machine": machine, "repeat": args.repeat}
    if args.only and path.exists():  # measure some cases again: the others keep their rows, each row its machine
        results = json.loads(path.read_text())
    for name in names:
        row = CASES[name](args.repeat)
        if row is not None:
            results[name] = {**row, "measured_on": machine, "repeat": args.repeat} if args.only else row
    RESULTS.mkdir(exist_ok=True)
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
