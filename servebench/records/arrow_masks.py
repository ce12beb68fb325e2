"""Arrow validity and boolean arrays as numpy masks, by unpacking their bitmaps.

pyarrow's own ``to_numpy`` of a boolean array goes value by value; unpacking the bitmap with
numpy is tens of times faster, which matters for every column of a ten-million-row file.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def chunks_of(arr: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """Return the chunks of a chunked array, or the array itself as the one chunk."""
    return list(arr.chunks) if isinstance(arr, pa.ChunkedArray) else [arr]


def _bits(buffer: pa.Buffer, offset: int, length: int) -> np.ndarray:
    packed = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(packed, count=offset + length, bitorder="little")[offset:].view(bool)


def join_masks(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate per-chunk masks (no copy for a single chunk)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def null_mask(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Return True where a value is null.

    >>> null_mask(pa.chunked_array([[1, None], [None, 4, 5]])).tolist()
    [False, True, True, False, False]
    """
    parts = []
    for chunk in chunks_of(arr):
        validity = chunk.buffers()[0]
        if chunk.null_count == 0:
            parts.append(np.zeros(len(chunk), dtype=bool))
        elif validity is None:  # the null type: every value is null
            parts.append(np.ones(len(chunk), dtype=bool))
        else:
            parts.append(~_bits(validity, chunk.offset, len(chunk)))
    return join_masks(parts)


def bool_values(arr: pa.Array | pa.ChunkedArray, null_as: bool) -> np.ndarray:
    """Return a boolean Arrow array as a numpy mask, with ``null_as`` where a value is null.

    >>> bool_values(pa.array([True, None, False]), null_as=True).tolist()
    [True, True, False]
    """
    parts = []
    for chunk in chunks_of(arr):
        values = _bits(chunk.buffers()[1], chunk.offset, len(chunk))
        if chunk.null_count:
            values = np.where(null_mask(chunk), null_as, values)
        parts.append(values)
    return join_masks(parts)
