"""Validated timing records as columns (``RecordTable``), and validation of parsed rows.

Validation follows the spec's record-by-record order (object, times, status, successful output),
then servebench's own rules for optional fields. It is vectorised: every rule is a boolean mask,
the first failing row is found with one ``argmax``, and only that row is explained in words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property
from types import MappingProxyType
from typing import Any

import numpy as np
import pyarrow as pa

from servebench.errors import RecordValidationError
from servebench.records import token_times as tt
from servebench.records.schema import (
    MSG_ADMITTED,
    MSG_ATTEMPT,
    MSG_CACHED,
    MSG_FIRST_ANSWER,
    MSG_FIRST_TOKEN,
    MSG_OBJECT,
    MSG_OUTPUT,
    MSG_PROMPT,
    MSG_REASONING,
    MSG_STATUS,
    MSG_SUCCESS,
    MSG_TEXT,
    MSG_TIMES,
    MSG_WINDOW,
    NO_EXTRA,
    NUMBER_TEXT,
    SUCCESS,
    TEXT_FIELDS,
    WHOLE_TEXT,
    Column,
    ParsedRows,
    as_float,
    is_number,
    is_whole,
    shown,
)
from servebench.records.statuses import STATUSES
from servebench.records.textcolumns import categorical, category_codes, text_array, to_objects
from servebench.records.textcolumns import take as take_rows


@dataclass(frozen=True)
class RecordTable:
    """Validated records as columns: NaN marks an absent time, -1 an absent token count.

    Text columns stay in Arrow (request IDs as strings, slice and error dictionary-encoded) and
    become Python objects only when ``request_id``, ``slice`` or ``error`` is read. Build one with
    ``RecordTable.from_columns``, which takes text as object arrays or Arrow arrays.
    """

    start: np.ndarray
    end: np.ndarray
    status: np.ndarray  # int8 index into STATUSES
    first_token: np.ndarray
    output_tokens: np.ndarray
    admitted: np.ndarray
    prompt_tokens: np.ndarray
    request_id_arrow: pa.Array  # string, null where absent
    slice_arrow: pa.DictionaryArray  # int32 codes into distinct non-blank names, null where absent
    error_arrow: pa.DictionaryArray
    source: str | None = None
    # arrival of each token or chunk, and tokens per chunk: Arrow list arrays (flat values + offsets), or None
    token_times: pa.Array | None = None
    token_counts: pa.Array | None = None
    # columns the schema does not know (gpu, model), by name: Arrow arrays as read
    extra: Mapping[str, Any] = dataclass_field(default_factory=lambda: NO_EXTRA)
    cached_prompt_tokens: np.ndarray = None  # type: ignore[assignment]  # -1 where absent; from_columns fills it
    attempt: np.ndarray = None  # type: ignore[assignment]  # int64, -1 where absent; from_columns fills it
    logical_id_arrow: pa.Array = None  # type: ignore[assignment]  # string, null where absent
    first_answer_token: np.ndarray = None  # type: ignore[assignment]  # NaN where absent; from_columns fills it
    reasoning_tokens: np.ndarray = None  # type: ignore[assignment]  # int64, -1 where absent; from_columns fills it

    def __post_init__(self) -> None:
        if self.cached_prompt_tokens is None:  # tables built before the field existed, or without it
            object.__setattr__(self, "cached_prompt_tokens", np.full(self.start.size, -1, dtype=np.int64))
        if self.attempt is None:
            object.__setattr__(self, "attempt", np.full(self.start.size, -1, dtype=np.int64))
        if self.logical_id_arrow is None:
            object.__setattr__(self, "logical_id_arrow", pa.nulls(self.start.size, pa.string()))
        # absent: one read-only marker seen n times, no memory per record (a simulation of 1M requests has neither)
        if self.first_answer_token is None:
            object.__setattr__(self, "first_answer_token", np.broadcast_to(np.float64(np.nan), self.start.size))
        if self.reasoning_tokens is None:
            object.__setattr__(self, "reasoning_tokens", np.broadcast_to(np.int64(-1), self.start.size))

    @property
    def has_logical_ids(self) -> bool:
        """Return True when some record names its logical request (a retrying client wrote it)."""
        return self.logical_id_arrow.null_count < len(self.logical_id_arrow)

    @cached_property
    def logical_id(self) -> np.ndarray:
        """Logical request IDs as an object array, None where absent."""
        return to_objects(self.logical_id_arrow)

    @property
    def has_reasoning(self) -> bool:
        """Return True when some record has first_answer_token or reasoning_tokens (a reasoning model's run)."""
        return bool(np.isfinite(self.first_answer_token).any() or (self.reasoning_tokens >= 0).any())

    @property
    def has_cached_prompt_tokens(self) -> bool:
        """Return True when some record says how many prompt tokens the prefix cache served."""
        return bool((self.cached_prompt_tokens >= 0).any())

    @classmethod
    def from_columns(cls, *, request_id: Any = None, slice: Any = None, error: Any = None, logical_id: Any = None,
                     source: str | None = None, extra: Mapping[str, Any] = NO_EXTRA,
                     token_times: Any = None, token_counts: Any = None,
                     **numeric: np.ndarray) -> "RecordTable":
        """Build a table from numeric arrays and text given as object arrays, lists or Arrow arrays.

        ``token_times`` and ``token_counts`` are Arrow list arrays, or per-row lists (None where absent).
        """
        n = int(np.asarray(numeric["start"]).size)

        def text(values: Any) -> Any:
            return pa.nulls(n, pa.string()) if values is None else values

        def listed(values: Any, value_type: pa.DataType) -> pa.Array | None:
            if values is None or isinstance(values, pa.Array):
                return values
            if isinstance(values, pa.ChunkedArray):
                return values.combine_chunks()
            return tt.from_lists(list(values), value_type)

        return cls(**numeric, request_id_arrow=text_array(text(request_id)), slice_arrow=categorical(text(slice)),
                   error_arrow=categorical(text(error)), source=source, extra=extra,
                   token_times=listed(token_times, pa.float64()), token_counts=listed(token_counts, pa.int64()),
                   logical_id_arrow=text_array(text(logical_id)))

    def with_columns(self, **changes: Any) -> "RecordTable":
        """Return a copy with some columns (canonical names, text as objects or Arrow) or the source replaced."""
        current: dict[str, Any] = {f: getattr(self, f) for f in _NUMERIC_FIELDS}
        current.update(request_id=self.request_id_arrow, slice=self.slice_arrow, error=self.error_arrow,
                       logical_id=self.logical_id_arrow, source=self.source, extra=self.extra, token_times=self.token_times,
                       token_counts=self.token_counts)
        unknown = set(changes) - set(current)
        if unknown:
            raise TypeError(f"not RecordTable columns: {', '.join(sorted(unknown))}")
        return RecordTable.from_columns(**{**current, **changes})

    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def is_success(self) -> np.ndarray:
        return self.status == SUCCESS

    @property
    def has_admitted(self) -> bool:
        return bool(np.isfinite(self.admitted).any())

    @property
    def has_slices(self) -> bool:
        return self.slice_arrow.null_count < len(self.slice_arrow)

    @cached_property
    def request_id(self) -> np.ndarray:
        """Request IDs as an object array, None where absent."""
        return to_objects(self.request_id_arrow)

    @cached_property
    def slice(self) -> np.ndarray:
        """Slice names as an object array, None where absent."""
        return to_objects(self.slice_arrow)

    @cached_property
    def error(self) -> np.ndarray:
        """Error causes as an object array, None where absent."""
        return to_objects(self.error_arrow)

    def slice_codes(self) -> tuple[np.ndarray, list[str]]:
        """Return int32 slice codes (-1 where absent) and the slice names they index."""
        return category_codes(self.slice_arrow)

    def take(self, index: np.ndarray) -> "RecordTable":
        """Return the rows selected by a boolean mask or an index array."""
        index = np.asarray(index)
        return RecordTable(**{f: getattr(self, f)[index] for f in _NUMERIC_FIELDS},
                           request_id_arrow=take_rows(self.request_id_arrow, index),
                           slice_arrow=take_rows(self.slice_arrow, index),
                           error_arrow=take_rows(self.error_arrow, index), source=self.source,
                           logical_id_arrow=take_rows(self.logical_id_arrow, index),
                           extra=MappingProxyType({k: take_rows(v, index) for k, v in self.extra.items()})
                           if self.extra else NO_EXTRA,
                           token_times=None if self.token_times is None else take_rows(self.token_times, index),
                           token_counts=None if self.token_counts is None else take_rows(self.token_counts, index))

    def to_dicts(self) -> list[dict[str, Any]]:
        """Return the records as canonical dicts, leaving out absent optional fields."""
        out = []
        status_names = np.array(STATUSES, dtype=object)[self.status]
        ids, slices, errors = self.request_id, self.slice, self.error
        logical = self.logical_id if self.has_logical_ids else None
        extra = {name: [_json_value(v) for v in values.to_pylist()] for name, values in self.extra.items()}
        lists = {name: arr.to_pylist() for name, arr in (("token_times", self.token_times),
                                                          ("token_counts", self.token_counts)) if arr is not None}
        for i in range(len(self)):
            rec: dict[str, Any] = {}
            if ids[i] is not None:
                rec["request_id"] = ids[i]
            rec["start"] = float(self.start[i])
            if not math.isnan(self.admitted[i]):
                rec["admitted"] = float(self.admitted[i])
            if not math.isnan(self.first_token[i]):
                rec["first_token"] = float(self.first_token[i])
            rec["end"] = float(self.end[i])
            rec["status"] = status_names[i]
            if self.prompt_tokens[i] >= 0:
                rec["prompt_tokens"] = int(self.prompt_tokens[i])
            if self.output_tokens[i] >= 0:
                rec["output_tokens"] = int(self.output_tokens[i])
            if slices[i] is not None:
                rec["slice"] = slices[i]
            if errors[i] is not None:
                rec["error"] = errors[i]
            if self.cached_prompt_tokens[i] >= 0:
                rec["cached_prompt_tokens"] = int(self.cached_prompt_tokens[i])
            if logical is not None and logical[i] is not None:
                rec["logical_id"] = logical[i]
            if self.attempt[i] >= 0:
                rec["attempt"] = int(self.attempt[i])
            if not math.isnan(self.first_answer_token[i]):
                rec["first_answer_token"] = float(self.first_answer_token[i])
            if self.reasoning_tokens[i] >= 0:
                rec["reasoning_tokens"] = int(self.reasoning_tokens[i])
            for name, values in lists.items():
                if values[i] is not None:
                    rec[name] = values[i]
            rec.update((name, values[i]) for name, values in extra.items() if values[i] is not None)
            out.append(rec)
        return out

    def to_arrow(self) -> pa.Table:
        """Return the records as an Arrow table with nulls for absent values."""
        cols = {
            "request_id": self.request_id_arrow,
            "start": pa.array(self.start),
            "admitted": pa.array(self.admitted, mask=np.isnan(self.admitted)),
            "first_token": pa.array(self.first_token, mask=np.isnan(self.first_token)),
            "end": pa.array(self.end),
            "status": pa.array(np.array(STATUSES, dtype=object)[self.status], pa.string()),
            "prompt_tokens": pa.array(self.prompt_tokens, mask=self.prompt_tokens < 0),
            "output_tokens": pa.array(self.output_tokens, mask=self.output_tokens < 0),
            "slice": text_array(self.slice_arrow),
            "error": text_array(self.error_arrow),
        }
        if self.has_cached_prompt_tokens:
            cols["cached_prompt_tokens"] = pa.array(self.cached_prompt_tokens, mask=self.cached_prompt_tokens < 0)
        if self.has_logical_ids:
            cols["logical_id"] = text_array(self.logical_id_arrow)
        if bool((self.attempt >= 0).any()):
            cols["attempt"] = pa.array(self.attempt, mask=self.attempt < 0)
        if bool(np.isfinite(self.first_answer_token).any()):
            cols["first_answer_token"] = pa.array(self.first_answer_token, mask=np.isnan(self.first_answer_token))
        if bool((self.reasoning_tokens >= 0).any()):
            cols["reasoning_tokens"] = pa.array(self.reasoning_tokens, mask=self.reasoning_tokens < 0)
        if self.token_times is not None:
            cols["token_times"] = self.token_times
        if self.token_counts is not None:
            cols["token_counts"] = self.token_counts
        return pa.table({**cols, **self.extra})


def _json_value(value: Any) -> Any:
    """Return an extra column's value as JSON can hold it: text, numbers and booleans as they are."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else str(value)


_NUMERIC_FIELDS = ("start", "end", "status", "first_token", "output_tokens", "admitted", "prompt_tokens",
                   "cached_prompt_tokens", "attempt", "first_answer_token", "reasoning_tokens")


@dataclass(frozen=True)
class Violation:
    """The first broken rule: 0-based row, field, the spec's message and a human detail."""

    row: int
    field: str | None
    message: str
    detail: str


def check_window(window_start: Any, window_end: Any) -> None:
    """Raise ValueError("Invalid observation window") unless both bounds are finite and end > start."""
    if not (is_number(window_start) and is_number(window_end)
            and math.isfinite(as_float(window_start)) and math.isfinite(as_float(window_end))
            and window_end > window_start):
        raise ValueError(MSG_WINDOW)


def first_violation(rows: ParsedRows, window_start: float, window_end: float,
                    *, optional_rules: bool = True) -> tuple[Violation | None, np.ndarray]:
    """Return the first rule violation in the spec's record-by-record order (or None) and status codes.

    ``optional_rules`` adds servebench's checks of optional fields after the spec's rules in each
    row; the spec's ``summarize`` turns them off, since its non-success records need only times.
    """
    c = rows.columns
    codes = c["status"].values
    tokens = token_rules(rows, codes) if optional_rules and rows.lists else None
    for lo in range(0, rows.n, _RULE_BLOCK):  # in blocks: each rule's mask is small, and the first bad block ends it
        hi = min(lo + _RULE_BLOCK, rows.n)
        m = _rule_masks(rows, lo, hi, window_start, window_end, optional_rules)
        any_bad = rows.not_object[lo:hi].copy()
        for mask in m.values():
            any_bad |= mask
        if tokens is not None:
            any_bad |= tokens.bad[lo:hi]
        if any_bad.any():
            j = int(np.argmax(any_bad))
            return _explain(rows, lo + j, {name: bool(mask[j]) for name, mask in m.items()}, tokens,
                            window_start, window_end), codes
    return None, codes


_RULE_BLOCK = 1 << 18
_RULE_NUMBERS = ("start", "end", "first_token", "status", "output_tokens", "admitted", "prompt_tokens",
                 "cached_prompt_tokens", "attempt", "first_answer_token", "reasoning_tokens")


def _rule_masks(rows: ParsedRows, lo: int, hi: int, window_start: float, window_end: float,
                optional_rules: bool) -> dict[str, np.ndarray]:
    """Return each rule's mask of failing rows over rows [lo, hi), in the order the rules are checked."""
    cols = rows.columns
    c = {name: cols[name].values[lo:hi] for name in _RULE_NUMBERS}
    present = {name: col.present[lo:hi] for name, col in cols.items()}
    bad = {name: col.bad[lo:hi] for name, col in cols.items()}
    s, e, f, codes = c["start"], c["end"], c["first_token"], c["status"]
    with np.errstate(invalid="ignore"):
        start_bad = ~present["start"] | bad["start"] | ~np.isfinite(s) | (s < window_start)
        end_bad = ~present["end"] | bad["end"] | ~np.isfinite(e) | (e > window_end)
        order_bad = ~start_bad & ~end_bad & (s > e)
        success = codes == SUCCESS
        m = {"start": start_bad, "end": end_bad, "order": order_bad, "status": codes < 0,
             "first_token": success & (~present["first_token"] | bad["first_token"] | ~np.isfinite(f) | (f < s)
                                       | (f > e)),
             "output_tokens": success & (~present["output_tokens"] | bad["output_tokens"]
                                         | (c["output_tokens"] < 1))}
        if not optional_rules:
            return m
        # servebench's rules for optional fields, checked after the spec's
        m["nonsuccess_first_token"] = ~success & present["first_token"] & (bad["first_token"] | ~np.isfinite(f)
                                                                           | (f < s) | (f > e))
        m["nonsuccess_output_tokens"] = ~success & present["output_tokens"] & (bad["output_tokens"]
                                                                               | (c["output_tokens"] < 0))
        a = c["admitted"]
        m["admitted"] = present["admitted"] & (bad["admitted"] | ~np.isfinite(a) | (a < s)
                                               | (a > np.where(success, f, e)))
        prompt_bad = present["prompt_tokens"] & (bad["prompt_tokens"] | (c["prompt_tokens"] < 0))
        m["prompt_tokens"] = prompt_bad
        for name in TEXT_FIELDS:
            m[name] = bad[name]
        m["cached_prompt_tokens"] = present["cached_prompt_tokens"] & (
            bad["cached_prompt_tokens"] | (c["cached_prompt_tokens"] < 0)
            | (present["prompt_tokens"] & ~prompt_bad & (c["cached_prompt_tokens"] > c["prompt_tokens"])))
        m["attempt"] = present["attempt"] & (bad["attempt"] | (c["attempt"] < 1))
        fa = c["first_answer_token"]  # after first_token (of either kind), at or before end
        m["first_answer_token"] = present["first_answer_token"] & (
            bad["first_answer_token"] | ~np.isfinite(fa) | ~present["first_token"] | (fa < f) | (fa > e))
        r = c["reasoning_tokens"]  # part of the output tokens
        m["reasoning_tokens"] = present["reasoning_tokens"] & (
            bad["reasoning_tokens"] | (r < 0)
            | (present["output_tokens"] & ~bad["output_tokens"] & (r > c["output_tokens"])))
    return m


def _explain(rows: ParsedRows, i: int, failed: dict[str, bool], tokens: tt.TokenRules | None,
             window_start: float, window_end: float) -> Violation:
    """Return the violation of row ``i``: its first failing rule (``failed``: each rule's verdict there)."""
    c = rows.columns
    start, end, ft, out, adm = c["start"], c["end"], c["first_token"], c["output_tokens"], c["admitted"]
    s, e = start.values, end.values
    prompt, cached, attempt = c["prompt_tokens"], c["cached_prompt_tokens"], c["attempt"]

    def show(col: Column) -> str:
        return shown(col.raw(i)) if col.present[i] else "missing"

    if rows.not_object[i]:
        return Violation(i, None, MSG_OBJECT, "the record is not an object")
    if failed["start"]:
        return Violation(i, "start", MSG_TIMES,
                         _number_detail(start, i, f">= window start {shown(window_start)}"))
    if failed["end"]:
        return Violation(i, "end", MSG_TIMES, _number_detail(end, i, f"<= window end {shown(window_end)}"))
    if failed["order"]:
        return Violation(i, "end", MSG_TIMES, f"end {shown(e[i])} is before start {shown(s[i])}")
    if failed["status"]:
        what = f"{show(c['status'])} is not one of" if c["status"].present[i] else "missing; expected one of"
        return Violation(i, "status", MSG_STATUS, f"{what} {', '.join(STATUSES)}")
    if failed["first_token"]:
        return Violation(i, "first_token", MSG_SUCCESS,
                         _number_detail(ft, i, f"between start {shown(s[i])} and end {shown(e[i])}"))
    if failed["output_tokens"]:
        return Violation(i, "output_tokens", MSG_SUCCESS, _int_detail(out, i, "at least 1 on success"))
    if failed.get("nonsuccess_first_token"):
        return Violation(i, "first_token", MSG_FIRST_TOKEN,
                         _number_detail(ft, i, f"between start {shown(s[i])} and end {shown(e[i])}"))
    if failed.get("nonsuccess_output_tokens"):
        return Violation(i, "output_tokens", MSG_OUTPUT, _int_detail(out, i, "at least 0"))
    if failed.get("admitted"):
        bound = "first_token" if c["status"].values[i] == SUCCESS else "end"
        return Violation(i, "admitted", MSG_ADMITTED,
                         _number_detail(adm, i, f"between start and {bound}"))
    if failed.get("prompt_tokens"):
        return Violation(i, "prompt_tokens", MSG_PROMPT, _int_detail(prompt, i, "at least 0"))
    for name in TEXT_FIELDS:
        if failed.get(name):
            v = c[name].raw(i)
            what = "valid Unicode text (a lone surrogate)" if isinstance(v, str) else "text"
            return Violation(i, name, MSG_TEXT, f"{show(c[name])} is not {what}")
    if failed.get("cached_prompt_tokens"):
        bound = (f"between 0 and prompt_tokens {shown(prompt.values[i])}" if prompt.present[i] else "at least 0")
        return Violation(i, "cached_prompt_tokens", MSG_CACHED, _int_detail(cached, i, bound))
    if failed.get("attempt"):
        return Violation(i, "attempt", MSG_ATTEMPT, _int_detail(attempt, i, "at least 1", "an attempt number"))
    if failed.get("first_answer_token"):
        answer = c["first_answer_token"]
        if not ft.present[i] and not answer.bad[i] and math.isfinite(answer.values[i]):
            detail = (f"{show(answer)} is given but first_token is missing (the first token of either kind "
                      "comes first)")
        else:
            detail = _number_detail(answer, i, f"between first_token {shown(ft.values[i])} and end {shown(e[i])}")
        return Violation(i, "first_answer_token", MSG_FIRST_ANSWER, detail)
    if failed.get("reasoning_tokens"):
        bound = (f"between 0 and output_tokens {shown(out.values[i])}" if out.present[i] and not out.bad[i]
                 else "at least 0")
        return Violation(i, "reasoning_tokens", MSG_REASONING, _int_detail(c["reasoning_tokens"], i, bound))
    if tokens is not None and tokens.bad[i]:
        field, message, detail = tokens.explain(i)
        return Violation(i, field, message, detail)
    raise AssertionError("unreachable: a row failed but no rule explains it")


def token_rules(rows: ParsedRows, codes: np.ndarray) -> tt.TokenRules | None:
    """Return the token-time rules' masks over parsed rows (see ``token_times.check``)."""
    c = rows.columns
    return tt.check(rows.lists.get("token_times"), rows.lists.get("token_counts"), start=c["start"].values,
                    end=c["end"].values, first_token=c["first_token"].values,
                    first_token_present=c["first_token"].present & ~c["first_token"].bad,
                    output_tokens=c["output_tokens"].values,
                    output_present=c["output_tokens"].present & ~c["output_tokens"].bad,
                    success=codes == SUCCESS, shown=shown)


def _typed_text(col: Column, v: Any) -> bool:
    """Whether a refused value is a number written as text in a typed file (JSON's "5", a Parquet text column)."""
    return not col.from_text and isinstance(v, str) and NUMBER_TEXT.match(v) is not None


def _number_detail(col: Column, i: int, bound: str) -> str:
    if not col.present[i]:
        return "missing"
    v = col.raw(i)
    if col.bad[i]:
        if _typed_text(col, v):
            return f"{shown(v)} is text, not a number (nothing is coerced: store it as a number)"
        return f"{shown(v)} is not a number"
    if not math.isfinite(col.values[i]):
        if is_whole(v) or (isinstance(v, str) and WHOLE_TEXT.fullmatch(v)):
            return f"{shown(v)} is too large for a time in seconds"
        return f"{shown(v)} is not a finite number"
    return f"{shown(v)} must be {bound}"


def _int_detail(col: Column, i: int, bound: str, what: str = "a token count") -> str:
    """Say why row ``i`` of an integer field fails; ``what`` names the field's kind in the "too large" message."""
    if not col.present[i]:
        return "missing"
    v = col.raw(i)
    if col.bad[i]:
        if _typed_text(col, v):
            return f"{shown(v)} is text, not an integer (nothing is coerced: store it as a number)"
        if is_whole(v) or (isinstance(v, str) and WHOLE_TEXT.fullmatch(v)):
            return f"{shown(v)} is too large ({what} must be below 10**18)"
        return f"{shown(v)} is not an integer"
    return f"{shown(v)} must be {bound}"


def validate(rows: ParsedRows, window_start: float, window_end: float) -> RecordTable:
    """Return the validated table, or raise RecordValidationError naming file, row and field."""
    violation, codes = first_violation(rows, window_start, window_end)
    if violation is not None:
        raise RecordValidationError(
            f"{violation.message}: {violation.detail}", source=rows.source, row=violation.row + 1,
            field=violation.field, rule=violation.message)
    return build_table(rows, codes)


def build_table(rows: ParsedRows, codes: np.ndarray) -> RecordTable:
    """Assemble a RecordTable from parsed rows that passed validation."""
    c = rows.columns
    return RecordTable.from_columns(
        start=c["start"].values.astype(np.float64, copy=False),
        end=c["end"].values.astype(np.float64, copy=False),
        status=codes,
        first_token=c["first_token"].values,
        output_tokens=c["output_tokens"].values,
        admitted=c["admitted"].values,
        prompt_tokens=c["prompt_tokens"].values,
        cached_prompt_tokens=c["cached_prompt_tokens"].values,
        attempt=c["attempt"].values,
        first_answer_token=c["first_answer_token"].values,
        reasoning_tokens=c["reasoning_tokens"].values,
        request_id=c["request_id"].values,
        logical_id=c["logical_id"].values,
        slice=c["slice"].values,
        error=c["error"].values,
        source=rows.source,
        extra=rows.extra,
        token_times=_valid_list(rows, "token_times"),
        token_counts=_valid_list(rows, "token_counts"),
    )


def _valid_list(rows: ParsedRows, name: str) -> pa.Array | None:
    """Return a validated list column as Arrow, or None when no record has it."""
    col = rows.lists.get(name)
    return col.array if col is not None and col.present.any() else None


def default_window(rows: ParsedRows) -> tuple[float, float]:
    """Return [min start, max end] over the rows whose times parse, the default observation window."""
    s, e = rows.columns["start"].values, rows.columns["end"].values
    fs = s if np.isfinite(s).all() else s[np.isfinite(s)]
    fe = e if np.isfinite(e).all() else e[np.isfinite(e)]
    if fs.size == 0 or fe.size == 0:
        raise RecordValidationError(f"{MSG_WINDOW}: no record has a finite start and end",
                                    source=rows.source, rule=MSG_WINDOW)
    return float(fs.min()), float(fe.max())

