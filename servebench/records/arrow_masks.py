"""Arrow validity and boolean arrays as numpy masks.

Null masks unpack the validity bitmap with numpy: 2.3x to 3.6x less CPU than pyarrow's
``is_null().to_numpy()`` on a 10M-row column (``benchmarks/fast_paths.py``, case ``null_mask``).
Boolean values use pyarrow's own conversion: unpacking their bitmap by hand measured no faster
(case ``bool_values``, 1.0x), so it was dropped.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def chunks_of(arr: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """Return the chunks of a chunked array, or the array itself as the one chunk."""
    return list(arr.chunks) if isinstance(arr, pa.ChunkedArray) else [arr]


def _bits(buffer: pa.Buffer, offset: int, length: int) -> np.ndarray:
    packed = np.frombuffer(buffer, dtype=np.uint8)
    return np.unpackbits(packed, count=offset + length, bitorder="little")[offset:].view(bool)


def all_false(n: int) -> np.ndarray:
    """Return a read-only mask of ``n`` False values that takes no memory (one byte, seen ``n`` times).

    ``np.zeros`` gets fresh pages from calloc untouched; reading them maps the kernel's shared zero
    page, and once freed and reused, the first write to each costs a second fault and a TLB flush on
    every core running this process: 20,000 of them in a 10M-record ``summarize``, 0.4 s of system time
    (``docs/scale.md``). A mask that is never written need not be memory at all.
    """
    return np.broadcast_to(np.False_, n)


def join_masks(parts: list[np.ndarray]) -> np.ndarray:
    """Concatenate per-chunk masks (no copy for a single chunk)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else all_false(0)


def null_mask(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Return True where a value is null (read-only where no value is).

    >>> null_mask(pa.chunked_array([[1, None], [None, 4, 5]])).tolist()
    [False, True, True, False, False]
    """
    parts = []
    for chunk in chunks_of(arr):
        validity = chunk.buffers()[0]
        if chunk.null_count == 0:
            parts.append(all_false(len(chunk)))
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
    return np.asarray(pc.fill_null(arr, null_as).to_numpy(zero_copy_only=False), dtype=bool)
