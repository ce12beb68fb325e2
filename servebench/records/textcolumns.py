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

from servebench.records.arrow_masks import chunks_of, join_masks, null_mask

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
# ASCII whitespace, and any byte that starts a multi-byte character (Unicode spaces such as U+00A0)
_MAY_START_SPACE = np.zeros(256, dtype=bool)
_MAY_START_SPACE[[0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1D, 0x1E, 0x1F, 0x20]] = True
_MAY_START_SPACE[0x80:] = True
_BLOCK_ROWS = 1 << 18  # rows hashed at once: bounds the temporaries
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
    blank = blank_mask(plain)
    if np.count_nonzero(blank) > plain.null_count:  # some value is blank, not just null
        plain = pc.if_else(pa.array(blank), pa.scalar(None, pa.string()), plain)
    return plain.dictionary_encode().cast(pa.dictionary(pa.int32(), pa.string()))


def blank_mask(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Return True where a text value is null, empty, or only whitespace (Unicode's, as str.isspace).

    Only values whose first byte could begin a space are checked character by character; for IDs
    and names that is none of them, so the test costs one gather of first bytes.

    >>> blank_mask(pa.array(["a", "", None, " \\t", "\\u3000", " x"])).tolist()
    [False, True, True, True, True, False]
    """
    return join_masks([_blank_chunk(chunk) for chunk in chunks_of(arr)])


def _blank_chunk(chunk: pa.Array) -> np.ndarray:
    chunk, offsets, data = _string_buffers(chunk)
    blank = (offsets[1:] == offsets[:-1]) | null_mask(chunk)
    if blank.all():
        return blank
    # every row's first byte (an empty last value's offset is past the data: clipped, and it is blank anyway)
    maybe = _MAY_START_SPACE[np.take(data, offsets[:-1], mode="clip")]
    maybe &= ~blank
    rows = np.flatnonzero(maybe)
    if rows.size:
        spaces = pc.utf8_is_space(chunk.take(pa.array(rows))).fill_null(False).to_numpy(zero_copy_only=False)
        blank[rows[spaces]] = True
    return blank


# the bytes of a plain number as most files write them: digits, and for a float one decimal point
_DIGIT_BYTES = np.zeros(256, dtype=bool)
_DIGIT_BYTES[ord("0"):ord("9") + 1] = True
_DECIMAL_BYTES = _DIGIT_BYTES.copy()
_DECIMAL_BYTES[ord(".")] = True
PLAIN_INT_DIGITS = 18  # an integer of at most this many digits is below the schema's limit (10**18)


def plain_numbers(arr: pa.Array | pa.ChunkedArray, integer: bool) -> np.ndarray | None:
    """Return which text values are plain numbers, or None when some value holds any other byte.

    Plain: digits with at most one decimal point and at least one digit (``integer``: digits only, at most
    :data:`PLAIN_INT_DIGITS` of them); null and empty values are not. A column of only such values (or empty
    cells) is what a CSV writer gives, and for it this mask is what the schema's number patterns match,
    from one pass over the bytes instead of a regular expression per value; a sign, an exponent or a space
    anywhere gives None, and the caller matches the patterns.

    >>> plain_numbers(pa.array(["1.5", "", "2", ".", "1.2.3", None, ".5"]), integer=False).tolist()
    [True, False, True, False, False, False, True]
    >>> print(plain_numbers(pa.array(["1.5", " 2"]), integer=False), plain_numbers(pa.array(["1.5"]), integer=True))
    None None
    """
    parts = []
    for chunk in chunks_of(arr):
        chunk, offsets, data = _string_buffers(chunk)
        body = data[offsets[0]:offsets[-1]]
        if not (_DIGIT_BYTES if integer else _DECIMAL_BYTES)[body].all():
            return None
        lengths = np.diff(offsets)
        if integer:
            if lengths.size and lengths.max() > PLAIN_INT_DIGITS:
                return None
            digits = lengths
        else:  # each value's decimal points: the values the points fall in (a point's row is its last offset <= it)
            points = np.bincount(np.searchsorted(offsets, np.flatnonzero(body == ord(".")) + offsets[0],
                                                 side="right") - 1, minlength=len(lengths))
            digits = np.where(points <= 1, lengths - points, 0)
        parts.append((digits > 0) & ~null_mask(chunk))
    return join_masks(parts)


def _has_blank(arr: pa.Array) -> bool:
    """Whether some value is blank but not null (blank_mask counts nulls too)."""
    return np.count_nonzero(blank_mask(arr)) > arr.null_count


def _string_buffers(arr: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Return the array as strings with its offsets (length + 1, from its own offset) and data bytes."""
    if arr.type not in (pa.string(), pa.large_string()):
        arr = arr.cast(pa.string())
    _, offsets_buf, data_buf = arr.buffers()
    offset_type = np.int64 if arr.type == pa.large_string() else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[arr.offset:arr.offset + len(arr) + 1] \
        if offsets_buf is not None else np.zeros(len(arr) + 1, dtype=offset_type)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return arr, offsets, data


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
    ordered = _string_hashes(present)
    ordered.sort()
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    if repeated.size == 0:
        return []
    candidates = present.filter(pa.array(np.isin(_string_hashes(present), repeated)))  # rare: hash again
    counts = pc.value_counts(candidates)
    pairs = [(v, c) for v, c in zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()) if c > 1]
    return sorted(pairs, key=lambda p: (-p[1], p[0]))


def _string_hashes(arr: pa.Array) -> np.ndarray:
    """Return a 64-bit hash of each string's UTF-8 bytes (no nulls), eight bytes at a time.

    Strings of up to eight bytes and equal length never collide (each step is a bijection), so
    for short IDs a repeated hash is a repeated value; longer strings collide by chance only.
    Rows are hashed in blocks, so the temporaries stay small however long the column is.
    """
    arr, offsets, data = _string_buffers(arr)
    hashes = np.empty(len(arr), dtype=np.uint64)
    for lo in range(0, len(arr), _BLOCK_ROWS):
        hi = min(lo + _BLOCK_ROWS, len(arr))
        hashes[lo:hi] = _hash_block(data, offsets[lo:hi + 1].astype(np.int64))
    return hashes


def _hash_block(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    starts = offsets[:-1]
    lengths = np.diff(offsets)
    with np.errstate(over="ignore"):
        h = lengths.view(np.uint64) * _GOLDEN
    longest = int(lengths.max())
    if longest == 0:
        return h
    words_max = -(-longest // 8)
    buf = data
    if int(starts[-1]) + 8 * words_max > data.size:
        # the last words would run past the buffer's end: read this block from a zero-padded copy
        first, last = int(offsets[0]), int(offsets[-1])
        buf = np.zeros(last - first + 8 * words_max, dtype=np.uint8)
        buf[:last - first] = data[first:last]
        starts = starts - first
    # unaligned 8-byte reads at any byte offset
    words = np.ndarray(shape=(buf.size - 7,), dtype=np.uint64, buffer=buf, strides=(1,))
    for j in range(words_max):
        rows: Any = slice(None)
        if lengths.min() <= 8 * j:
            rows = np.flatnonzero(lengths > 8 * j)
        word = words[starts[rows] + 8 * j]
        remaining = lengths[rows] - 8 * j
        if remaining.min() < 8:  # bytes past the string's end sit in the high bytes: shift them out
            word <<= _SHIFT_OUT[np.minimum(remaining, 8)]
        h[rows] = _step(h[rows], word)
    return h


def _step(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    """Fold one word into running hashes: xor, multiply by an odd constant, xor-shift (all bijections)."""
    with np.errstate(over="ignore"):
        h = (h ^ word) * _MIX1
    return h ^ (h >> np.uint64(29))
