"""Arrow text columns: duplicates found by hashing agree with exact counting; categories normalise blanks."""

from collections import Counter
from unittest.mock import patch

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.records.textcolumns import blank_mask, categorical, category_codes, duplicates, take, to_objects

# short alphabets make repeats likely; lengths straddle the 8-byte words the hash reads
ids = st.lists(st.one_of(st.none(), st.text(alphabet="ab\u00e9\U0001f600 ", max_size=20)), max_size=60)


def exact_duplicates(values: list[str | None]) -> list[tuple[str, int]]:
    counts = Counter(v for v in values if v is not None)
    return sorted(((v, c) for v, c in counts.items() if c > 1), key=lambda p: (-p[1], p[0]))


@settings(max_examples=300, deadline=None)
@given(ids, st.integers(0, 5))
def test_duplicates_match_exact_counting_for_any_strings_and_slices(values, offset):
    arr = pa.array(values, pa.string())
    assert duplicates(arr) == exact_duplicates(values)
    with patch("servebench.records.textcolumns._BLOCK_ROWS", 4):  # many blocks, the last one padded
        assert duplicates(arr.cast(pa.large_string())) == exact_duplicates(values)
    # a sliced array starts part-way into its buffers: offsets and the tail padding must follow
    assert duplicates(arr.slice(min(offset, len(values)))) == exact_duplicates(values[offset:])


def test_distinct_ids_differing_only_past_the_first_word_are_not_duplicates():
    values = [f"request-{i:012d}" for i in range(5000)] + ["x" * 100, "x" * 99 + "y"]
    assert duplicates(pa.array(values)) == []
    assert duplicates(pa.array(values + [values[1234], values[-1]])) == [(values[1234], 2), (values[-1], 2)]


def test_categorical_maps_blank_to_absent_and_keeps_names_distinct():
    chunked = pa.chunked_array([pa.array(["hint", "", "review"]).dictionary_encode(),
                                pa.array(["review", "  ", None]).dictionary_encode()])
    codes, names = category_codes(categorical(chunked))
    assert [names[c] if c >= 0 else None for c in codes] == ["hint", None, "review", "review", None, None]
    assert sorted(names) == ["hint", "review"]


def test_to_objects_and_take_keep_absent_values_as_none():
    cat = categorical(np.array(["a", None, "b"], dtype=object))
    assert to_objects(cat).tolist() == ["a", None, "b"]
    assert to_objects(take(cat, np.array([True, False, True]))).tolist() == ["a", "b"]
    assert to_objects(take(pa.array(["x", None, "z"]), np.array([2, 1]))).tolist() == ["z", None]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(alphabet=" \t\n\r\u00a0\u3000\u2003ab\u00e9", max_size=4)),
                max_size=30), st.integers(0, 5))
def test_blank_mask_matches_python_strip(values, cut):
    arr = pa.array(values, pa.string()).slice(min(cut, len(values)))
    assert blank_mask(arr).tolist() == [v is None or not v.strip() for v in values[cut:]]
