"""A trace's requests as prompts a server can cache: the window replayed, and block hashes turned into content.

The rules (``docs/traces.md``, "Replay"):

* **The window.** A replay takes the trace's requests that arrive in ``[start_s, start_s + duration_s)``
  seconds after the trace's first request (the trace's own clock, whatever the speedup), then the first
  ``max_requests`` of them. A request of 0 output tokens (BurstGPT's failures) is left out: a server
  always generates the first token when the prefill completes, so no server can be sent it as it was.
* **Prompt content.** Block ``j`` of a request with block IDs ``h_0 .. h_k-1`` of ``B`` tokens each
  (Mooncake: 512) is the run of tokens ``[j B, (j + 1) B)`` of its prompt, its text a deterministic run
  of token IDs of its own per ID (:func:`servebench.serving.prefix_cache.segment_tokens`, the segment
  ``block_segment(h_j)``); a partial last block is the first tokens of that run, and the prompt past the
  last block is the request's own text. Equal IDs are therefore equal text, in the simulator (segments) as
  on a real server (the load generator sends the same IDs as words). A server of any block size then
  reuses exactly what the IDs share: its block of ``b`` tokens is keyed by the content up to its end, so
  it matches when every trace block it overlaps, and every one before, is shared. With ``b`` dividing
  ``B`` that is ``B / b`` server blocks per shared trace block; other sizes straddle trace blocks and
  match only where both sides are shared. A server caches full blocks only and computes at least the
  last prompt token, so it serves up to ``b - 1`` tokens fewer per request than the trace counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from servebench.errors import ConfigError, ServebenchError
from servebench.records.traces import Trace, read_trace
from servebench.serving.prefix_cache import SegmentPrompt, segment_id

BLOCK_SEGMENT = 4  # the kind tag of a trace block's segment (1-3 are the synthetic workload's)
OWN_SEGMENT = 5  # the kind tag of a trace request's own text past its last block


@dataclass(frozen=True)
class TraceBlocks:
    """Each replayed request's prefix block IDs (offsets and values, as Arrow lists) and the trace's block size."""

    offsets: np.ndarray  # int64, one more than requests
    values: np.ndarray  # int64 block IDs
    block_tokens: int


@dataclass(frozen=True)
class TraceWindow:
    """The requests of a trace that one replay sends, in arrival order."""

    trace: Trace
    index: np.ndarray  # int64 positions in the trace
    left_out_zero_output: int  # requests of the window left out: 0 output tokens cannot be replayed

    def __len__(self) -> int:
        return int(self.index.size)

    def blocks(self) -> TraceBlocks | None:
        """Return the window's block IDs, or None for a trace without them."""
        t = self.trace
        if t.hash_offsets is None or t.hash_values is None or t.block_tokens is None:
            return None
        offsets, values = take_lists(t.hash_offsets, t.hash_values, self.index)
        return TraceBlocks(offsets, values, t.block_tokens)


def take_lists(offsets: np.ndarray, values: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return the lists at ``index`` of lists stored as offsets and values, again as offsets and values.

    >>> o, v = take_lists(np.array([0, 2, 2, 5]), np.array([1, 2, 3, 4, 5]), np.array([2, 0]))
    >>> o.tolist(), v.tolist()
    ([0, 3, 5], [3, 4, 5, 1, 2])
    """
    starts = offsets[index]
    lengths = offsets[index + 1] - starts
    new = np.zeros(index.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=new[1:])
    positions = np.repeat(starts - new[:-1], lengths) + np.arange(int(new[-1]), dtype=np.int64)
    return new, values[positions]


def select_window(trace: Trace, start_s: float, duration_s: float | None, max_requests: int | None) -> TraceWindow:
    """Return the requests of ``[start_s, start_s + duration_s)`` (trace seconds) with output, the first ``max_requests``."""
    t = trace.arrival_s
    lo = int(np.searchsorted(t, start_s, side="left"))
    hi = t.size if duration_s is None else int(np.searchsorted(t, start_s + duration_s, side="left"))
    index = np.arange(lo, max(lo, hi), dtype=np.int64)
    replayable = trace.output_tokens[index] >= 1
    left_out = int(index.size - np.count_nonzero(replayable))
    index = index[replayable]
    if max_requests is not None:
        index = index[:max_requests]
    return TraceWindow(trace, index, left_out)


def block_segment(block_id: int) -> int:
    """Return the segment of a trace block: the same for every request that names ``block_id``."""
    return segment_id(BLOCK_SEGMENT, block_id)


def block_prompts(blocks: TraceBlocks, prompt_tokens: np.ndarray, rows: np.ndarray) -> list[SegmentPrompt]:
    """Return each prompt as its trace blocks' segments, then its own text past the last block (the module's rule).

    ``rows`` (each request's row in the trace) name the own text, so a request's prompt is the same in
    every replay of it.

    >>> blocks = TraceBlocks(np.array([0, 2, 3]), np.array([7, 8, 7]), 4)
    >>> p = block_prompts(blocks, np.array([6, 5]), np.array([1, 2]))
    >>> [len(s.segments) for s in p], p[0].segments[0] == p[1].segments[0], p[0].segments[1][1], p[1].segments[1][1]
    ([2, 2], True, 2, 1)
    """
    offsets, values, size = blocks.offsets.tolist(), blocks.values.tolist(), blocks.block_tokens
    out = []
    for i, (prompt, row) in enumerate(zip(prompt_tokens.tolist(), rows.tolist())):
        ids = values[offsets[i]:offsets[i + 1]]
        whole = min(len(ids), prompt // size)
        segments = [(block_segment(h), size) for h in ids[:whole]]
        left = prompt - whole * size
        if left and whole < len(ids):  # a partial last block
            segments.append((block_segment(ids[whole]), left))
            left = 0
        if left:  # tokens past the last block: this request's own
            segments.append((segment_id(OWN_SEGMENT, row), left))
        out.append(SegmentPrompt(tuple(segments)))
    return out


def read_cached(path: str, fmt: str) -> Trace:
    """Read a trace file once per process while it is unchanged (a sweep or a plan replays it many times).

    Raises ConfigError (the reader's one line: file, line and field) when it cannot be read as a trace.
    """
    p = Path(path)
    try:
        stat = p.stat()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    return _read(str(p.resolve()), fmt, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _read(path: str, fmt: str, mtime_ns: int, size: int) -> Trace:
    """Read a trace; the file's modification time and size are part of the key, so an edited file is read again."""
    try:
        return read_trace(path, fmt)
    except ServebenchError as exc:
        raise ConfigError(str(exc)) from None
