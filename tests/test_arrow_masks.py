"""Bitmap unpacking agrees with pyarrow value by value, for chunked and sliced arrays."""

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.records.arrow_masks import bool_values, null_mask

values = st.lists(st.one_of(st.none(), st.booleans()), max_size=40)


@settings(max_examples=200, deadline=None)
@given(st.lists(values, min_size=1, max_size=4), st.integers(0, 9), st.booleans())
def test_masks_match_pyarrow_for_chunked_and_sliced_arrays(chunks, cut, null_as):
    arr = pa.chunked_array([pa.array(c, pa.bool_()) for c in chunks], pa.bool_())
    arr = arr.slice(min(cut, len(arr)))  # the first chunk starts part-way into its bitmap
    expected = arr.to_pylist()
    assert null_mask(arr).tolist() == [v is None for v in expected]
    assert bool_values(arr, null_as).tolist() == [null_as if v is None else v for v in expected]


def test_null_type_is_all_null():
    assert null_mask(pa.nulls(3)).tolist() == [True, True, True]


def test_a_column_without_nulls_has_a_null_mask_that_takes_no_memory():
    """np.zeros' untouched pages, once read, cost a second fault when reused (servebench.records.arrow_masks)."""
    n = 2_000_000
    mask = null_mask(pa.chunked_array([pa.array(np.arange(n))]))
    assert mask.shape == (n,) and not mask.any()
    assert not mask.flags.writeable  # a caller that writes to it fails at once, not silently
    assert mask.strides == (0,)  # one byte, seen n times
    both = null_mask(pa.chunked_array([pa.array([1, 2]), pa.array([None, 3])]))
    assert both.tolist() == [False, False, True, False] and both.flags.writeable  # joined chunks are a new array
