"""Per-token arrival times: list columns parsed without Python lists per row, their rules, and the gaps.

A record's ``token_times`` holds the arrival of each output token, or of each streamed chunk, in
seconds on the record's clock. When a chunk carries several tokens, ``token_counts`` (same length,
each at least 1) says how many. Both are kept as Arrow list arrays (flat values plus offsets); the
gaps between consecutive arrivals of one request are computed with ``numpy.diff`` on the flat values,
the gaps that cross from one request to the next masked out through the offsets.
"""

from __future__ import annotations

import json
import math
import threading
from array import array
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

LIST_FIELDS: tuple[str, ...] = ("token_times", "token_counts")
LIST_ALIASES: dict[str, str] = {"tokenTimes": "token_times", "tokenCounts": "token_counts"}
MSG_TOKEN_TIMES = "Invalid token times"
MSG_TOKEN_COUNTS = "Invalid token counts"
_COUNT_LIMIT = 10**18  # as for every token count

TIMES_TYPE = pa.list_(pa.float64())
COUNTS_TYPE = pa.list_(pa.int64())


@dataclass(frozen=True)
class ListColumn:
    """One parsed list field: an Arrow list array (null where absent) and the rows that are not lists."""

    array: pa.Array
    present: np.ndarray
    bad: np.ndarray  # present, but not a list of numbers (of integers, for counts)
    why: Callable[[int], str]  # what is wrong with a bad row
    raw: Callable[[int], Any]


@dataclass(frozen=True)
class Flat:
    """A list array as numpy: every row's values one after another, row i at ``values[offsets[i]:offsets[i+1]]``."""

    values: np.ndarray
    offsets: np.ndarray  # int64, one more than the rows
    present: np.ndarray

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)


def flat(array: pa.Array | pa.ChunkedArray, dtype: Any = np.float64) -> Flat:
    """Return a list array's values and offsets as numpy (a null row is empty), without Python lists.

    >>> f = flat(pa.array([[1.0, 2.0], None, [3.0]]))
    >>> f.values.tolist(), f.offsets.tolist(), f.present.tolist()
    ([1.0, 2.0, 3.0], [0, 2, 2, 3], [True, False, True])
    """
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    fast = _flat_views(array, dtype)
    if fast is not None:
        return fast
    lengths = pc.list_value_length(array)
    present = ~np.asarray(lengths.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    counts = np.asarray(lengths.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    values = array.flatten()  # honours slices, skips what null rows may hold
    if values.null_count:
        values = values.fill_null(0)
    return Flat(np.asarray(values.to_numpy(zero_copy_only=False), dtype=dtype), offsets, present)


def _flat_views(array: pa.Array, dtype: Any) -> Flat | None:
    """Return ``flat(array)`` from the list array's own offsets and values (no copy of the values), or None.

    None where a view would not do: a large or fixed-size list, null elements, a values type other
    than ``dtype``, or a null row that points at values (Arrow allows it; Parquet readers never write it).
    """
    if not pa.types.is_list(array.type) or array.values.null_count:
        return None
    present = np.ones(len(array), dtype=bool) if array.null_count == 0 else \
        ~np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    offsets = np.asarray(array.offsets.to_numpy(), dtype=np.int64)
    if not present.all() and np.any(np.diff(offsets)[~present]):
        return None
    base = int(offsets[0])
    child = array.values.slice(base, int(offsets[-1]) - base)
    if child.type != pa.from_numpy_dtype(np.dtype(dtype)):
        return None
    return Flat(child.to_numpy(zero_copy_only=False), offsets - base if base else offsets, present)


def from_flat(values: np.ndarray, offsets: np.ndarray, present: np.ndarray | None = None,
              value_type: pa.DataType = pa.float64()) -> pa.Array:
    """Build a list array from flat values and offsets, null where ``present`` is False."""
    mask = None if present is None or present.all() else pa.array(~present)
    return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32 if offsets[-1] < 2**31 else np.int64)),
                                    pa.array(values, value_type), mask=mask,
                                    type=pa.list_(value_type))


def from_lists(rows: Sequence[Sequence[float] | None], value_type: pa.DataType = pa.float64()) -> pa.Array:
    """Build a list array from per-row sequences (None where absent): for writers of modest size."""
    return pa.array(rows, pa.list_(value_type))


# --------------------------------------------------------------------------- parsing


def _number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


def _integer(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and abs(int(v)) < _COUNT_LIMIT


def _as_float(v: Any) -> float:
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _what_list(kind: str) -> str:
    return "a list of numbers" if kind == "token_times" else "a list of integers below 10**18"


def _element_problem(values: Sequence[Any], name: str) -> str | None:
    """Say why a list's elements do not fit ``name`` (None: they do)."""
    test = _number if name == "token_times" else _integer
    for k, v in enumerate(values):
        if not test(v):
            if name == "token_counts" and isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)):
                return f"element {k + 1} ({_short(v)}) is too large (a token count must be below 10**18)"
            return f"element {k + 1} ({_short(v)}) is not {'a number' if name == 'token_times' else 'an integer below 10**18'}"
    return None


def _short(v: Any) -> str:
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= 40 else text[:37] + "..."


def column_from_objects(name: str, raw_values: list[Any]) -> ListColumn:
    """Parse one list field from per-record Python values (None where absent)."""
    n = len(raw_values)
    present = np.array([v is not None for v in raw_values], dtype=bool)
    bad = np.zeros(n, dtype=bool)
    why: dict[int, str] = {}
    rows: list[Any] = [None] * n
    for i, v in enumerate(raw_values):
        if v is None:
            continue
        if not isinstance(v, (list, tuple)):
            bad[i], why[i] = True, f"{_short(v)} is not {_what_list(name)}"
            continue
        problem = _element_problem(v, name)
        if problem:
            bad[i], why[i] = True, f"{problem}; expected {_what_list(name)}"
            continue
        rows[i] = [_as_float(x) for x in v] if name == "token_times" else [int(x) for x in v]
    value_type = pa.float64() if name == "token_times" else pa.int64()
    return ListColumn(pa.array(rows, pa.list_(value_type)), present, bad, why.__getitem__,
                      raw=lambda i: raw_values[i])


def column_from_arrow(name: str, arr: pa.ChunkedArray | pa.Array) -> ListColumn:
    """Parse one list field from an Arrow column: a list column (Parquet), or JSON text in cells (CSV)."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks() if arr.num_chunks != 1 else arr.chunk(0)
    n = len(arr)
    typ = arr.type
    value_type = pa.float64() if name == "token_times" else pa.int64()
    target = pa.list_(value_type)

    def raw(i: int) -> Any:
        return arr[i].as_py()

    if pa.types.is_null(typ):
        return ListColumn(pa.nulls(n, target), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool), str, raw)
    if pa.types.is_dictionary(typ):
        arr = arr.cast(typ.value_type)
        typ = arr.type
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        return _column_from_text(name, arr, target, raw)
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ)):
        present = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        return ListColumn(pa.nulls(n, target), present, present.copy(),
                          lambda i: f"a {typ} column; expected {_what_list(name)}", raw)
    present = ~np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    vt = typ.value_type
    numeric = pa.types.is_integer(vt) or pa.types.is_floating(vt) or pa.types.is_decimal(vt)
    if name == "token_counts":
        numeric = pa.types.is_integer(vt)
    if not numeric:
        return ListColumn(pa.nulls(n, target), present, present.copy(),
                          lambda i: f"its elements are {vt}; expected {_what_list(name)}", raw)
    bad = np.zeros(n, dtype=bool)
    # a null element, or an integer count too large, makes its row bad
    values = arr.flatten()
    too_big = (name == "token_counts" and vt in (pa.int64(), pa.uint64()) and len(values) > 0
               and (pc.max(values).as_py() or 0) >= _COUNT_LIMIT)
    element_bad = None
    if values.null_count or too_big:  # one pass over the elements finds no problem in a clean column
        element_bad = np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if too_big:
            element_bad |= np.asarray(pc.greater_equal(values, pa.scalar(_COUNT_LIMIT, vt)).fill_null(False)
                                      .to_numpy(zero_copy_only=False), dtype=bool)
    if element_bad is not None and element_bad.any():  # each element's row, from the offsets alone (no cast)
        parents = np.asarray(pc.list_parent_indices(arr).to_numpy(zero_copy_only=False), dtype=np.int64)
        bad[parents[element_bad]] = True
    cast = arr if typ == target else pc.cast(arr, target, safe=False)
    if bad.any():
        cast = pc.if_else(pa.array(bad), pa.scalar(None, target), cast)

    def why(i: int) -> str:
        problem = _element_problem(raw(i), name) or "an element is missing"
        return f"{problem}; expected {_what_list(name)}"

    return ListColumn(cast, present, bad, why, raw)


def _column_from_text(name: str, arr: pa.Array, target: pa.DataType, raw: Callable[[int], Any]) -> ListColumn:
    """Parse JSON-encoded lists in text cells (CSV); a blank cell means absent."""
    texts = arr.to_pylist()
    parsed: list[Any] = []
    why: dict[int, str] = {}
    for i, text in enumerate(texts):
        if text is None or not text.strip():
            parsed.append(None)
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            parsed.append(_NotList)
            why[i] = f"{_short(text)} is not a JSON list; a CSV cell holds {_what_list(name)} as JSON, e.g. [0.5, 0.52]"
            continue
        parsed.append(value)
    col = column_from_objects(name, [None if v is _NotList else v for v in parsed])
    bad = col.bad.copy()
    present = col.present.copy()
    for i in why:
        bad[i] = present[i] = True
    return ListColumn(col.array, present, bad, lambda i: why.get(i) or col.why(i), raw)


class _NotList:
    """A text cell that is not JSON."""


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class TokenRules:
    """Per-row masks of the token-time rules, in the order they are explained."""

    bad: np.ndarray  # any rule broken
    explain: Callable[[int], tuple[str, str, str]]  # row -> (field, message, detail)


def _rows_of(flat_index: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Return the row of each flat position."""
    return np.searchsorted(offsets, flat_index, side="right") - 1


def check(times: ListColumn | None, counts: ListColumn | None, *, start: np.ndarray, end: np.ndarray,
          first_token: np.ndarray, first_token_present: np.ndarray, output_tokens: np.ndarray,
          output_present: np.ndarray, success: np.ndarray, shown: Callable[[Any], str]) -> TokenRules | None:
    """Return the token-time rules' per-row masks, or None when no record has token times or counts.

    The rules: each a list of finite numbers; the first equal to ``first_token``; non-decreasing; the
    last at or before ``end``; ``token_counts`` (chunk sizes, each >= 1) as long as ``token_times``;
    on a success, one time per output token (or counts summing to ``output_tokens``); on a
    non-success, no more tokens than ``output_tokens`` says were generated.
    """
    has_times = times is not None and bool(times.present.any())
    has_counts = counts is not None and bool(counts.present.any())
    if not (has_times or has_counts):
        return None
    n = start.size
    zeros = np.zeros(n, dtype=bool)
    times_bad = times.bad if has_times else zeros
    counts_bad = counts.bad if has_counts else zeros
    counts_alone = (counts.present & ~counts.bad & ~(times.present if has_times else zeros)) if has_counts else zeros
    nonfinite = np.zeros(n, dtype=bool)
    first_missing = np.zeros(n, dtype=bool)
    first_differs = np.zeros(n, dtype=bool)
    decreasing = np.zeros(n, dtype=bool)
    after_end = np.zeros(n, dtype=bool)
    count_length = np.zeros(n, dtype=bool)
    count_small = np.zeros(n, dtype=bool)
    total_wrong = np.zeros(n, dtype=bool)
    t = flat(times.array) if has_times else None
    c = flat(counts.array, dtype=np.int64) if has_counts else None
    if t is not None:
        lengths = t.lengths
        v = t.values
        ok_rows = t.present & ~times_bad
        if not np.isfinite(v.sum()):  # a finite sum means every value is finite: one pass, no mask
            nonfinite[_rows_of(np.flatnonzero(~np.isfinite(v)), t.offsets)] = True
        nonempty = ok_rows & (lengths > 0)
        firsts = np.full(n, np.nan)
        lasts = np.full(n, np.nan)
        firsts[nonempty] = v[t.offsets[:-1][nonempty]]
        lasts[nonempty] = v[t.offsets[1:][nonempty] - 1]
        first_missing = nonempty & ~first_token_present
        with np.errstate(invalid="ignore"):
            first_differs = nonempty & first_token_present & ~nonfinite & (firsts != first_token)
            if v.size > 1:
                drop = v[1:] < v[:-1]
                drop[_row_steps(t.offsets)] = False  # steps from one row to the next
                if drop.any():
                    decreasing[_rows_of(np.flatnonzero(drop), t.offsets)] = True
            after_end = nonempty & ~nonfinite & (lasts > end)
        tokens = np.where(t.present, lengths, -1)
    if c is not None:
        ok_counts = c.present & ~counts_bad
        if has_times:
            count_length = ok_counts & t.present & ~times_bad & (c.lengths != t.lengths)
        if c.values.size and c.values.min() < 1:
            count_small[_rows_of(np.flatnonzero(c.values < 1), c.offsets)] = True
            count_small &= ok_counts
        cap = _COUNT_LIMIT // max(1, c.values.size)
        big = c.values.size and c.values.max() > cap
        chunk_tokens = np.zeros(n, dtype=np.int64)
        filled = c.lengths > 0
        if filled.any():  # a capped sum cannot wrap
            chunk_tokens[filled] = np.add.reduceat(np.minimum(c.values, cap) if big else c.values,
                                                   c.offsets[:-1][filled])
        if has_times:
            tokens = np.where(ok_counts, chunk_tokens, tokens)
    if has_times:
        checked = t.present & ~times_bad & ~nonfinite & ~count_length & ~count_small
        with np.errstate(invalid="ignore"):
            total_wrong = checked & np.where(success, tokens != output_tokens,
                                             output_present & (tokens > output_tokens))
    bad = (times_bad | counts_bad | counts_alone | nonfinite | first_missing | first_differs | decreasing
           | after_end | count_length | count_small | total_wrong)

    def explain(i: int) -> tuple[str, str, str]:
        if times_bad[i]:
            return "token_times", MSG_TOKEN_TIMES, times.why(i)  # type: ignore[union-attr]
        if counts_bad[i]:
            return "token_counts", MSG_TOKEN_COUNTS, counts.why(i)  # type: ignore[union-attr]
        if counts_alone[i]:
            return "token_counts", MSG_TOKEN_COUNTS, "given without token_times; they say how many tokens each " \
                                                     "arrival in token_times carried"
        assert t is not None
        row = t.values[t.offsets[i]:t.offsets[i + 1]]
        if nonfinite[i]:
            k = int(np.argmax(~np.isfinite(row)))
            return "token_times", MSG_TOKEN_TIMES, f"token {k + 1} ({shown(row[k])}) is not a finite number"
        if first_missing[i]:
            return "token_times", MSG_TOKEN_TIMES, "the record has token times but no first_token; the first " \
                                                   "token time must equal first_token"
        if first_differs[i]:
            return "token_times", MSG_TOKEN_TIMES, (f"the first token time {shown(row[0])} must equal first_token "
                                                    f"{shown(first_token[i])}")
        if decreasing[i]:
            k = int(np.argmax(np.diff(row) < 0))
            return "token_times", MSG_TOKEN_TIMES, (f"token {k + 2} ({shown(row[k + 1])}) comes before token "
                                                    f"{k + 1} ({shown(row[k])}); times must not decrease")
        if after_end[i]:
            return "token_times", MSG_TOKEN_TIMES, (f"the last token time {shown(row[-1])} is after end "
                                                    f"{shown(end[i])}")
        if count_length[i]:
            return "token_counts", MSG_TOKEN_COUNTS, (f"{int(c.lengths[i]):,} counts for {int(t.lengths[i]):,} "  # type: ignore[union-attr]
                                                      "token times; give one count per arrival")
        if count_small[i]:
            assert c is not None
            crow = c.values[c.offsets[i]:c.offsets[i + 1]]
            k = int(np.argmax(crow < 1))
            return "token_counts", MSG_TOKEN_COUNTS, (f"count {k + 1} is {int(crow[k])}; each arrival carries at "
                                                      "least 1 token")
        got = int(tokens[i])
        chunks = c is not None and bool(c.present[i])
        what = f"token_counts summing to {got:,}" if chunks else f"{got:,} token time{'' if got == 1 else 's'}"
        if success[i]:
            return "token_times", MSG_TOKEN_TIMES, (f"{what} for output_tokens {shown(output_tokens[i])}; a success has "
                                                    "one time per output token, or token_counts summing to "
                                                    "output_tokens")
        return "token_times", MSG_TOKEN_TIMES, (f"{what}, more than output_tokens {shown(output_tokens[i])} says "
                                                "it generated")

    return TokenRules(bad, explain)


# --------------------------------------------------------------------------- gaps


@dataclass(frozen=True)
class Gaps:
    """Every request's gaps between consecutive token arrivals.

    ``diffs[j]`` is the gap from flat arrival j to j+1 when both belong to one row, NaN where the
    next arrival starts another row; row i's arrivals are ``value_offsets[i]:value_offsets[i+1]``.
    ``has_times`` marks rows with at least one token time, ``max_gap`` is each row's longest gap
    (NaN with fewer than two arrivals).
    """

    diffs: np.ndarray
    value_offsets: np.ndarray
    has_times: np.ndarray
    max_gap: np.ndarray

    @property
    def counts(self) -> np.ndarray:
        """Gaps per row."""
        return np.maximum(np.diff(self.value_offsets) - 1, 0)

    @cached_property
    def offsets(self) -> np.ndarray:
        """Row i's gaps are ``values[offsets[i]:offsets[i+1]]``."""
        offsets = np.zeros(self.value_offsets.size, dtype=np.int64)
        np.cumsum(self.counts, out=offsets[1:])
        return offsets

    @cached_property
    def values(self) -> np.ndarray:
        """Every gap, grouped by row in row order."""
        keep = np.ones(self.diffs.size, dtype=bool)
        keep[_row_steps(self.value_offsets)] = False
        return self.diffs[keep] if not keep.all() else self.diffs.copy()

    def select(self, rows: np.ndarray) -> np.ndarray:
        """Return the gaps of the rows a boolean mask selects (a fresh array, in row order)."""
        return self.values[np.repeat(rows, self.counts)]

    def sorted_of(self, rows: np.ndarray) -> np.ndarray:
        """Return the gaps of the rows a boolean mask selects, sorted ascending (a fresh array).

        >>> gaps(pa.array([[0.0, 0.5, 2.5], None, [3.0], [4.0, 4.25]])).sorted_of(np.array([1, 1, 1, 0], bool)).tolist()
        [0.5, 2.0]
        """
        counts = self.counts
        kept = int(counts[rows].sum())
        if kept == counts.sum():  # every gap is selected: copy the diffs, no mask over them
            out = self.diffs.copy()
        else:
            out = self.diffs[np.repeat(rows, np.diff(self.value_offsets))[:self.diffs.size]]
        out.sort()  # the NaNs between rows sort last
        return out[:kept]

    def row_percentile(self, q: int) -> np.ndarray:
        """Return each row's nearest-rank q-th percentile gap (an integer q; NaN for a row without gaps).

        >>> g = gaps(pa.array([[0.0, 1.0, 1.5, 4.5], [2.0], None]))
        >>> g.row_percentile(50).tolist()[:1], g.row_percentile(99).tolist()[0]
        ([1.0], 3.0)
        """
        counts = self.counts
        out = np.full(counts.size, np.nan)
        has = counts > 0
        if not has.any():
            return out
        rows = np.repeat(np.arange(counts.size), counts)
        ordered = self.values[np.lexsort((self.values, rows))]
        rank = (q * counts + 99) // 100  # ceil(q * n / 100), exact in integers
        out[has] = ordered[self.offsets[:-1][has] + rank[has] - 1]
        return out


def _row_steps(value_offsets: np.ndarray) -> np.ndarray:
    """Return the positions in the diffs of flat values that step from one row to the next."""
    starts = value_offsets[1:-1]
    return starts[(starts > 0) & (starts < value_offsets[-1])] - 1


def gaps(times: pa.Array | pa.ChunkedArray) -> Gaps:
    """Return the gaps between consecutive token times of each row (one ``np.diff`` on the flat values).

    A NaN in the diffs marks the step from one row to the next (validated times are finite).

    >>> g = gaps(pa.array([[0.0, 0.5, 2.5], None, [3.0], [4.0, 4.25]]))
    >>> g.values.tolist(), g.offsets.tolist(), g.max_gap.tolist()
    ([0.5, 2.0, 0.25], [0, 2, 2, 2, 3], [2.0, nan, nan, 0.25])
    """
    f = flat(times)
    lengths = f.lengths
    diffs = np.diff(f.values)  # empty for fewer than two values
    diffs[_row_steps(f.offsets)] = np.nan
    max_gap = np.full(lengths.size, np.nan)
    has = lengths > 1
    if has.any():  # a row's segment runs on over the rows without gaps after it: their NaNs are ignored
        max_gap[has] = np.fmax.reduceat(diffs, f.offsets[:-1][has])
    return Gaps(diffs, f.offsets, f.present & (lengths > 0), max_gap)


def as_json_text(array: pa.Array) -> pa.Array:
    """Return a list column as JSON text per cell (null where absent), as a CSV cell holds it.

    >>> as_json_text(pa.array([[0.5, 0.75], None])).to_pylist()
    ['[0.5, 0.75]', None]
    """
    return pa.array([None if v is None else json.dumps(v) for v in array.to_pylist()], pa.string())


def _append_floats(out: array, times: np.ndarray | list[float]) -> None:
    """Append float times to a ``d`` array: a list (a short run's ends, added up in Python) as it is, an array
    through its bytes."""
    if isinstance(times, list):
        out.extend(times)
    else:
        out.frombytes(np.ascontiguousarray(times, dtype=np.float64).tobytes())


_INDEX = "i"  # TokenLog's tick positions and counts (see its __init__)


class TokenLog:
    """Token arrivals as a server emits them: each emission time once, and each row's runs of them.

    A step appends one emission time (a tick), a decode run of k steps appends k. A row that receives
    a token at every tick of an append that directly follows its last run lengthens that run, so in
    continuous batching a request is one run from its first token to its end (one more per
    preemption). Memory is one float per step plus three values per run, not one value per token;
    ``to_arrow`` expands the runs into one list array, without sorting the tokens. Rows are named by
    any hashable key (the simulator's request IDs) and turned into row numbers once per run, at the end.

    A group (the scheduler's decode cohort) has ticks of its own: ``add_group`` appends a cohort step's
    end times, and ``add_group_run`` says a row received a token at each group tick from one index to
    another, once, when the row leaves the group: nothing per row and step.
    """

    def __init__(self, row_of: Callable[[Any], int] | None = None) -> None:
        """``row_of`` turns a key into its row as a run begins (the simulator's request IDs: ``int``), so that the
        log holds a row number a run (1,000,000 requests: 3.7 million runs) rather than keys until the end."""
        self._row_of = row_of
        # positions and counts of ticks, int32: a tick is 8 bytes, so 2**31 of them could not be held anyway
        # (array raises OverflowError before that); 1,000,000 requests' 2.8 million group appends and 3.7
        # million runs took 50 MB more as int64
        self._ticks = array("d")
        self._last_end: dict[Hashable, int] = {}  # row -> the tick after its last run
        self._last_run: dict[Hashable, int] = {}  # row -> index of its last run
        self._run_key: list[Hashable] | array = [] if row_of is None else array("q")
        self._run_start = array(_INDEX)
        self._run_len = array(_INDEX)
        self._run_seq = array(_INDEX)  # the append that began the run: a row's runs in time order, ticks of both kinds
        self._appends = 0
        self._group_ticks = array("d")
        self._group_first = array(_INDEX)  # each group append's first group tick, and its append number beside it
        self._group_seq = array(_INDEX)
        self._group_key: list[Hashable] | array = [] if row_of is None else array("q")
        self._group_start = array(_INDEX)
        self._group_len = array(_INDEX)

    def add_step(self, rows: Sequence[Hashable], t: float) -> None:
        """Record that every row in ``rows`` received one token at ``t``."""
        if rows:
            self._ticks.append(t)
            self._appends += 1
            self._extend(rows, len(self._ticks) - 1, 1)

    def add_run(self, rows: Sequence[Hashable], times: np.ndarray | list[float]) -> None:
        """Record that every row in ``rows`` received a token at each of ``times`` (non-decreasing)."""
        if rows and len(times):
            first = len(self._ticks)
            _append_floats(self._ticks, times)
            self._appends += 1
            self._extend(rows, first, len(times))

    def add_group(self, times: np.ndarray | list[float]) -> None:
        """Append the group's next ticks: one end time per step the group took."""
        self._appends += 1
        ticks = self._group_ticks
        self._group_first.append(len(ticks))
        self._group_seq.append(self._appends)
        if isinstance(times, list):  # _append_floats' common case (a short run's ends, or one step's), inline
            ticks.extend(times)
        else:
            _append_floats(ticks, times)

    def add_group_run(self, row: Hashable, first: int, end: int) -> None:
        """Record that ``row`` received a token at each group tick ``first .. end-1`` (given or to be given)."""
        self._last_end.pop(row, None)  # its next token outside the group starts a new run, after this one
        self._group_key.append(row if self._row_of is None else self._row_of(row))
        self._group_start.append(first)
        self._group_len.append(end - first)

    def _extend(self, rows: Sequence[Hashable], first: int, k: int) -> None:
        """Give each row ticks ``first .. first+k-1``: lengthen its last run when it ends at ``first``."""
        last_end, last_run, run_len, row_of = self._last_end, self._last_run, self._run_len, self._row_of
        end = first + k
        for r in rows:
            if last_end.get(r) == first:
                run_len[last_run[r]] += k
            else:
                last_run[r] = len(run_len)
                self._run_key.append(r if row_of is None else row_of(r))
                self._run_start.append(first)
                self._run_seq.append(self._appends)
                run_len.append(k)
            last_end[r] = end

    def close(self, row: Hashable) -> None:
        """Forget what a row's next token would continue (the row has ended): keeps the index to live rows."""
        self._last_end.pop(row, None)
        self._last_run.pop(row, None)

    @property
    def runs(self) -> int:
        """Return how many runs of consecutive ticks the rows hold."""
        return len(self._run_len) + len(self._group_len)

    def to_runs(self, n: int, row_of: Callable[[Any], int] = int) -> "TokenRuns":
        """Return the log as :class:`TokenRuns` over rows ``0 .. n-1``; ``row_of`` turns a key into its row.

        The group's ticks follow the others' in one array; a row's runs are put in the order of the
        appends that began them.
        """
        main = np.frombuffer(self._ticks, dtype=np.float64) if len(self._ticks) else np.zeros(0)
        group = np.frombuffer(self._group_ticks, dtype=np.float64) if len(self._group_ticks) else np.zeros(0)
        return self._runs(np.concatenate([main, group]), main.size, n, self._run_key + self._group_key,  # type: ignore[operator]
                          row_of)

    def take_runs(self, n: int, row_of: Callable[[Any], int] = int) -> "TokenRuns":
        """Return :meth:`to_runs`'s result, the log giving up its ticks rather than copying them; it is empty after.

        The other ticks are put in front of the group's in the group's own buffer (glibc grows a big block
        in place): a million requests' 23 million ticks are not held twice (180 MB) at the simulation's end.
        """
        main_size = len(self._ticks)
        self._group_ticks[0:0] = self._ticks
        self._ticks = array("d")
        ticks = np.frombuffer(self._group_ticks, dtype=np.float64) if len(self._group_ticks) else np.zeros(0)
        keys = self._run_key + self._group_key  # type: ignore[operator]
        self._run_key = self._group_key = []  # the keys go once their rows are known
        runs = self._runs(ticks, main_size, n, keys, row_of)
        self.__init__(self._row_of)  # type: ignore[misc]  # the buffer now belongs to ``runs.ticks``
        return runs

    def _runs(self, ticks: np.ndarray, main_size: int, n: int, keys: list[Hashable] | array,
              row_of: Callable[[Any], int]) -> "TokenRuns":
        """Return the runs over ``ticks``, the others' first and the group's from ``main_size``; ``keys`` (rows
        already where the log was given ``row_of``) is consumed, so that a caller that gave up its own frees them."""
        def ints(a: array) -> np.ndarray:
            return np.frombuffer(a, dtype=np.int32) if len(a) else np.zeros(0, dtype=np.int32)

        if isinstance(keys, array):
            run_row = np.frombuffer(keys, dtype=np.int64) if len(keys) else np.zeros(0, dtype=np.int64)
            del keys
        else:
            run_row = np.fromiter((row_of(k) for k in keys), dtype=np.int64, count=len(keys))
            keys.clear()
        group_start = ints(self._group_start)
        group_seq = ints(self._group_seq)[np.searchsorted(ints(self._group_first), group_start, side="right") - 1] \
            if group_start.size else group_start
        seq = np.concatenate([ints(self._run_seq), group_seq])
        del group_seq
        order = np.lexsort((seq, run_row))
        del seq
        # one column at a time, each put in order as it is made: a million requests have 3.7 million runs
        run_row = run_row[order]
        run_start = np.concatenate([ints(self._run_start), group_start.astype(np.int64) + main_size], dtype=np.int64)[order]
        run_len = np.concatenate([ints(self._run_len), ints(self._group_len)], dtype=np.int64)[order]
        return TokenRuns(ticks, run_row, run_start, run_len, n)

    def to_arrow(self, n: int, row_of: Callable[[Any], int] = int) -> pa.Array:
        """Return every row's arrivals in time order as a list array (null for a row with none).

        >>> log = TokenLog(); log.add_step([1], 0.5); log.add_run([1, 2], np.array([0.6, 0.7])); log.add_step([0], 0.8)
        >>> log.to_arrow(4).to_pylist()
        [[0.8], [0.5, 0.6, 0.7], [0.6, 0.7], None]
        """
        return self.to_runs(n, row_of).expand()


@dataclass(frozen=True)
class TokenRuns:
    """Rows' token arrivals as runs of shared emission times: row ``run_row[j]`` received a token at each of
    ``ticks[run_start[j] : run_start[j] + run_len[j]]``, runs sorted by row and, within a row, by time.

    A simulation's tokens in this form take a float per engine step and three integers per run, where
    the list array takes a float per token (100,000 requests: 2 million against 25 million values).
    :meth:`expand` gives the list array, a range of rows at a time; :meth:`gaps` the gaps a report reads.
    """

    ticks: np.ndarray
    run_row: np.ndarray
    run_start: np.ndarray
    run_len: np.ndarray
    n: int

    _CHUNK_TOKENS = 1 << 20  # tokens expanded at a time: bounds the temporaries (an index and gaps per token)

    @cached_property
    def counts(self) -> np.ndarray:
        """Tokens per row."""
        return np.bincount(self.run_row, weights=self.run_len, minlength=self.n).astype(np.int64)  # exact < 2**53

    @cached_property
    def run_offsets(self) -> np.ndarray:
        """Row i's runs are ``run_offsets[i]:run_offsets[i+1]``."""
        return np.searchsorted(self.run_row, np.arange(self.n + 1), side="left").astype(np.int64)

    def expand(self, lo: int = 0, hi: int | None = None) -> pa.Array:
        """Return rows ``lo .. hi-1`` as a list array of their arrival times (null for a row with none)."""
        hi = self.n if hi is None else hi
        counts = self.counts[lo:hi]
        offsets = np.zeros(counts.size + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return from_flat(self._values(int(self.run_offsets[lo]), int(self.run_offsets[hi]), int(offsets[-1])),
                         offsets, counts > 0)

    def _values(self, first_run: int, end_run: int, total: int) -> np.ndarray:
        """Return the arrival times of runs ``first_run .. end_run-1``, one after another (``total`` of them)."""
        starts, lengths = self.run_start[first_run:end_run], self.run_len[first_run:end_run]
        values = np.empty(total)
        firsts = np.zeros(lengths.size + 1, dtype=np.int64)  # each run's place in values
        np.cumsum(lengths, out=firsts[1:])
        lo = 0
        while lo < lengths.size:  # a run at a time would be slow, all at once an index per token: chunks of runs
            hi = max(int(np.searchsorted(firsts, firsts[lo] + self._CHUNK_TOKENS, side="right")) - 1, lo + 1)
            a, b = int(firsts[lo]), int(firsts[hi])
            index = np.repeat(starts[lo:hi] - firsts[lo:hi], lengths[lo:hi])
            index += np.arange(a, b)
            values[a:b] = self.ticks[index]
            lo = hi
        return values

    def row_chunks(self) -> Iterator[tuple[int, int, pa.Array]]:
        """Yield (lo, hi, rows lo..hi-1 expanded), each chunk about ``_CHUNK_TOKENS`` tokens (one row at least)."""
        ends = np.cumsum(self.counts)
        lo = 0
        while lo < self.n:
            base = int(ends[lo - 1]) if lo else 0
            hi = max(int(np.searchsorted(ends, base + self._CHUNK_TOKENS, side="right")), lo + 1)
            hi = min(hi, self.n)
            yield lo, hi, self.expand(lo, hi)
            lo = hi

    def gaps(self) -> "RunGaps":
        """Return the gaps between consecutive arrivals of each row, as a report reads them."""
        return RunGaps(self)


class RepeatedSorted:
    """Sorted values each repeated ``counts`` times, read like the sorted array they stand for, never built whole.

    Supports what a distribution reads: ``size``, an element by position (``[-1]`` the largest) and a
    slice of positions (built then: the exact sum reads the values in blocks).

    >>> r = RepeatedSorted(np.array([0.5, 2.0]), np.array([3, 1]))
    >>> r.size, float(r[2]), float(r[3]), float(r[-1]), r[1:4].tolist()
    (4, 0.5, 2.0, 2.0, [0.5, 0.5, 2.0])
    """

    def __init__(self, values: np.ndarray, counts: np.ndarray) -> None:
        self.values = values
        self.counts = counts
        self._ends = np.cumsum(counts)  # element i is values[searchsorted(ends, i, "right")]
        self.size = int(self._ends[-1]) if counts.size else 0

    def __getitem__(self, key: int | slice) -> Any:
        if isinstance(key, slice):
            a, b, step = key.indices(self.size)
            if step != 1:
                raise IndexError("RepeatedSorted takes contiguous slices only")
            if b <= a:
                return np.zeros(0)
            j0 = int(np.searchsorted(self._ends, a, side="right"))
            j1 = int(np.searchsorted(self._ends, b - 1, side="right"))
            reps = self.counts[j0:j1 + 1].copy()
            reps[0] = min(int(self._ends[j0]), b) - a  # the first value's copies from a on
            if j1 > j0:
                reps[-1] = b - int(self._ends[j1 - 1])
            return np.repeat(self.values[j0:j1 + 1], reps)
        i = key + self.size if key < 0 else key
        if not 0 <= i < self.size:
            raise IndexError(key)
        return self.values[int(np.searchsorted(self._ends, i, side="right"))]


class RunGaps:
    """The gaps of :class:`TokenRuns`, with the parts of :class:`Gaps` a report reads (``has_times``, ``max_gap``,
    ``sorted_of``, ``row_percentile``), each equal to ``gaps(runs.expand())``'s.

    A run's gaps are the differences of consecutive ticks it spans, shared by every row decoding in
    those steps; a row with several runs adds the gap from one run's last tick to the next run's
    first. The distribution of every gap is each tick difference weighted by how many of the chosen
    rows' runs span it, plus the gaps between runs: sorting the engine's steps, not the tokens.
    Per-row maxima and percentiles expand the rows a chunk at a time.
    """

    def __init__(self, runs: TokenRuns) -> None:
        self.runs = runs
        self.has_times = runs.counts > 0
        self._lock = threading.Lock()
        self._last: tuple[np.ndarray, RepeatedSorted] | None = None

    @cached_property
    def max_gap(self) -> np.ndarray:
        """Each row's longest gap (NaN with fewer than two arrivals): the longest of its runs' tick differences and
        of the gaps from one of its runs to the next, no token expanded (300,000 simulated requests, 110 million
        arrivals: 0.57 s expanded a chunk at a time, 0.14 s from the runs, the same array)."""
        r = self.runs
        out = np.full(r.n, np.nan)
        kept = r.run_len > 0  # a run of no ticks (a cohort member that left before its first) adds no arrival
        if kept.all():
            run_row, run_start, run_len, first = r.run_row, r.run_start, r.run_len, r.run_offsets
        else:
            run_row, run_start, run_len = r.run_row[kept], r.run_start[kept], r.run_len[kept]
            first = np.searchsorted(run_row, np.arange(r.n + 1), side="left")
        del kept
        if not run_row.size:
            return out
        longest = np.empty(run_row.size)  # each run's longest gap, the one from the row's run before it included
        for lo in range(0, run_row.size, _GAP_BLOCK):
            hi = min(lo + _GAP_BLOCK, run_row.size)
            longest[lo:hi] = _run_maxima(r.ticks, run_row, run_start, run_len, lo, hi)
        rows = np.flatnonzero(first[1:] > first[:-1])
        out[rows] = np.fmax.reduceat(longest, first[rows])  # NaN where a row's every run is one tick and alone
        return out

    def row_percentile(self, q: int) -> np.ndarray:
        """Return each row's nearest-rank q-th percentile gap (NaN for a row without gaps)."""
        out = np.full(self.runs.n, np.nan)
        for lo, hi, arr in self.runs.row_chunks():
            out[lo:hi] = gaps(arr).row_percentile(q)
        return out

    def sorted_of(self, rows: np.ndarray) -> RepeatedSorted:
        """Return the gaps of the rows a boolean mask selects, sorted ascending, as :class:`RepeatedSorted`.

        One at a time, and the last one kept: a report's slices ask for the whole file's successes again
        (one slice), in threads beside it, and each call's temporaries are a few arrays as long as the ticks.
        """
        with self._lock:
            if self._last is not None and np.array_equal(self._last[0], rows):
                return self._last[1]
            found = self._sorted_of(rows)
            self._last = (rows.copy(), found)
            return found

    def _sorted_of(self, rows: np.ndarray) -> RepeatedSorted:
        r = self.runs
        ticks = r.ticks
        index = np.int32 if ticks.size < 2**31 else np.int64  # tick positions: half the memory where they fit
        chosen = rows[r.run_row] if r.run_row.size else np.zeros(0, dtype=bool)
        starts = r.run_start[chosen].astype(index)
        lasts = r.run_len[chosen].astype(index)
        lasts += starts
        lasts -= 1
        owners = r.run_row[chosen]
        del chosen
        between = owners[1:] == owners[:-1]  # a row's next run: the gap from its last tick to the next run's first
        del owners
        join_to, join_from = starts[1:][between], lasts[:-1][between]
        del between
        spanning = lasts > starts  # a chosen run spans the step from tick i to i+1 for starts <= i < lasts
        opens, closes = starts[spanning], lasts[spanning]
        del starts, lasts, spanning
        opens.sort()
        closes.sort()
        steps = max(ticks.size - 1, 0)
        # Each used step's gap (real part) and the number of chosen runs spanning it (imaginary part) as one
        # complex number, so that one in-place sort orders both (no argsort); a block of steps at a time, sorted
        # and its equal gaps merged before it is kept, since a step's length repeats: a million requests take 23
        # million steps, whose gaps took 550 MB at once where their merged blocks take a fifth of that.
        pairs = np.empty(steps + join_to.size, dtype=np.complex128)  # pages untouched until written: not in memory
        at = 0
        open_now = 0  # chosen runs spanning the step before the block
        for lo in range(0, steps, _GAP_BLOCK):
            hi = min(lo + _GAP_BLOCK, steps)
            o0, o1 = np.searchsorted(opens, [lo, hi])
            c0, c1 = np.searchsorted(closes, [lo, hi])
            delta = np.bincount(opens[o0:o1] - lo, minlength=hi - lo)
            delta -= np.bincount(closes[c0:c1] - lo, minlength=hi - lo)
            weight = np.cumsum(delta, out=delta)
            weight += open_now
            open_now = int(weight[-1])
            used = weight > 0
            block = np.empty(int(np.count_nonzero(used)), dtype=np.complex128)
            block.real = (ticks[lo + 1:hi + 1] - ticks[lo:hi])[used]  # the gap from tick i to i+1, as np.diff
            block.imag = weight[used]
            at = _keep_merged(block, pairs, at)
        del opens, closes
        for lo in range(0, join_to.size, _GAP_BLOCK):
            hi = min(lo + _GAP_BLOCK, join_to.size)
            block = np.empty(hi - lo, dtype=np.complex128)
            block.real = ticks[join_to[lo:hi]] - ticks[join_from[lo:hi]]
            block.imag = 1
            at = _keep_merged(block, pairs, at)
        del join_to, join_from
        kept = _keep_merged(pairs[:at], pairs, 0)
        return RepeatedSorted(pairs.real[:kept].copy(), pairs.imag[:kept].astype(np.int64))


def _keep_merged(block: np.ndarray, into: np.ndarray, at: int) -> int:
    """Sort ``block`` (gap + 1j * weight) in place, merge equal gaps (weights added) and write them to ``into``
    from ``at`` (``block`` may be ``into[at:]`` itself); return the end of what was written."""
    block.sort()  # by gap, then weight: equal gaps side by side
    if not block.size:
        return at
    gaps_s = block.real
    new = np.empty(block.size, dtype=bool)
    new[0] = True
    np.not_equal(gaps_s[1:], gaps_s[:-1], out=new[1:])
    first = np.flatnonzero(new)
    del new
    for lo in range(0, first.size, _GAP_BLOCK):  # a block of merged values at a time: no copy of every weight
        hi = min(lo + _GAP_BLOCK, first.size)
        a, b = int(first[lo]), int(first[hi]) if hi < first.size else block.size
        weights = np.add.reduceat(block.imag[a:b], first[lo:hi] - a)
        into.real[at + lo:at + hi] = gaps_s[first[lo:hi]]  # never ahead of what is read: first[j] >= j
        into.imag[at + lo:at + hi] = weights
    return at + first.size


_GAP_BLOCK = 1 << 20  # steps whose gaps RunGaps computes at once (and runs whose longest gaps it finds at once)


def _run_maxima(ticks: np.ndarray, run_row: np.ndarray, run_start: np.ndarray, run_len: np.ndarray,
                lo: int, hi: int) -> np.ndarray:
    """Return the longest gap of each of runs ``lo .. hi-1`` (every run at least one tick long): its ticks'
    differences, and the gap from the last tick of the row's run before it; NaN for a lone tick."""
    out = np.full(hi - lo, np.nan)
    a = max(lo - 1, 0)
    joined = np.flatnonzero(run_row[a + 1:hi] == run_row[a:hi - 1]) + (a + 1)  # runs whose row ran before
    before = joined - 1
    out[joined - lo] = ticks[run_start[joined]] - ticks[run_start[before] + run_len[before] - 1]
    del joined, before
    many = np.flatnonzero(run_len[lo:hi] > 1)
    begin = run_start[lo:hi][many]
    out[many] = np.fmax(out[many], _range_max_diff(ticks, begin, begin + run_len[lo:hi][many] - 1))
    return out


def _range_max_diff(ticks: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Return, for each i, the largest ``ticks[k + 1] - ticks[k]`` for ``begin[i] <= k < end[i]`` (never empty).

    The differences are taken a block of ``_GAP_BLOCK`` at a time (as ``np.diff`` takes them); a range that
    crosses blocks is cut into pieces. The pieces of a block, ordered by their first index, are reduced by one
    ``np.maximum.reduceat`` over (first, end) pairs: what lies between one piece's end and the next's first is
    reduced too and thrown away, at most a block's length. No index per token.

    >>> _range_max_diff(np.array([0.0, 1.0, 1.5, 4.0, 4.25]), np.array([0, 1, 3]), np.array([4, 2, 4])).tolist()
    [2.5, 0.5, 0.25]
    """
    if not begin.size:
        return np.zeros(0)
    block = _GAP_BLOCK
    first_block = begin // block
    pieces = (end - 1) // block - first_block + 1
    piece_at = np.zeros(pieces.size, dtype=np.int64)  # range i's pieces are piece_at[i] .. piece_at[i] + pieces[i] - 1
    np.cumsum(pieces[:-1], out=piece_at[1:])
    if piece_at[-1] + pieces[-1] == pieces.size:  # no range crosses a block: one piece each
        blocks, p_begin, p_end = first_block, begin, end
    else:
        owner = np.repeat(np.arange(begin.size), pieces)
        blocks = first_block[owner] + (np.arange(owner.size) - piece_at[owner])
        p_begin = np.maximum(begin[owner], blocks * block)
        p_end = np.minimum(end[owner], (blocks + 1) * block)
        del owner
    order = np.argsort(p_begin, kind="stable")
    maxima = np.empty(order.size)
    sorted_blocks = blocks[order]
    cuts = np.flatnonzero(sorted_blocks[1:] != sorted_blocks[:-1]) + 1
    for g0, g1 in zip(np.concatenate([[0], cuts]), np.concatenate([cuts, [order.size]])):
        which = order[g0:g1]
        b0 = int(sorted_blocks[g0]) * block
        b1 = min(b0 + block, ticks.size - 1)  # the block's differences: ticks[k + 1] - ticks[k] for b0 <= k < b1
        diffs = np.empty(b1 - b0 + 1)
        np.subtract(ticks[b0 + 1:b1 + 1], ticks[b0:b1], out=diffs[:-1])
        diffs[-1] = -np.inf  # where a piece ending at the block's end points its (thrown away) in-between reduction
        bounds = np.empty(2 * which.size, dtype=np.int64)
        bounds[0::2] = p_begin[which] - b0
        bounds[1::2] = p_end[which] - b0
        maxima[which] = np.maximum.reduceat(diffs, bounds)[0::2]
    return maxima if maxima.size == begin.size else np.maximum.reduceat(maxima, piece_at)


def fits(times: Sequence[float], record: dict[str, Any], counts: Sequence[int] | None = None) -> bool:
    """Whether ``times`` (and ``counts``) obey the record's token-time rules, so a writer may attach them.

    >>> fits([0.5, 0.6], {"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 2})
    True
    >>> fits([0.5], {"start": 0, "first_token": 0.5, "end": 1, "status": "success", "output_tokens": 2})
    False
    """
    if not times:
        return False
    first, end, out = record.get("first_token"), record.get("end"), record.get("output_tokens")
    if first is None or end is None or times[0] != first or times[-1] > end:
        return False
    if any(b < a for a, b in zip(times, times[1:])) or not all(math.isfinite(t) for t in times):
        return False
    if counts is not None and (len(counts) != len(times) or any(c < 1 for c in counts)):
        return False
    tokens = len(times) if counts is None else sum(counts)
    if record.get("status") == "success":
        return tokens == out
    return out is None or tokens <= out


def times_from_gaps(first_s: float, gaps_s: Sequence[float], end_s: float,
                    tolerance_s: float = 1e-6) -> list[float] | None:
    """Return arrival times from the first arrival and the gaps after it (an exporter's ITL list), or None.

    Summing gaps can overshoot ``end`` by rounding: an overshoot within ``tolerance_s`` is clamped
    to ``end``; a negative or non-finite gap, or a real overshoot, gives None.

    >>> times_from_gaps(0.5, [0.25, 0.25], 1.0)
    [0.5, 0.75, 1.0]
    >>> times_from_gaps(0.5, [0.25, -0.1], 1.0) is None
    True
    """
    offset, times = 0.0, [first_s]
    for gap in gaps_s:  # summed as small offsets, then added once: no rounding at the clock's scale per gap
        if not (_number(gap) and math.isfinite(gap) and gap >= 0):
            return None
        offset += float(gap)
        times.append(first_s + offset)
    if times[-1] > end_s:
        if times[-1] - end_s > max(tolerance_s, 8 * math.ulp(end_s)):
            return None
        times = [min(t, end_s) for t in times]
    return times
