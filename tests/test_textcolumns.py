"""Arrow text columns: duplicates found by hashing agree with exact counting; categories normalise blanks."""

import re
from collections import Counter
from unittest.mock import patch

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from servebench.errors import ServebenchError
from servebench.records.loaded import LoadedRecords
from servebench.records.loaders import parse_csv, to_table
from servebench.records.schema import _FLOAT_RE, _INT_RE
from servebench.records.textcolumns import (
    blank_mask,
    categorical,
    category_codes,
    duplicates,
    plain_numbers,
    take,
    to_objects,
)

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


# cells of a CSV number column: mostly digits and points (the fast path), sometimes a sign, exponent or space
number_cells = st.lists(st.one_of(st.none(), st.text(alphabet="0123456789.", max_size=22),
                                  st.text(alphabet="0123456789.+-e ", max_size=6)), max_size=40)


@settings(max_examples=400, deadline=None)
@given(number_cells, st.booleans(), st.integers(0, 5))
def test_plain_numbers_agree_with_the_schemas_number_patterns(values, integer, offset):
    """Where plain_numbers answers, it is exactly what the schema's regular expressions match (nulls: no match)."""
    pattern = re.compile(_INT_RE if integer else _FLOAT_RE)
    arr = pa.chunked_array([pa.array(values[:3], pa.string()), pa.array(values[3:], pa.string())])
    for column, cells in ((arr, values), (pa.array(values, pa.string()).slice(offset), values[offset:])):
        plain = plain_numbers(column, integer)
        if plain is not None:
            assert plain.tolist() == [v is not None and pattern.match(v) is not None for v in cells]
    if all(v is None or set(v) <= set("0123456789" if integer else "0123456789.") for v in values) and \
            not (integer and any(v is not None and len(v) > 18 for v in values)):
        assert plain_numbers(arr, integer) is not None  # the common case takes the fast path


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.text(alphabet="0123456789.", min_size=1, max_size=8),
                          st.text(alphabet="0123456789.", max_size=4),
                          st.text(alphabet="0123456789", max_size=20)), min_size=1, max_size=12))
def test_a_csv_of_plain_numbers_parses_as_through_the_patterns(rows):
    """The fast path changes nothing: values, presence, bad cells and the first error are those of the regex path."""
    data = ("start,end,status,output_tokens\n" + "".join(f"{a},{b},success,{c}\n" for a, b, c in rows)).encode()

    def parsed() -> tuple[list, str | None]:
        try:
            rows_ = parse_csv(data, "r.csv")
        except ServebenchError as exc:
            return [], str(exc)
        cols = [(name, [repr(v) for v in np.asarray(c.values).tolist()], c.present.tolist(), c.bad.tolist())
                for name, c in rows_.columns.items() if name in ("start", "end", "output_tokens")]
        try:
            to_table(LoadedRecords(rows_, "csv", []))
        except ServebenchError as exc:
            return cols, str(exc)
        return cols, None

    fast = parsed()
    with patch("servebench.records.schema.plain_numbers", return_value=None):
        assert parsed() == fast
