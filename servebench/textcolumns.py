"""Text columns (request IDs, slices, error causes) kept in Arrow: building, codes, and duplicates.

A million request IDs as Python strings cost more to create than the whole Parquet read. Kept as
Arrow arrays they are filtered, counted and checked for duplicates in native code, and become
Python objects only when something asks for them (a page of rows, a test).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_SHIFT_OUT = np.array([0] + [(8 - r) * 8 for r in range(1, 8)] + [0], dtype=np.uint64)  # by bytes left in the word


def text_array(values: Any) -> pa.Array:
    """Return text values (a list or object array with None, or an Arrow array) as one Arrow string array."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if isinstance(values, pa.Array):
        if pa.types.is_dictionary(values.type):
            values = values.dictionary_decode()
        return values if values.type == pa.string() else values.cast(pa.string())
    return pa.array(values, pa.string(), from_pandas=False)


def categorical(values: Any) -> pa.DictionaryArray:
    """Return text values dictionary-encoded with one dictionary of distinct, non-blank strings.

    Blank strings mean absent (null), as an empty cell does in any other column.

    >>> categorical(["a", None, "b", "a", " "]).indices.to_pylist()
    [0, None, 1, 0, None]
    """
    if isinstance(values, pa.ChunkedArray) and pa.types.is_dictionary(values.type):
        values = values.unify_dictionaries().combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if isinstance(values, pa.Array) and pa.types.is_dictionary(values.type):
        words = values.dictionary
        if words.type == pa.string() and not _has_blank(words) and len(pc.unique(words)) == len(words):
            return values.cast(pa.dictionary(pa.int32(), pa.string()))
    plain = text_array(values)
    if _has_blank(plain):
        plain = pc.if_else(is_blank(plain), pa.scalar(None, pa.string()), plain)
    return plain.dictionary_encode().cast(pa.dictionary(pa.int32(), pa.string()))


def is_blank(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """Return, per value, whether it is empty or only whitespace (null stays null)."""
    return pc.or_(pc.equal(pc.utf8_length(arr), 0), pc.utf8_is_space(arr))


def _has_blank(arr: pa.Array) -> bool:
    return len(arr) > 0 and bool(pc.any(is_blank(arr)).as_py())


def category_codes(arr: pa.DictionaryArray) -> tuple[np.ndarray, list[str]]:
    """Return int32 codes (-1 where absent) into the list of category names."""
    codes = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)
    return codes, arr.dictionary.to_pylist()


def to_objects(arr: pa.Array) -> np.ndarray:
    """Return an object array of Python strings, None where absent."""
    if pa.types.is_dictionary(arr.type):
        codes, names = category_codes(arr)
        return np.array(names + [None], dtype=object)[codes]  # code -1 picks the trailing None
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=object)


def take(arr: pa.Array, index: np.ndarray) -> pa.Array:
    """Return the rows of ``arr`` picked by a boolean mask or an integer index array."""
    if index.dtype == np.bool_:
        return arr.filter(pa.array(index))
    return arr.take(pa.array(index))


def duplicates(arr: pa.Array) -> list[tuple[str, int]]:
    """Return the values present more than once with their counts, most common first (ties by value).

    Every value is hashed in vectorised numpy; only values whose hashes collide are compared
    exactly, so a file of distinct IDs (the usual case) never builds a hash table of strings.

    >>> duplicates(pa.array(["a", "b", "a", None, "c", "b", "a"]))
    [('a', 3), ('b', 2)]
    """
    present = text_array(arr).drop_null()
    if len(present) < 2:
        return []
    hashes = _string_hashes(present)
    ordered = np.sort(hashes)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size == 0:
        return []
    candidates = present.filter(pa.array(np.isin(hashes, repeated)))
    counts = pc.value_counts(candidates)
    pairs = [(v, c) for v, c in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()) if c > 1]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))


def _string_hashes(arr: pa.Array) -> np.ndarray:
    """Return a 64-bit hash of each string's UTF-8 bytes (no nulls), eight bytes at a time.

    Strings of up to eight bytes and equal length never collide (each step is a bijection), so
    for short IDs a repeated hash is a repeated value; longer strings collide by chance only.
    """
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())  # one offset width to handle
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64)[arr.offset:arr.offset + len(arr) + 1]
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        hashes = lengths.view(np.uint64) * _GOLDEN
    longest = int(lengths.max()) if lengths.size else 0
    if data_buf is None or longest == 0:
        return hashes
    data = np.frombuffer(data_buf, dtype=np.uint8)
    starts = offsets[:-1]
    words_max = -(-longest // 8)
    # Words are read unaligned straight from the data buffer. Offsets only grow, so the rows whose
    # last word could run past its end are a suffix: they read from a zero-padded copy of the tail.
    safe = int(np.searchsorted(starts, data.size - 8 * words_max, side="right"))
    parts = [(slice(0, safe), data, 0)]
    if safe < starts.size:
        tail_from = int(starts[safe])
        parts.append((slice(safe, starts.size), np.concatenate([data[tail_from:], np.zeros(8 * words_max, np.uint8)]),
                      tail_from))
    for rows_slice, buf, base in parts:
        if rows_slice.stop <= rows_slice.start:
            continue
        words = np.ndarray(shape=(buf.size - 7,), dtype=np.uint64, buffer=buf, strides=(1,))
        h = hashes[rows_slice]
        part_starts = starts[rows_slice] - base
        part_lengths = lengths[rows_slice]
        for j in range(words_max):
            rows: Any = slice(None)
            if part_lengths.min() <= 8 * j:
                rows = np.flatnonzero(part_lengths > 8 * j)
                if rows.size == 0:
                    break
            word = words[part_starts[rows] + 8 * j]
            remaining = part_lengths[rows] - 8 * j
            if remaining.min() < 8:  # bytes past the string's end sit in the high bytes: shift them out
                word <<= _SHIFT_OUT[np.minimum(remaining, 8)]
            h[rows] = _step(h[rows], word)
    return hashes


def _step(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    """Fold one word into running hashes: xor, multiply by an odd constant, xor-shift (all bijections)."""
    with np.errstate(over="ignore"):
        h = (h ^ word) * _MIX1
    return h ^ (h >> np.uint64(29))
