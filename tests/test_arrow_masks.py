"""Bitmap unpacking agrees with pyarrow value by value, for chunked and sliced arrays."""

import pyarrow as pa
from hypothesis import given, settings, strategies as st

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
