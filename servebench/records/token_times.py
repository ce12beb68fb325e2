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
from array import array
from collections.abc import Callable, Sequence
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


class TokenLog:
    """Token arrivals as a server emits them: each emission time once, and each row's runs of them.

    A step appends one emission time (a tick), a decode run of k steps appends k. A row that receives
    a token at every tick of an append that directly follows its last run lengthens that run, so in
    continuous batching a request is one run from its first token to its end (one more per
    preemption). Memory is one float per step plus three integers per run, not one value per token;
    ``to_arrow`` expands the runs into one list array, without sorting the tokens.
    """

    _CHUNK_TOKENS = 1 << 22  # tokens expanded at a time: bounds the temporary index array

    def __init__(self, rows: int = 0) -> None:
        self._ticks = array("d")
        self._last_end: list[int] = [-1] * rows  # row -> the tick after its last run (-1: none yet)
        self._last_run: list[int] = [0] * rows  # row -> index of its last run
        self._run_row = array("q")
        self._run_start = array("q")
        self._run_len = array("q")

    def add_step(self, rows: list[int], t: float) -> None:
        """Record that every row in ``rows`` received one token at ``t``."""
        if rows:
            self._ticks.append(t)
            self._extend(rows, len(self._ticks) - 1, 1)

    def add_run(self, rows: list[int], times: np.ndarray) -> None:
        """Record that every row in ``rows`` received a token at each of ``times`` (non-decreasing)."""
        if rows and times.size:
            first = len(self._ticks)
            self._ticks.frombytes(np.ascontiguousarray(times, dtype=np.float64).tobytes())
            self._extend(rows, first, int(times.size))

    def _extend(self, rows: list[int], first: int, k: int) -> None:
        """Give each row ticks ``first .. first+k-1``: lengthen its last run when it ends at ``first``."""
        last_end, last_run, run_len = self._last_end, self._last_run, self._run_len
        if rows and max(rows) >= len(last_end):  # rows beyond the first guess (retries): grow the index
            grow = max(rows) + 1 - len(last_end)
            last_end.extend([-1] * grow)
            last_run.extend([0] * grow)
        end = first + k
        for r in rows:
            if last_end[r] == first:
                run_len[last_run[r]] += k
            else:
                last_run[r] = len(run_len)
                self._run_row.append(r)
                self._run_start.append(first)
                run_len.append(k)
            last_end[r] = end

    @property
    def runs(self) -> int:
        """Return how many runs of consecutive ticks the rows hold."""
        return len(self._run_len)

    def to_arrow(self, n: int) -> pa.Array:
        """Return every row's arrivals in time order as a list array (null for a row with none).

        >>> log = TokenLog(); log.add_step([1], 0.5); log.add_run([1, 2], np.array([0.6, 0.7])); log.add_step([0], 0.8)
        >>> log.to_arrow(4).to_pylist()
        [[0.8], [0.5, 0.6, 0.7], [0.6, 0.7], None]
        """
        ticks = np.frombuffer(self._ticks, dtype=np.float64) if len(self._ticks) else np.zeros(0)
        run_row = np.frombuffer(self._run_row, dtype=np.int64) if self.runs else np.zeros(0, dtype=np.int64)
        run_start = np.frombuffer(self._run_start, dtype=np.int64) if self.runs else run_row
        run_len = np.frombuffer(self._run_len, dtype=np.int64) if self.runs else run_row
        order = np.argsort(run_row, kind="stable")  # a row's runs were appended in time order
        starts, lengths = run_start[order], run_len[order]
        counts = np.bincount(run_row, weights=run_len, minlength=n).astype(np.int64)  # exact below 2**53
        offsets = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        values = np.empty(int(offsets[-1]))
        firsts = np.zeros(lengths.size + 1, dtype=np.int64)  # each run's place in values
        np.cumsum(lengths, out=firsts[1:])
        lo = 0
        while lo < lengths.size:  # a run at a time would be slow, all at once an index per token: chunks of runs
            hi = int(np.searchsorted(firsts, firsts[lo] + self._CHUNK_TOKENS, side="right")) - 1
            hi = max(hi, lo + 1)
            a, b = int(firsts[lo]), int(firsts[hi])
            index = np.repeat(starts[lo:hi] - firsts[lo:hi], lengths[lo:hi])
            index += np.arange(a, b)
            values[a:b] = ticks[index]
            lo = hi
        return from_flat(values, offsets, counts > 0)


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
