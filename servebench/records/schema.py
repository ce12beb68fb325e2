"""The canonical timing record: its schema (fields, messages, the pydantic model) and parsing into columns.

``parse_objects`` and ``parse_arrow`` read Python objects or Arrow tables into :class:`ParsedRows`
without changing them; ``servebench.records.table`` validates those rows and holds the result.
"""

from __future__ import annotations

import json
import math
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from types import MappingProxyType
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, model_validator

from servebench.errors import InputFormatError, RecordValidationError
from servebench.records import token_times as tt
from servebench.records.arrow_masks import all_false, bool_values, null_mask
from servebench.records.statuses import STATUSES, Status
from servebench.records.textcolumns import blank_mask, plain_numbers, text_array
from servebench.records.token_times import LIST_ALIASES, LIST_FIELDS, ListColumn

SUCCESS = 0  # index of "success" in STATUSES
_STATUS_CODE = {name: i for i, name in enumerate(STATUSES)}

MSG_WINDOW = "Invalid observation window"
MSG_EMPTY = "Expected nonempty records"
MSG_OBJECT = "Record must be an object"
MSG_TIMES = "Invalid request times"
MSG_STATUS = "Invalid status"
MSG_SUCCESS = "Invalid successful output"
MSG_ADMITTED = "Invalid admission time"
MSG_FIRST_TOKEN = "Invalid first token time"  # on a non-success that has one
MSG_OUTPUT = "Invalid output tokens"
MSG_PROMPT = "Invalid prompt tokens"
MSG_CACHED = "Invalid cached prompt tokens"
MSG_ATTEMPT = "Invalid attempt"
MSG_FIRST_ANSWER = "Invalid first answer token time"
MSG_REASONING = "Invalid reasoning tokens"
MSG_TEXT = "Invalid text field"
MSG_EXTRA = "Invalid extra field"
NO_EXTRA: Mapping[str, Any] = MappingProxyType({})  # no columns beyond the schema

FIELDS: tuple[str, ...] = (
    "request_id", "start", "admitted", "first_token", "end", "status",
    "prompt_tokens", "output_tokens", "slice", "error", "cached_prompt_tokens", "logical_id", "attempt",
    "first_answer_token", "reasoning_tokens",
)
ALIASES: dict[str, str] = {
    "firstToken": "first_token", "outputTokens": "output_tokens", "requestId": "request_id",
    "promptTokens": "prompt_tokens", "id": "request_id", "cachedPromptTokens": "cached_prompt_tokens",
    "logicalId": "logical_id", "firstAnswerToken": "first_answer_token", "reasoningTokens": "reasoning_tokens",
}
FLOAT_FIELDS = ("start", "end", "first_token", "admitted", "first_answer_token")
INT_FIELDS = ("output_tokens", "prompt_tokens", "cached_prompt_tokens", "attempt", "reasoning_tokens")
TEXT_FIELDS = ("request_id", "slice", "error", "logical_id")


def record_dict(**fields: Any) -> dict[str, Any]:
    """Return a canonical record dict in field order, leaving out absent (None) optional fields.

    >>> record_dict(status="timeout", end=7.0, start=2.0, first_token=None)
    {'start': 2.0, 'end': 7.0, 'status': 'timeout'}
    """
    unknown = set(fields) - set(FIELDS) - set(LIST_FIELDS)
    if unknown:
        raise TypeError(f"not record fields: {', '.join(sorted(unknown))}")
    return {name: fields[name] for name in FIELDS + LIST_FIELDS if fields.get(name) is not None}


class TimingRecord(BaseModel):
    """One request, timed in seconds on one monotonic clock (the spec's contract, plus optional stages)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    request_id: StrictStr | None = Field(None, alias="requestId", description="Unique request ID.")
    start: StrictFloat | StrictInt = Field(description="Arrival time, seconds.")
    admitted: StrictFloat | StrictInt | None = Field(
        None, description="Server admission time, seconds: queue wait = admitted - start.")
    first_token: StrictFloat | StrictInt | None = Field(
        None, alias="firstToken", description="Time of the first output token, seconds (required on success).")
    end: StrictFloat | StrictInt = Field(description="Terminal time, seconds.")
    status: Status = Field(description="Terminal outcome.")
    prompt_tokens: StrictInt | None = Field(None, alias="promptTokens", ge=0, description="Input tokens.")
    output_tokens: StrictInt | None = Field(
        None, alias="outputTokens", ge=0,
        description="Output tokens: at least 1 on success; on a non-success, tokens generated before it ended (wasted work).")
    slice: StrictStr | None = Field(None, description="Workload class or tenant.")
    error: StrictStr | None = Field(None, description="Cause of a non-success.")
    token_times: list[StrictFloat | StrictInt] | None = Field(
        None, alias="tokenTimes",
        description="Arrival of each output token (or streamed chunk), seconds: non-decreasing, the first equal to "
                    "first_token, the last at or before end; on success one per output token, or one per chunk "
                    "with token_counts.")
    token_counts: list[StrictInt] | None = Field(
        None, alias="tokenCounts",
        description="Tokens each arrival in token_times carried (each at least 1; same length; on success they "
                    "sum to output_tokens). Absent: one token per arrival.")
    cached_prompt_tokens: StrictInt | None = Field(
        None, alias="cachedPromptTokens", ge=0,
        description="Prompt tokens served from the server's prefix cache (at most prompt_tokens).")
    logical_id: StrictStr | None = Field(
        None, alias="logicalId",
        description="The user request this attempt belongs to: every attempt of one request (its retries) shares it.")
    attempt: StrictInt | None = Field(
        None, description="Which attempt of its logical request this record is: 1, 2, ... (at least 1).")
    first_answer_token: StrictFloat | StrictInt | None = Field(
        None, alias="firstAnswerToken",
        description="Time of the first answer token, seconds: the first that is not reasoning (a reasoning model "
                    "thinks first, and first_token is the first token of either kind). Between first_token and end.")
    reasoning_tokens: StrictInt | None = Field(
        None, alias="reasoningTokens", ge=0,
        description="Output tokens the model spent reasoning: part of output_tokens, at most it.")

    @model_validator(mode="after")
    def _check_order(self) -> "TimingRecord":
        """Apply the spec's per-record rules that need no window, in the spec's order."""
        if not (math.isfinite(self.start) and math.isfinite(self.end) and self.start <= self.end):
            raise ValueError(MSG_TIMES)
        if self.status == "success":
            ft, out = self.first_token, self.output_tokens
            if ft is None or not math.isfinite(ft) or not (self.start <= ft <= self.end) or out is None or out < 1:
                raise ValueError(MSG_SUCCESS)
        if self.status != "success" and self.first_token is not None:
            if not (math.isfinite(self.first_token) and self.start <= self.first_token <= self.end):
                raise ValueError(MSG_FIRST_TOKEN)
        if self.admitted is not None:
            upper = self.first_token if self.status == "success" else self.end
            if not (math.isfinite(self.admitted) and self.start <= self.admitted <= upper):
                raise ValueError(MSG_ADMITTED)
        if self.token_times is not None or self.token_counts is not None:
            _check_model_token_times(self)
        if (self.cached_prompt_tokens is not None and self.prompt_tokens is not None
                and self.cached_prompt_tokens > self.prompt_tokens):
            raise ValueError(MSG_CACHED)
        if self.attempt is not None and self.attempt < 1:
            raise ValueError(MSG_ATTEMPT)
        fa = self.first_answer_token
        if fa is not None and not (self.first_token is not None and math.isfinite(fa)
                                   and self.first_token <= fa <= self.end):
            raise ValueError(MSG_FIRST_ANSWER)
        if (self.reasoning_tokens is not None and self.output_tokens is not None
                and self.reasoning_tokens > self.output_tokens):
            raise ValueError(MSG_REASONING)
        return self


# --------------------------------------------------------------------------- parsed columns


@dataclass(frozen=True)
class Column:
    """One parsed field: values (NaN or -1 where absent), which rows have it, which are malformed.

    Text fields hold an object array (from Python objects) or an Arrow array (from Arrow tables),
    as given: ``RecordTable.from_columns`` turns either into its Arrow columns.
    """

    values: Any
    present: np.ndarray
    bad: np.ndarray
    raw: Callable[[int], Any]
    from_text: bool = False  # numbers were read from text cells (CSV), so a value shown is always text


@dataclass(frozen=True)
class ParsedRows:
    """Fields parsed from any source, not yet validated."""

    n: int
    columns: dict[str, Column]
    not_object: np.ndarray
    source: str | None
    extra: Mapping[str, Any] = dataclass_field(default_factory=lambda: NO_EXTRA)  # unknown columns, by name
    notes: tuple[str, ...] = ()  # what reading changed and the user should know (integer IDs read as text)
    lists: Mapping[str, ListColumn] = dataclass_field(default_factory=lambda: NO_EXTRA)  # token_times, token_counts


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


# Token counts at or above this are refused as too large: they hold in int64, and so do sums of a few.
INT_LIMIT = 10**18


def _is_int(v: Any) -> bool:
    return is_whole(v) and abs(int(v)) < INT_LIMIT


def is_whole(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def as_float(v: Any) -> float:
    """Return a number as a float; an integer too large for one (10**400) becomes +/-infinity."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


def _is_utf8(text: str) -> bool:
    """Whether a string can be written as UTF-8 (a lone surrogate such as JSON's "\\ud800" cannot)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxlong, _SHORT.maxother, _SHORT.maxlevel = 80, 40, 80, 3


def shown(value: Any) -> str:
    """Return a value as an error message shows it: Python's repr, plain for numpy numbers, shortened.

    >>> shown(np.float64(2.5)), shown(10**400)[:8], shown("x")
    ('2.5', '10000000', "'x'")
    """
    if isinstance(value, np.generic):
        value = value.item()
    if is_whole(value) and value.bit_length() > 4000:  # repr() refuses ints past 4300 digits
        digits = int(value.bit_length() * math.log10(2))  # the count, or one fewer
        return f"an integer of {digits + (abs(value) >= 10**digits):,} digits"
    return _SHORT.repr(value)


def canonical_name(key: str) -> str | None:
    """Return the canonical field name for ``key`` (accepting camelCase aliases), or None if unknown."""
    if key in FIELDS or key in LIST_FIELDS:
        return key
    return ALIASES.get(key) or LIST_ALIASES.get(key)


def parse_objects(records: Sequence[Any], source: str | None = None, *, strict_keys: bool = False,
                  keep_extra: bool = False) -> ParsedRows:
    """Parse a list of mappings (or TimingRecord models) without changing them.

    ``keep_extra`` keeps unknown keys as extra columns (files); else ``strict_keys`` rejects them
    (servebench's own records); the spec's ``summarize`` ignores them.
    """
    n = len(records)
    not_object = np.zeros(n, dtype=bool)
    rows: list[Mapping[str, Any]] = []
    extra_names: dict[str, None] = {}  # an ordered set
    for i, rec in enumerate(records):
        if isinstance(rec, BaseModel):
            rec = rec.model_dump()
        if not isinstance(rec, Mapping):
            not_object[i] = True
            rows.append({})
            continue
        if keep_extra:
            extra_names.update((key, None) for key in rec if canonical_name(key) is None)
        elif strict_keys:
            for key in rec:
                if canonical_name(key) is None:
                    raise RecordValidationError(
                        f"unknown field; expected some of {', '.join(FIELDS)}",
                        source=source, row=i + 1, field=printable_key(key), rule="unknown field")
        if (keep_extra or strict_keys) and not _ALIAS_KEYS.isdisjoint(rec):
            _check_one_value_per_field(rec, i, source)
        rows.append(rec)
    for key in extra_names:
        if not (isinstance(key, str) and _is_utf8(key)):
            row = next(i for i, r in enumerate(rows) if key in r)
            raise RecordValidationError("a field name that is not valid Unicode text (a lone surrogate)",
                                        source=source, row=row + 1, field=printable_key(key), rule="unknown field")

    def get(row: Mapping[str, Any], name: str) -> Any:
        if name in row:
            return row[name]
        for alias, canon in ALIASES.items():
            if canon == name and alias in row:
                return row[alias]
        return None

    columns: dict[str, Column] = {}
    int_id_rows: dict[str, list[int]] = {f: [] for f in _INT_ID_FIELDS}
    for name in FIELDS:
        raw_vals = [get(r, name) for r in rows]
        present = np.array([v is not None for v in raw_vals], dtype=bool)
        bad = np.zeros(n, dtype=bool)
        if name in FLOAT_FIELDS:
            vals = np.full(n, np.nan)
            for i, v in enumerate(raw_vals):
                if v is None:
                    continue
                if is_number(v):
                    vals[i] = as_float(v)
                else:
                    bad[i] = True
        elif name in INT_FIELDS:
            vals = np.full(n, -1, dtype=np.int64)
            for i, v in enumerate(raw_vals):
                if v is None:
                    continue
                if _is_int(v):
                    vals[i] = int(v)
                else:
                    bad[i] = True
        elif name == "status":
            vals = np.array([_STATUS_CODE.get(v, -1) if isinstance(v, str) else -1 for v in raw_vals], dtype=np.int8)
        else:
            vals = np.empty(n, dtype=object)
            for i, v in enumerate(raw_vals):
                if v is None:
                    continue
                if isinstance(v, str) and _is_utf8(v):
                    vals[i] = v
                elif name in _INT_ID_FIELDS and _is_int(v):
                    vals[i] = str(v)
                    int_id_rows[name].append(i)
                else:
                    bad[i] = True
            # blank text ("", " ") is absent, as an empty cell is in CSV and a blank string in Parquet
            blank = present & ~bad & blank_mask(pa.array(vals, pa.string(), from_pandas=False))
            if blank.any():
                present &= ~blank
                vals[blank] = None
        columns[name] = Column(vals, present, bad, raw=lambda i, rv=raw_vals: rv[i])
    notes = tuple(int_ids_note(len(rows), rows[0], f) for f, rows in int_id_rows.items() if rows)
    extra = {key: _extra_from_objects(key, [r.get(key) for r in rows], source) for key in extra_names}
    lists: dict[str, ListColumn] = {}
    for name in LIST_FIELDS:
        raw_list = [_list_value(r, name) for r in rows]
        if any(v is not None for v in raw_list):
            lists[name] = tt.column_from_objects(name, raw_list)
    return ParsedRows(n, columns, not_object, source, MappingProxyType(extra) if extra else NO_EXTRA, notes=notes,
                      lists=MappingProxyType(lists) if lists else NO_EXTRA)


def _list_value(row: Mapping[str, Any], name: str) -> Any:
    """Return a record's token_times or token_counts under its name or its camelCase alias."""
    if name in row:
        return row[name]
    return next((row[alias] for alias, canon in LIST_ALIASES.items() if canon == name and alias in row), None)


def _check_model_token_times(rec: "TimingRecord") -> None:
    """Apply the token-time rules to one model record (the same rules as for files)."""
    one = np.array
    times = tt.column_from_objects("token_times", [rec.token_times])
    counts = tt.column_from_objects("token_counts", [rec.token_counts])
    rules = tt.check(times, counts, start=one([float(rec.start)]), end=one([float(rec.end)]),
                     first_token=one([np.nan if rec.first_token is None else float(rec.first_token)]),
                     first_token_present=one([rec.first_token is not None]),
                     output_tokens=one([-1 if rec.output_tokens is None else rec.output_tokens]),
                     output_present=one([rec.output_tokens is not None]),
                     success=one([rec.status == "success"]), shown=shown)
    if rules is not None and rules.bad[0]:
        _, message, detail = rules.explain(0)
        raise ValueError(f"{message}: {detail}")


_ALIAS_KEYS = frozenset(ALIASES) | frozenset(LIST_ALIASES)


def printable_key(key: Any) -> str:
    """Return a field name as an error message can print it (a lone surrogate escaped)."""
    text = str(key)
    return text if _is_utf8(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _check_one_value_per_field(rec: Mapping[str, Any], i: int, source: str | None) -> None:
    """Refuse a record that gives one field under two names (output_tokens and outputTokens) with different values."""
    seen: dict[str, str] = {}
    for key in rec:
        canon = canonical_name(key)
        if canon is None:
            continue
        if canon in seen:
            a, b = rec[seen[canon]], rec[key]
            if type(a) is not type(b) or a != b:
                raise RecordValidationError(
                    f"given twice, as '{seen[canon]}' ({shown(a)}) and as '{key}' ({shown(b)}); keep one",
                    source=source, row=i + 1, field=canon, rule="field given twice")
        else:
            seen[canon] = key


def int_ids_note(count: int, first_row: int, field: str = "request_id") -> str:
    """Say that integer IDs (``request_id`` or ``logical_id``) were read as text: the schema's IDs are strings."""
    what = "request" if field == "request_id" else "logical"
    return (f"{field}: {count:,} integer ID{'s' if count > 1 else ''} (first in row {first_row + 1}) "
            f"read as text, e.g. 7 as '7'; the schema's {what} IDs are strings")


def _extra_from_objects(name: str, values: list[Any], source: str | None) -> pa.Array:
    """Return one extra column's values as an Arrow array; any scalar goes, None means absent.

    Values of mixed types (text in one row, a number in another) are kept as their JSON text.
    """
    for i, v in enumerate(values):
        if isinstance(v, (Mapping, list, tuple)):
            raise RecordValidationError(
                f"{MSG_EXTRA}: {'an object' if isinstance(v, Mapping) else 'a list'} is not a scalar; "
                "a column the schema does not know must hold text, numbers or booleans",
                source=source, row=i + 1, field=name, rule=MSG_EXTRA)
    try:
        return pa.array(values, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeError):
        pass
    text: list[str | None] = []
    for i, v in enumerate(values):
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                raise RecordValidationError(f"{MSG_EXTRA}: {v!r} is not valid Unicode text (a lone surrogate)",
                                            source=source, row=i + 1, field=name, rule=MSG_EXTRA) from None
        text.append(v if v is None or isinstance(v, str) else json.dumps(v))
    return pa.array(text, pa.string())


_FLOAT_RE = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
_INT_RE = r"^\s*[+-]?0*\d{1,18}\s*$"  # at most 18 digits: below INT_LIMIT, so the cast to int64 cannot fail
WHOLE_TEXT = re.compile(r"\s*[+-]?\d+\s*")
NUMBER_TEXT = re.compile(_FLOAT_RE)
_INT_ID_FIELDS = ("request_id", "logical_id")  # integer IDs are read as text, with a note


def _arrow_column(arr: pa.ChunkedArray, name: str, optional_nan_is_missing: bool, text_numbers: bool) -> Column:
    """Parse one canonical field of an Arrow table; ``text_numbers``: a text column's numbers are read (CSV)."""
    typ = arr.type
    n = len(arr)
    def raw(i: int, a: pa.Array = arr) -> Any:
        return a[i].as_py()
    if name == "status" or (pa.types.is_dictionary(typ) and name in TEXT_FIELDS):
        return _arrow_category(arr, name, raw)
    if pa.types.is_dictionary(typ):
        arr = arr.cast(typ.value_type)
        typ = arr.type
    is_text = pa.types.is_string(typ) or pa.types.is_large_string(typ)
    null = null_mask(arr)
    if is_text:
        present = ~blank_mask(arr)
    else:
        present = ~null
    if name in FLOAT_FIELDS or name in INT_FIELDS:
        is_int_field = name in INT_FIELDS
        if is_text and text_numbers:
            plain = plain_numbers(arr, integer=is_int_field)  # the patterns' answer for a column of plain numbers
            if plain is not None:
                ok_np = plain
                cleaned = pc.if_else(pa.array(ok_np), text_array(arr), pa.scalar(None, arr.type)) \
                    if np.count_nonzero(ok_np) < n else arr
            else:
                ok = pc.match_substring_regex(arr, _INT_RE if is_int_field else _FLOAT_RE).fill_null(False)
                ok_np = bool_values(ok, null_as=False)
                cleaned = pc.if_else(ok, pc.utf8_trim_whitespace(arr), pa.scalar(None, arr.type))
                if is_int_field:  # "+4" is 4, as "+4.5" is 4.5 to the float cast; Arrow's integer cast refuses the sign
                    cleaned = pc.replace_substring_regex(cleaned, pattern=r"^\+", replacement="")
            bad = present & ~ok_np
            target = pa.int64() if is_int_field else pa.float64()
            nums = pc.cast(cleaned, target)
        elif is_text:  # a typed file (Parquet) holds numbers as numbers: text is refused, as JSON's "5" is
            bad = present.copy()
            nums = pa.nulls(n, pa.int64() if is_int_field else pa.float64())
        elif pa.types.is_boolean(typ) or not (pa.types.is_integer(typ) or pa.types.is_floating(typ)
                                              or pa.types.is_decimal(typ)):
            bad = present.copy()
            nums = pa.nulls(n, pa.int64() if is_int_field else pa.float64())
        elif is_int_field and not pa.types.is_integer(typ):
            floats = pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
            nan = np.isnan(np.where(present, floats, 0.0))
            if optional_nan_is_missing:
                present = present & ~nan
            bad = present.copy()
            nums = pa.nulls(n, pa.int64())
        else:
            bad = all_false(n)
            if is_int_field and typ in (pa.int64(), pa.uint64()):  # uint64 max does not fit; 10**18 is too large
                too_big = pc.greater_equal(arr, pa.scalar(INT_LIMIT, typ))
                if typ == pa.int64():
                    too_big = pc.or_(too_big, pc.less_equal(arr, pa.scalar(-INT_LIMIT, typ)))
                bad = bool_values(too_big, null_as=False)
                if bad.any():
                    arr = pc.if_else(too_big, pa.scalar(None, typ), arr)
            # unsafe: an integer past 2**53 becomes the nearest float, as Python's float() does
            nums = pc.cast(arr, pa.int64() if is_int_field else pa.float64(), safe=False)
        # nulls become the absent marker: NaN by the conversion itself for floats, filled in Arrow for integers
        absent: Any = -1 if is_int_field else np.nan
        filled = pc.fill_null(nums, absent) if nums.null_count and is_int_field else nums
        vals = np.asarray(filled.to_numpy(zero_copy_only=False), dtype=np.int64 if is_int_field else np.float64)
        if not is_int_field and optional_nan_is_missing and not is_text:
            present = present & ~np.isnan(vals)
        if bad.any():
            vals = np.where(bad, absent, vals)
        return Column(vals, present, bad, raw, from_text=is_text and text_numbers)
    # text fields stay in Arrow, null where absent (RecordTable.from_columns encodes them)
    bad = all_false(n)
    if is_text or (name in _INT_ID_FIELDS and pa.types.is_integer(typ)):
        text = text_array(arr)
        if not present.all():
            text = pc.if_else(pa.array(present), text, pa.scalar(None, pa.string()))
    else:
        text = pa.nulls(n, pa.string())
        bad = present.copy()
    return Column(text, present, bad, raw)


def _arrow_category(arr: pa.ChunkedArray, name: str, raw: Callable[[int], Any]) -> Column:
    """Parse status (to int8 codes) or a dictionary-encoded text column through its dictionary."""
    n = len(arr)
    combined = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if not pa.types.is_dictionary(combined.type):
        combined = combined.dictionary_encode()
    dictionary, indices = combined.dictionary, combined.indices
    is_text = pa.types.is_string(dictionary.type) or pa.types.is_large_string(dictionary.type)
    null = null_mask(indices)
    if name == "status":
        lookup = np.array([_STATUS_CODE.get(v, -1) if isinstance(v, str) else -1 for v in dictionary.to_pylist()]
                          + [-1], dtype=np.int8)
        idx = indices.fill_null(len(dictionary)) if indices.null_count else indices  # null picks the trailing -1
        return Column(lookup[idx.to_numpy(zero_copy_only=False)], ~null, all_false(n), raw)
    if not is_text:
        return Column(pa.nulls(n, pa.string()), ~null, ~null, raw)
    return Column(combined, ~null, all_false(n), raw)


def parse_arrow(table: pa.Table, source: str | None = None, *, text_numbers: bool = False) -> ParsedRows:
    """Parse an Arrow table whose columns are canonical names or aliases.

    ``text_numbers``: every column is text (CSV), so numbers are read from it; in a typed table
    (Parquet) a number stored as text is refused, as nothing is coerced.
    """
    table = plain_strings(table)
    names: dict[str, str] = {}
    extra: dict[str, Any] = {}
    lists: dict[str, ListColumn] = {}
    for i, col in enumerate(table.column_names):
        canon = canonical_name(col)
        if canon in LIST_FIELDS:
            if canon in lists:
                raise InputFormatError(f"{source or 'input'}: two columns mean '{canon}'")
            lists[canon] = tt.column_from_arrow(canon, table.column(i))
            continue
        if canon is None:  # a column the schema does not know (gpu, model, note): kept as it is
            if col in extra:
                raise InputFormatError(f"{source or 'input'}: two columns are named '{col}'")
            extra[col] = _extra_from_arrow(col, table.column(i), source)
            continue
        if canon in names:
            raise InputFormatError(f"{source or 'input'}: columns '{names[canon]}' and '{col}' both mean '{canon}'")
        names[canon] = col
    n = table.num_rows
    columns: dict[str, Column] = {}
    for name in FIELDS:
        if name in names:
            columns[name] = _arrow_column(table.column(names[name]), name,
                                          optional_nan_is_missing=name not in ("start", "end"),
                                          text_numbers=text_numbers)
        else:
            # an absent column is one read-only marker seen n times: no memory per row
            empty_vals = (np.broadcast_to(np.float64(np.nan), n) if name in FLOAT_FIELDS else
                          np.broadcast_to(np.int64(-1), n) if name in INT_FIELDS else
                          np.broadcast_to(np.int8(-1), n) if name == "status" else pa.nulls(n, pa.string()))
            columns[name] = Column(empty_vals, all_false(n), all_false(n), raw=lambda i: None)
    notes = tuple(int_ids_note(int(columns[f].present.sum()), int(np.argmax(columns[f].present)), f)
                  for f in _INT_ID_FIELDS
                  if f in names and pa.types.is_integer(table.column(names[f]).type) and columns[f].present.any())
    return ParsedRows(n, columns, all_false(n), source, MappingProxyType(extra) if extra else NO_EXTRA,
                      notes=notes, lists=MappingProxyType(lists) if lists else NO_EXTRA)


def plain_strings(table: pa.Table) -> pa.Table:
    """Return the table with its view-typed text columns (``string_view``, as Polars writes) as plain strings.

    A string view holds the same text; every reader here takes ``string`` (and ``large_string``).
    """
    for i, field in enumerate(table.schema):
        typ = field.type
        if pa.types.is_string_view(typ):
            table = table.set_column(i, field.name, table.column(i).cast(pa.string()))
        elif pa.types.is_dictionary(typ) and pa.types.is_string_view(typ.value_type):
            table = table.set_column(i, field.name, table.column(i).cast(pa.dictionary(typ.index_type, pa.string())))
    return table


def _extra_from_arrow(name: str, arr: pa.ChunkedArray, source: str | None) -> pa.ChunkedArray:
    """Return an extra column as read, blank text as absent; refuse one whose values are not scalars."""
    typ = arr.type.value_type if pa.types.is_dictionary(arr.type) else arr.type
    if pa.types.is_nested(typ):
        raise InputFormatError(f"{source or 'input'}, field '{name}': {MSG_EXTRA}: its values are {typ}, not "
                               "scalars; a column the schema does not know must hold text, numbers or booleans")
    if arr.type in (pa.string(), pa.large_string()):  # an empty CSV cell means absent, as in any column
        blank = blank_mask(arr)
        if np.count_nonzero(blank) > arr.null_count:
            return pc.if_else(pa.array(blank), pa.scalar(None, pa.string()), text_array(arr))
    return arr
